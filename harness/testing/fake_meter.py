"""A FAKE usage meter for tests: ``--meter fake-file:PATH`` reads the usage from a file.

Not a billing meter: the "usage" is whatever a test (or an operator trying the budget
stop) wrote to PATH, either ``{"usage": 12.5, "limit_remaining": 7.5}`` or a bare number.
It lets the campaign budget, the meter supervisor and the blind-meter stop be exercised
without a provider key. A missing or unreadable file is a meter outage
(``MeterError("unavailable")``), a file without a usage ``MeterError("parse")``.

Importing it registers the ``fake-file`` scheme with :func:`harness.budget.meter.register_meter`:
nothing in a real run imports it, so ``--meter fake-file:PATH`` works only where a test
loads it, as a pytest plugin (``-p harness.testing.fake_meter``) or through
:mod:`harness.testing.plugin`, which every self-test suite loads.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from harness.budget.errors import MeterError
from harness.budget.meter import register_meter

if TYPE_CHECKING:  # the budget models load when a meter reads, not at collection
    from harness.budget.models import MeterReading

SCHEME = "fake-file"


@register_meter(SCHEME)
class FakeFileMeter:
    """Test double, not a billing meter: the usage is whatever a test wrote to a file."""

    name = SCHEME

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).absolute()
        self.fingerprint = f"{SCHEME}:" + hashlib.sha256(str(self.path).encode()).hexdigest()[:16]

    def read(self, timeout_sec: float) -> MeterReading:
        requested = time.time()
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise MeterError("unavailable", f"fake meter file {self.path}: {exc}") from exc
        data = raw if isinstance(raw, dict) else {"usage": raw}
        try:
            usage = float(data["usage"])
        except (KeyError, TypeError, ValueError) as exc:
            raise MeterError("parse", f"fake meter file {self.path} has no usage") from exc
        remaining = data.get("limit_remaining")
        from harness.budget.models import MeterReading

        return MeterReading(
            usage=usage,
            requested_at_unix=requested,
            observed_at_unix=time.time(),
            limit_remaining=None if remaining is None else float(remaining),
            source=self.name,
        )
