"""Item-level hooks that run where the tests run (each xdist worker, or the single process):
parametrization, plan filtering, the per-item row, signal guard, pass/fail semantics."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Literal

import pytest

from harness.core.adapter import BenchmarkAdapter, InstanceSpec
from harness.core.outcomes import INFRA_PROPERTY, ROW_PROPERTY, Outcome, instance_key
from harness.core.signals import StopGuard, read_stop

if TYPE_CHECKING:  # the runtime (pydantic rows) loads when an instance runs, not at collection
    from harness.runner.controller import Controller
    from harness.runner.instance import InstanceContext, RowState, RunContext

STATE_KEY: pytest.StashKey[RowState] = pytest.StashKey()


SPEC_KEY: pytest.StashKey[tuple[str, InstanceSpec] | None] = pytest.StashKey()


def item_spec(item: pytest.Item) -> tuple[str, InstanceSpec] | None:
    """``(benchmark, spec)`` of a harness item (looked up once per item), else None."""
    if SPEC_KEY in item.stash:
        return item.stash[SPEC_KEY]
    found: tuple[str, InstanceSpec] | None = None
    callspec = getattr(item, "callspec", None)
    spec = callspec.params.get("harness_instance") if callspec is not None else None
    mark = item.get_closest_marker("harness_benchmark")
    if isinstance(spec, InstanceSpec) and mark is not None:
        found = str(mark.args[0]), spec
    item.stash[SPEC_KEY] = found
    return found


class WorkerHooks:
    def __init__(self, config: pytest.Config, adapters: dict[str, BenchmarkAdapter]) -> None:
        self.config = config
        self.adapters = adapters
        self.run: RunContext | None = None
        self.controller: Controller | None = None  # set in single-process mode
        self.guard: StopGuard | None = None

    # collection -------------------------------------------------------------------------
    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "harness_instance" not in metafunc.fixturenames:
            return
        mark = metafunc.definition.get_closest_marker("harness_benchmark")
        if mark is None or not mark.args:
            raise pytest.UsageError(
                f"{metafunc.definition.nodeid} requests harness_instance but has no "
                f"pytest.mark.harness_benchmark('<name>') marker; add it to the test module")
        name = str(mark.args[0])
        adapter = self.adapters.get(name)
        if adapter is None:
            raise pytest.UsageError(
                f"no adapter for benchmark {name!r}: its conftest.py must return one from "
                f"pytest_harness_adapters")
        params = []
        for spec in adapter.instances(self.config):
            marks = [getattr(pytest.mark, attr)(value, value=value)
                     for attr, value in spec.marker_values()]
            params.append(pytest.param(spec, id=spec.instance_id, marks=marks))
        metafunc.parametrize("harness_instance", params, indirect=True)

    def pytest_itemcollected(self, item: pytest.Item) -> None:
        found = item_spec(item)
        if found is not None:
            spec = found[1]
            item.extra_keyword_matches.update(value for _, value in spec.marker_values())
            item.extra_keyword_matches.update(spec.keywords)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        keep: list[pytest.Item] = []
        dropped: list[pytest.Item] = []
        wanted_ids = set(config.option.instance or [])
        if wanted_ids:
            known = {s[1].instance_id for s in map(item_spec, items) if s}
            unknown = sorted(wanted_ids - known)
            if unknown:
                raise pytest.UsageError(
                    f"--instance {', '.join(unknown)}: no such instance id; "
                    f"list them with --collect-only -q")
        found = {item: item_spec(item) for item in items}
        keys = {item: instance_key(f[0], f[1].instance_id) for item, f in found.items() if f}
        from harness.run.plan import select_keys

        # Shard and frozen selection (plan.selection is None when the user gave selectors).
        kept = set(select_keys(keys.values(), self.run.plan)) if self.run else set(keys.values())
        for item in items:
            spec = found[item]
            ok = spec is None or (
                (not wanted_ids or spec[1].instance_id in wanted_ids) and keys[item] in kept)
            (keep if ok else dropped).append(item)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.run is None:
            return
        nodeids: dict[str, str] = {}
        for item in session.items:
            found = item_spec(item)
            if found:
                nodeids[item.nodeid] = instance_key(found[0], found[1].instance_id)
        if self.controller is not None:
            self.controller.set_selection(nodeids)
        else:
            from harness.runner.controller import write_collection

            write_collection(self.run.run_root, self.run.worker_id, nodeids)

    # running ----------------------------------------------------------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, Any, Any]:
        if self.run is None or self.run.role != "worker" or session.config.option.collectonly:
            return (yield)  # the controller installs the guard of a single process
        self.guard = StopGuard(self.run.run_root)
        self.guard.install()
        try:
            return (yield)
        finally:
            self.guard.uninstall()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None
                                ) -> bool | None:
        """A carried instance (settled in an ancestor) needs no fixture, capture, call or
        row (the controller wrote it at selection, see ``Controller.carry_settled``): its
        two reports (a skipped setup, a teardown) are made here, after the teardown of what
        the previous item left set up. A resume of thousands of settled instances then costs
        little more than collecting them."""
        run = self.run
        if run is None or not run.plan.carried:
            return None
        found = item_spec(item)
        if found is None:
            return None
        benchmark, spec = found
        carried = run.plan.carried.get(instance_key(benchmark, spec.instance_id))
        if carried is None:
            return None
        ihook = item.ihook
        nodeid, location = item.nodeid, item.location
        ihook.pytest_runtest_logstart(nodeid=nodeid, location=location)
        now = time.time()
        path, lineno, _ = location
        keywords: dict[str, Literal[1]] = dict.fromkeys(item.keywords, 1)
        ihook.pytest_runtest_logreport(report=pytest.TestReport(
            nodeid, location, keywords, "skipped",
            (path, (lineno or 0) + 1,
             f"Skipped: settled_in_ancestor: settled in run {carried.carried_from}"),
            "setup", duration=0.0, start=now, stop=now,
            user_properties=list(item.user_properties)))
        outcome: Literal["passed", "failed"] = "passed"
        longrepr: str | None = None
        try:  # what the previous instance left set up and the next one does not need
            item.session._setupstate.teardown_exact(nextitem)
        except Exception as exc:
            outcome, longrepr = "failed", f"teardown: {type(exc).__name__}: {exc}"
        stop = time.time()
        ihook.pytest_runtest_logreport(report=pytest.TestReport(
            nodeid, location, keywords, outcome, longrepr, "teardown",
            duration=stop - now, start=now, stop=stop,
            user_properties=list(item.user_properties)))
        ihook.pytest_runtest_logfinish(nodeid=nodeid, location=location)
        return True

    def _phase(self, phase: str) -> None:
        if self.guard is not None:
            self.guard.phase = phase

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        found = item_spec(item)
        if found is None or self.run is None:
            return
        benchmark, spec = found
        from harness.runner.instance import InstanceContext, OutcomeSkip, RowState

        ctx = InstanceContext(self.run, self.adapters[benchmark], spec, item.nodeid)
        item.stash[STATE_KEY] = RowState(ctx)
        self._phase("setup")
        if ctx.key in self.run.plan.carried:
            raise OutcomeSkip(Outcome.CARRIED, "settled_in_ancestor",
                              f"settled in run {self.run.plan.carried[ctx.key].carried_from}")
        cause = read_stop(self.run.run_root)
        if cause:
            raise OutcomeSkip(Outcome.BLOCKED, cause, "the run is stopping")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        if STATE_KEY in item.stash:
            self._phase("call")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        if STATE_KEY in item.stash:
            self._phase("teardown")

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        self._phase("idle")

    @pytest.hookimpl(wrapper=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> Generator[None, Any, Any]:
        result = yield
        state = pyfuncitem.stash.get(STATE_KEY, None)
        if state is not None:
            state.ctx.conclude()
        return result

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        state = item.stash.get(STATE_KEY, None)
        if state is None:
            return report
        state.observe(call.when, call.excinfo, call.duration)
        if call.when == "call" and state.is_infra():
            report.user_properties.append((INFRA_PROPERTY, True))
        if call.when == "teardown":
            report.user_properties.append((ROW_PROPERTY, self._row(state)))
        return report

    def _row(self, state: RowState) -> dict[str, Any]:
        """The instance's row for its teardown report (scanned for secrets and redacted)."""
        names = self._secret_names()
        if names:  # after the instance's fixtures are gone: its files are final
            from harness.run import secrets as secrets_scan

            ctx = state.ctx
            ctx.result.details.update(
                secrets_scan.instance_scan(ctx.instance_dir, ctx.run_root, names))
        row = state.build_row().model_dump(mode="json", by_alias=True)
        if names:
            row = secrets_scan.redact_row(row, names)
        return row

    def _secret_names(self) -> list[str]:
        """The ``--agent-env`` names: their values are scanned for and redacted."""
        return list(self.config.getoption("agent_env", None) or [])

    @pytest.hookimpl(trylast=True)
    def pytest_harness_session_finish(self, config: pytest.Config, run: RunContext,
                                      summary: dict[str, Any]) -> None:
        """Controller: scan the whole run root once more (files written after instances)."""
        names = self._secret_names()
        if names and run.manifest is not None:
            from harness.run.secrets import run_scan

            run.manifest.extra.secret_scan = run_scan(run.run_root, names)

    def pytest_report_teststatus(self, report: pytest.TestReport,
                                 config: pytest.Config) -> tuple[str, str, str] | None:
        if report.when == "call" and report.failed:
            with contextlib.suppress(Exception):
                if dict(report.user_properties).get(INFRA_PROPERTY):
                    return "error", "E", "ERROR"
        return None


@pytest.fixture
def harness_instance(request: pytest.FixtureRequest) -> InstanceContext:
    """The current benchmark instance (see :class:`harness.runner.instance.InstanceContext`)."""
    state = request.node.stash.get(STATE_KEY, None)
    if state is None:
        raise pytest.UsageError(
            "harness_instance is only available inside a harness run (not with --collect-only)")
    return state.ctx
