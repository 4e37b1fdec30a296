"""ProgramBench as a pytest benchmark: options, the adapter, and the session-level steps
(instance order at admission; batch eval and ``programbench info`` at the end)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench.adapter import ProgramBenchAdapter, add_options
from harness.adapter import BenchmarkAdapter
from harness.errors import RefusalError
from harness.plugin import user_selectors
from harness.worker import item_spec

if TYPE_CHECKING:  # loaded when a run starts, not at collection
    from harness.models import TaskRow
    from harness.runtime import RunContext

ADAPTER = ProgramBenchAdapter()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_harness_adapters(config: pytest.Config) -> list[BenchmarkAdapter]:
    return [ADAPTER]


def pytest_harness_admit(config: pytest.Config, run: RunContext) -> None:
    from benchmarks.programbench.session import write_instance_order  # off collection

    refuse_setuid_less_runtime(config)
    write_instance_order(config, run, ADAPTER)


def refuse_setuid_less_runtime(config: pytest.Config) -> None:
    """The reference program is protected by a setuid launcher; gVisor's runsc (as packaged
    by Debian) ignores setuid, so the launcher could not reach the program: refuse, naming
    the fix, rather than run every instance into an infrastructure failure."""
    runtime = config.getoption("sandbox_runtime", None)
    if runtime and "runsc" in str(runtime):
        raise RefusalError(
            f"--runtime {runtime}: ProgramBench protects the reference program with a setuid "
            "launcher, which gVisor ignores (the agent could not run the reference); run "
            "ProgramBench on the default runtime (Cowork Bench supports --runtime runsc)",
            stage="sandbox", reason="runtime_unsupported")


def pytest_harness_session_results(config: pytest.Config, run: RunContext,
                                   rows: dict[str, TaskRow],
                                   append: Callable[[TaskRow], None]) -> None:
    from benchmarks.programbench.session import finish_session  # scorer: at the end only

    finish_session(config, run, ADAPTER, rows, append)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The fixture is not one of the 200 tasks: a run that selects nothing in particular
    leaves it out (so the denominator stays 200); -k/-m/--instance/--pb-* select it.

    ``--pb-slice`` applies to the selected order: after -k/-m (pytest's own hook ran before
    this trylast one) and ``--pb-filter``, before ``--instance`` and ``--shard``.
    """
    if user_selectors(config, [ADAPTER]):
        ours = [i for i in items if _is_programbench(i)]
        kept = set(ADAPTER.slice_of(config, ours))
        drop = [i for i in ours if i not in kept]
    elif config.getoption("resume_from"):
        drop = []  # a resume runs the ancestor's selection, fixture included when it had it
    else:
        drop = [i for i in items if f"[{FIXTURE_ID}]" in i.nodeid]
    if drop:
        config.hook.pytest_deselected(items=drop)
        gone = set(drop)
        items[:] = [i for i in items if i not in gone]


def _is_programbench(item: pytest.Item) -> bool:
    found = item_spec(item)
    return found is not None and found[0] == ADAPTER.name

