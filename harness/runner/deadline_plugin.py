"""``--phase-timeout PHASE=SECONDS`` (a pytest plugin; :mod:`harness.runner.deadlines`):
each entry checked when parsed (:mod:`harness.runner.options`), read once, recorded at
admission, read by the benchmarks' instance code through
:func:`harness.runner.deadlines.phase`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from harness.runner.deadlines import deadlines

if TYPE_CHECKING:
    from harness.runner.instance import RunContext


def admit_deadlines(config: pytest.Config, run: RunContext) -> None:
    found = deadlines(config)
    if run.manifest is not None:
        run.manifest.extra.phase_deadlines = dict(found)
