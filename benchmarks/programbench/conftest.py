"""ProgramBench as a pytest benchmark: options, the adapter, and the session-level steps
(instance order at admission; batch eval and ``programbench info`` at the end)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench.adapter import ProgramBenchAdapter, add_options
from benchmarks.programbench.session import finish_session, write_instance_order
from harness.adapter import BenchmarkAdapter
from harness.models import TaskRow
from harness.plugin import user_selectors
from harness.runtime import RunContext

ADAPTER = ProgramBenchAdapter()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_harness_adapters(config: pytest.Config) -> list[BenchmarkAdapter]:
    return [ADAPTER]


def pytest_harness_admit(config: pytest.Config, run: RunContext) -> None:
    write_instance_order(config, run, ADAPTER)


def pytest_harness_session_results(config: pytest.Config, run: RunContext,
                                   rows: dict[str, TaskRow],
                                   append: Callable[[TaskRow], None]) -> None:
    finish_session(config, run, ADAPTER, rows, append)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The fixture is not one of the 200 tasks: a run that selects nothing in particular
    leaves it out (so the denominator stays 200); -k/-m/--instance/--pb-* select it."""
    if user_selectors(config, [ADAPTER]) or config.getoption("resume_from"):
        return  # a resume runs the ancestor's selection, fixture included when it had it
    keep = [i for i in items if f"[{FIXTURE_ID}]" not in i.nodeid]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep
