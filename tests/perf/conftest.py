"""Benchmarks: run on demand with ``pytest tests/perf`` (the default run ignores them).

Every figure with a goal goes through the ``perf_goal`` fixture, which keeps it and checks
it against its goal and noise margin (:mod:`tests.perf.goals`):

* ``HARNESS_PERF_GOALS=enforce`` (the default, CI's mode): a figure past its goal by more
  than its margin makes this conftest run its test once more; past the margin on the better
  of the two measurements, the test fails. Past the goal within the margin is a
  ``PERF WARNING`` line;
* ``HARNESS_PERF_GOALS=warn`` (a local look): past the margin is a warning too.

A broken measurement (not a finite positive number) always fails, and so does any error in
the measured code. At the end of the session every figure is written to
``HARNESS_PERF_JSON`` (default ``perf_ratios.json``), and appended with the commit to the
history file ``HARNESS_PERF_HISTORY`` names (CI keeps it between runs).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from _pytest.runner import runtestprotocol

from tests.perf.goals import MARGIN, REMEASURE, check_goal, write_figures


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.perf)


@pytest.fixture
def perf_goal(capsys: pytest.CaptureFixture[str],
              request: pytest.FixtureRequest) -> Callable[..., bool]:
    """``perf_goal(name, value, goal, op="<=", unit="x", margin=1.15, yardstick=False)``:
    see :func:`check_goal`; a warning line reaches the terminal even under output capture."""

    def check(name: str, value: float, goal: float, *, op: str = "<=", unit: str = "x",
              margin: float = MARGIN, yardstick: bool = False) -> bool:
        with capsys.disabled():
            return check_goal(name, value, goal, op=op, unit=unit, margin=margin,
                              yardstick=yardstick, nodeid=request.node.nodeid)

    return check


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """Run a perf test; when a figure of it was past its margin, run it once more (fresh
    function fixtures) and report only the second run, whose figures are the better of two."""
    if item.get_closest_marker("perf") is None:
        return None
    hook = item.ihook
    hook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    reports = runtestprotocol(item, nextitem=nextitem, log=False)
    if item.nodeid in REMEASURE:
        reporter = item.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"\nperf: a figure of {item.nodeid} was past its margin: "
                                "measuring it once more")
        reports = runtestprotocol(item, nextitem=nextitem, log=False)
    for report in reports:
        hook.pytest_runtest_logreport(report=report)
    hook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    write_figures(session, int(exitstatus))
