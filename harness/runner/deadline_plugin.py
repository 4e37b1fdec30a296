"""``--phase-timeout PHASE=SECONDS`` (a pytest plugin; :mod:`harness.runner.deadlines`):
parsed once, refused by name when bad, recorded at admission, read by the benchmarks'
instance code through :func:`harness.runner.deadlines.phase`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from harness.runner.deadlines import DEFAULTS, PHASES, deadlines

if TYPE_CHECKING:
    from harness.runner.instance import RunContext


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("harness")
    defaults = ", ".join(f"{p} {DEFAULTS[p]:g}" if DEFAULTS[p] else f"{p} none"
                         for p in PHASES)
    group.addoption("--phase-timeout", action="append", default=[], metavar="PHASE=SECONDS",
                    help=f"deadline of an instance's phase; past it the instance is "
                         f"infrastructure, phase_timeout naming the phase (repeatable; 0: "
                         f"none; defaults in seconds: {defaults}; agent: the task timeout)")


def admit_deadlines(config: pytest.Config, run: RunContext) -> None:
    found = deadlines(config)
    if run.manifest is not None:
        run.manifest.extra.phase_deadlines = dict(found)
