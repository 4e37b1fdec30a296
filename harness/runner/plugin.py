"""pytest entry point: markers and the role objects (thin); the options are
:mod:`harness.runner.options`'s.

The plugin stays inert unless a benchmark conftest provides an adapter
(``pytest_harness_adapters``), so ``pytest tests`` of any project is unaffected.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from harness.core.adapter import BenchmarkAdapter
from harness.core.errors import RefusalError
from harness.core.fsutil import read_json
from harness.core.layout import workers_dir
from harness.core.signals import StopGuard
from harness.run.plan import (
    PlanError,
    parse_count,
    parse_shard,
    rewrite_attempt_keywords,
    rewrite_marker_args,
)
from harness.runner import hookspecs
from harness.runner.options import RunOptions
from harness.runner.selection import (
    GIVEN_KEYWORD_KEY,
    apply_task_file,
    check_requested_ids,
    requested_ids,
    resolve_attempts,
    resume_benchmarks,
    user_selectors,
    worker_instances,
)
from harness.runner.startup import LOST_CONFIG_KEY
from harness.runner.worker import (
    CONTROLLER_KEY,
    RetryHooks,
    RetryPolicy,
    WorkerHooks,
    harness_instance,
    item_spec,
)

if TYPE_CHECKING:  # the controller and the file models load when a run starts
    from harness.runner.controller import Controller

# The runner's own plugins: Docker sandbox fixtures, campaign budgets, agents.
# Its options are all registered by harness.runner.options (first: the --help groups).
pytest_plugins = ["harness.runner.options", "harness.runner.startup",
                  "harness.runner.selection", "harness.runner.sandbox_fixtures",
                  "harness.runner.sandbox_hooks",
                  "harness.runner.pull_plugin", "harness.runner.engine_plugin",
                  "harness.runner.engine_admission", "harness.runner.order",
                  "harness.runner.budget_plugin", "harness.runner.agent_plugin",
                  "harness.runner.pacing_plugin", "harness.runner.deadline_plugin"]


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def read_retry(config: pytest.Config) -> RetryPolicy:
    """``--retry-infra`` (an integer >= 0, else exit 2) and its back-off (checked when
    parsed: :mod:`harness.runner.options`)."""
    opt = config.option
    limit = parse_count("--retry-infra", opt.retry_infra, minimum=0, example="--retry-infra 1")
    return RetryPolicy(limit=limit, base_s=float(opt.retry_infra_backoff))


def collect_adapters(config: pytest.Config) -> dict[str, BenchmarkAdapter]:
    adapters: dict[str, BenchmarkAdapter] = {}
    for group in config.hook.pytest_harness_adapters(config=config):
        for adapter in group or []:
            adapters.setdefault(adapter.name, adapter)
    return adapters


def result_config(config: pytest.Config, adapters: dict[str, BenchmarkAdapter]) -> dict[str, Any]:
    out: dict[str, Any] = {"benchmarks": sorted(adapters)}
    for extra in config.hook.pytest_harness_result_config(config=config):
        out.update(extra or {})
    for name, adapter in sorted(adapters.items()):
        for key, value in adapter.result_config(config).items():
            out[f"{name}.{key}"] = value
    return out


def fail_usage(message: str, code: int = 2) -> None:
    pytest.exit(message, returncode=code)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "harness_benchmark(name): a benchmark's instance test")
    if LOST_CONFIG_KEY in config.stash:
        fail_usage(config.stash[LOST_CONFIG_KEY])
        return
    adapters = collect_adapters(config)
    if not adapters:
        return
    if config.option.markexpr:
        config.option.markexpr = rewrite_marker_args(config.option.markexpr)
    if config.option.keyword and "@" in config.option.keyword:
        config.stash[GIVEN_KEYWORD_KEY] = config.option.keyword
        config.option.keyword = rewrite_attempt_keywords(config.option.keyword)
    for adapter in adapters.values():
        for name in adapter.marker_names:
            config.addinivalue_line("markers", f"{name}(value): {adapter.name} attribute")
    worker_input = getattr(config, "workerinput", None)
    hooks = WorkerHooks(config, adapters)  # every collectable benchmark parametrizes
    try:
        apply_task_file(config)
        adapters = resume_benchmarks(config, adapters)
        hooks.samples = resolve_attempts(config)
        hooks.retry = read_retry(config)
    except PlanError as exc:
        fail_usage(str(exc))
        return
    config.pluginmanager.register(hooks, "harness-worker")
    config.pluginmanager.register(RetryHooks(hooks), "harness-retry")
    if config.option.collectonly:
        return
    from harness.core.models import Plan
    from harness.run.manifest import PLAN_NAME
    from harness.runner.controller import Controller
    from harness.runner.instance import RunContext

    if worker_input is not None:
        info = worker_input.get("harness")
        if not info:
            return
        root = Path(info["run_root"])
        plan = Plan.model_validate(read_json(root / PLAN_NAME))
        run = RunContext(run_id=info["run_id"], run_root=root,
                         worker_id=worker_input.get("workerid", "gw?"), role="worker",
                         plan=plan, adapters=adapters, samples=hooks.samples)
        workers_dir(root).mkdir(parents=True, exist_ok=True)
        (workers_dir(root) / f"{run.worker_id}.pid").write_text(str(os.getpid()))
        hooks.run = run
        return
    try:
        options = RunOptions.of(config, user_selectors(config, list(adapters.values())))
        shard = parse_shard(options.shard_text)
    except (PlanError, RefusalError) as exc:  # a benchmark's own option, e.g. --pb-eval bogus
        fail_usage(str(exc))
        return
    controller = Controller(config, options)
    config.stash[CONTROLLER_KEY] = controller
    try:
        run_id, root = controller.resolve_root(sorted(adapters))
    except PlanError as exc:
        fail_usage(str(exc))
        return
    xdist = _xdist_active(config)
    run = RunContext(
        run_id=run_id, run_root=root, worker_id="controller" if xdist else "main",
        role="controller" if xdist else "single",
        plan=Plan(run_id=run_id, created_at_unix=time.time(), dry_run=options.dry_run,
                  shard=shard),
        adapters=adapters, samples=hooks.samples,
    )
    controller.run = run
    config.pluginmanager.register(
        ControllerHooks(controller, None if xdist else hooks), "harness-controller")
    if not xdist:
        hooks.run = run
        hooks.controller = controller


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A benchmark instance is bounded by its own limits (``--pb-task-timeout``, the scorer's),
    never by pytest-timeout's per-test limit, which a project's configuration may set for
    its own tests (this repository's is 900 s; a ProgramBench task may work 6 h)."""
    if not config.pluginmanager.hasplugin("timeout"):
        return

    for item in items:
        if item_spec(item) is not None:
            item.add_marker(pytest.mark.timeout(0))


def _xdist_active(config: pytest.Config) -> bool:
    """True when this process hands the items to xdist workers: a distribution mode and
    somewhere to send them (``-n N`` fills ``--tx``). ``--dist loadgroup`` alone, as a
    project's ``addopts`` may give it, runs the items here."""
    dist = getattr(config.option, "dist", "no")
    return dist not in (None, "no") and bool(getattr(config.option, "tx", None))


class ControllerHooks:
    """Session-level hooks of the controller process."""

    def __init__(self, controller: Controller, worker_hooks: WorkerHooks | None) -> None:
        self.c = controller
        self.worker_hooks = worker_hooks  # single-process mode: items run here too

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        c = self.c
        run = c.run
        assert run is not None
        config = session.config
        try:  # before the run root exists: an unknown id records nothing
            check_requested_ids(config, run.adapters)
        except (PlanError, RefusalError) as exc:
            c.refused = True  # pytest prints the one line; no repeat at unconfigure
            c.release()
            fail_usage(str(exc))
        cfg = result_config(config, run.adapters)
        versions = {name: a.version() for name, a in sorted(run.adapters.items())}
        argv = [sys.executable, "-m", "pytest", *config.invocation_params.args]
        workers = int(getattr(config.option, "numprocesses", 0) or 0)
        from harness.runner.admission_pipeline import admit as admit_run  # its steps
        try:
            c.admit(run, cfg, versions, argv, workers, admission=admit_run)
        except RefusalError as exc:
            c.release()
            fail_usage(str(exc), exc.exit_code)
        c.start_monitor()
        guard = StopGuard(
            run.run_root,
            forward_to=c.worker_pids if run.role == "controller" else None,
            on_second=c.emergency_exit,
        )
        guard.install()
        c.guard = guard
        if self.worker_hooks is not None:
            self.worker_hooks.guard = guard

    def pytest_configure_node(self, node: Any) -> None:
        run = self.c.run
        assert run is not None
        node.workerinput["harness"] = {"run_root": str(run.run_root), "run_id": run.run_id,
                                       **worker_instances(self.c.config)}

    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.c.load_worker_selection(node.gateway.id)

    def pytest_internalerror(self, excrepr: Any, excinfo: Any) -> None:
        self.c.internal_errors += 1

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.c.collection_errors += 1

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self.c.instance_started(nodeid, "controller")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.c.on_report(report)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        code = self.c.finish(int(exitstatus))
        if code is not None:
            session.exitstatus = code

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        from harness.runner.summary import print_summary  # its models stay off collection

        print_summary(terminalreporter, self.c)
        line = self.c.retries_line()
        if line is not None:
            terminalreporter.write_line(line)

    @pytest.hookimpl(tryfirst=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.c.refused:
            # pytest already printed the refusal ("Exit: ..."); its terminal reporter would
            # repeat it framed in "!": keep the one line. (pytest private, no public API:
            # major pinned, checked by tests/runner/test_pytest_private_reach.py)
            reporter = config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None and hasattr(reporter, "_keyboardinterrupt_memo"):
                reporter._keyboardinterrupt_memo = None
        self.c.crash_finalize(None)
        self.c.release()
        if self.c.guard is not None:
            self.c.guard.uninstall()


__all__ = ["CONTROLLER_KEY", "harness_instance", "requested_ids", "user_selectors"]
