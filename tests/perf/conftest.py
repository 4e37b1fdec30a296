"""Benchmarks: run on demand with ``pytest tests/perf`` (the default run ignores them).

Every figure with a goal goes through the ``perf_goal`` fixture, which keeps it and checks
it against its goal:

* ``HARNESS_PERF_GOALS=enforce`` (the default): a figure past its goal fails its test;
* ``HARNESS_PERF_GOALS=warn`` (CI's mode, ``.ci/run``): a figure past its goal is printed as
  a ``PERF WARNING`` line with the goal beside it and the test passes; a broken measurement
  (not a finite positive number) still fails, and so does any error in the measured code.

At the end of the session every figure is written to ``HARNESS_PERF_JSON`` (default
``perf_ratios.json`` in the current directory) as ``{name: {value, goal, op, unit, met}}``,
merged into what an earlier perf run of the same file kept.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.perf.goals import check_goal, write_figures


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.perf)


@pytest.fixture
def perf_goal(capsys: pytest.CaptureFixture[str]) -> Callable[..., bool]:
    """``perf_goal(name, value, goal, op="<=", unit="x")``: see :func:`check_goal`; a
    warning line reaches the terminal even under output capture."""

    def check(name: str, value: float, goal: float, *, op: str = "<=",
              unit: str = "x") -> bool:
        with capsys.disabled():
            return check_goal(name, value, goal, op=op, unit=unit)

    return check


def pytest_sessionfinish(session: pytest.Session) -> None:
    write_figures(session)
