"""ProgramBench as a pytest benchmark: options, the adapter, and the session-level steps
(instance order at admission; batch eval and ``programbench info`` at the end)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from benchmarks.programbench.adapter import ProgramBenchAdapter, add_options
from benchmarks.programbench.tasks import FIXTURE_PREFIX
from harness.api import BenchmarkAdapter, RefusalError, agent_choice, item_spec, requested_ids

if TYPE_CHECKING:  # loaded when a run starts, not at collection
    from harness.api import RunContext, TaskRow

ADAPTER = ProgramBenchAdapter()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_harness_adapters(config: pytest.Config) -> list[BenchmarkAdapter]:
    return [ADAPTER]


def pytest_harness_admit(config: pytest.Config, run: RunContext) -> None:
    from benchmarks.programbench.session import write_instance_order  # off collection

    refuse_setuid_less_runtime(config)
    check_grader_version(config, run)
    write_instance_order(config, run, ADAPTER)


def check_grader_version(config: pytest.Config, run: RunContext) -> None:
    """A ``programbench`` that can inflate scores (before 1.2.5): a paid run is refused
    unless waived; any run under it is not reportable, the reason on record."""
    from benchmarks.programbench.grader_version import (
        SECTION,
        WAIVER,
        GraderRecord,
        grader_problem,
        scoring_version,
    )

    version = scoring_version()
    problem = grader_problem(version)
    waived = problem is not None and bool(config.getoption("pb_allow_grader_version"))
    if run.manifest is not None:
        run.manifest.extra.set_section(SECTION, GraderRecord(
            version=version, scores_correctly=problem is None, waived=waived))
    if problem is None:
        return
    if agent_choice(config).spends_money and not waived:
        raise RefusalError(f"{problem}; or pass {WAIVER} (the run is then not reportable)",
                           stage="benchmark", reason="grader_version")
    if run.manifest is not None:
        extra = run.manifest.extra
        reasons = (extra.not_reportable_by_benchmark or {}).get(ADAPTER.name, [])
        note = f" (waived: {WAIVER})" if waived else ""
        extra.not_reportable_by_benchmark = {**(extra.not_reportable_by_benchmark or {}),
                                             ADAPTER.name: [*reasons, problem + note]}


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


def pytest_configure(config: pytest.Config) -> None:
    """A fixture task named without ``--pb-fixtures`` is refused with the flag that runs it
    (the fixture tasks never join a selection of the real ones)."""
    if config.option.help or config.option.version:
        return
    try:  # a bad option is one line and exit 2, also with --collect-only (no run admitted)
        if ADAPTER.settings(config).fixtures:
            return
    except RefusalError as exc:
        pytest.exit(str(exc), returncode=2)
    named = [i for i in requested_ids(config) if i.startswith(FIXTURE_PREFIX)]
    if named:
        pytest.exit(f"{', '.join(named)}: an offline fixture task, not one of the "
                    f"{ADAPTER.benchmark_size} ProgramBench tasks; add --pb-fixtures to run "
                    f"the fixture tasks", returncode=2)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--pb-slice`` applies to the selected order: after -k/-m (pytest's own hook ran before
    this trylast one) and ``--pb-filter``, before ``--instance`` and ``--shard``.

    Which tasks are collected at all is the adapter's: the 200 real tasks, or with
    ``--pb-fixtures`` (or a resume of such a run) the offline fixture tasks instead.
    """
    if not ADAPTER.settings(config).slice:
        return
    ours = [i for i in items if _is_programbench(i)]
    kept = set(ADAPTER.slice_of(config, ours))
    drop = [i for i in ours if i not in kept]
    if drop:
        config.hook.pytest_deselected(items=drop)
        gone = set(drop)
        items[:] = [i for i in items if i not in gone]


def _is_programbench(item: pytest.Item) -> bool:
    found = item_spec(item)
    return found is not None and found[0] == ADAPTER.name
