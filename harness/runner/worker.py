"""Item-level hooks that run where the tests run (each xdist worker, or the single process):
parametrization, plan filtering, the per-item row, signal guard, pass/fail semantics."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from harness.core import collector
from harness.core.adapter import BenchmarkAdapter, InstanceSpec
from harness.core.outcomes import INFRA_PROPERTY, ROW_PROPERTY, Outcome, instance_key
from harness.core.signals import StopGuard, read_stop
from harness.run.plan import attempt_keyword
from harness.runner.agent_choice import agent_choice
from harness.runner.carried import report_carried, report_carried_first

if TYPE_CHECKING:  # the runtime (pydantic rows) loads when an instance runs, not at collection
    from harness.runner.controller import Controller
    from harness.runner.instance import EarlierTry, InstanceContext, RowState, RunContext

STATE_KEY: pytest.StashKey[RowState] = pytest.StashKey()
CONTROLLER_KEY: pytest.StashKey[Controller] = pytest.StashKey()  # the controller process's
# --retry-infra: the try an item's next run retries (set while it is retried), and the
# retry its last try asked for (set at the failing phase, taken by RetryHooks).
TRY_KEY: pytest.StashKey[EarlierTry] = pytest.StashKey()
RETRY_KEY: pytest.StashKey[EarlierTry] = pytest.StashKey()
NESTED_KEY: pytest.StashKey[bool] = pytest.StashKey()
# A reason code never retried: the run was interrupted (a signal, a stop request).
NOT_RETRIED_PREFIXES = ("interrupted:",)
# Infrastructure that a second try in the same run cannot change: an image that is not on the
# engine under --pull never, an agent checkout that is not there, a parity disagreement, an
# image bigger than the run's --image-disk-ceiling-gb.
NOT_RETRIED_CODES = frozenset({"image_missing", "seed_unavailable", "official_parity_mismatch",
                               "engine_lost",  # a resume re-places a lost engine's instances
                               "image_exceeds_ceiling"})
BACKOFF_CAP_S = 60.0


@dataclass(frozen=True)
class RetryPolicy:
    """``--retry-infra N`` and its backoff: retry ``i`` (0-based) waits ``base * 2**i``
    seconds, at most :data:`BACKOFF_CAP_S`."""

    limit: int = 1
    base_s: float = 1.0

    def backoff(self, retries_before: int) -> float:
        return float(min(self.base_s * 2 ** retries_before, BACKOFF_CAP_S))

    @staticmethod
    def retryable(reason_code: str | None) -> bool:
        code = reason_code or ""
        return not code.startswith(NOT_RETRIED_PREFIXES) and code not in NOT_RETRIED_CODES


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
        self.samples = 1  # K: attempts per task (--attempts)
        self.retry = RetryPolicy()

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
        specs = adapter.instances(self.config)
        # K attempts per task: every task's first attempt, then every task's second, ...
        rounds: list[int | None] = list(range(1, self.samples + 1)) if self.samples > 1 \
            else [None]
        for sample in rounds:
            for spec in specs:
                marks = [getattr(pytest.mark, attr)(value, value=value)
                         for attr, value in spec.marker_values()]
                one = spec if sample is None else spec.attempt(sample)
                params.append(pytest.param(one, id=one.key_id, marks=marks))
        metafunc.parametrize("harness_instance", params, indirect=True)

    def pytest_itemcollected(self, item: pytest.Item) -> None:
        found = item_spec(item)
        if found is not None:
            spec = found[1]
            item.extra_keyword_matches.update(value for _, value in spec.marker_values())
            item.extra_keyword_matches.update(spec.keywords)
            if spec.sample is not None:  # -k foo@2 (harness.run.plan.rewrite_attempt_keywords)
                item.extra_keyword_matches.add(attempt_keyword(spec.instance_id, spec.sample))

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        keep: list[pytest.Item] = []
        dropped: list[pytest.Item] = []
        wanted_ids = set(config.option.instance or [])
        if wanted_ids:  # a task's id selects its K attempts, an attempt's id only it
            known = {i for s in map(item_spec, items) if s
                     for i in (s[1].instance_id, s[1].key_id)}
            unknown = sorted(wanted_ids - known)
            if unknown:
                raise pytest.UsageError(
                    f"--instance {', '.join(unknown)}: no such instance id; "
                    f"list them with --collect-only -q")
        found = {item: item_spec(item) for item in items}
        keys = {item: instance_key(f[0], f[1].key_id) for item, f in found.items() if f}
        from harness.run.plan import select_keys

        # Shard and frozen selection (plan.selection is None when the user gave selectors).
        kept = set(select_keys(keys.values(), self.run.plan)) if self.run else set(keys.values())
        for item in items:
            spec = found[item]
            ok = spec is None or (
                (not wanted_ids or spec[1].instance_id in wanted_ids
                 or spec[1].key_id in wanted_ids) and keys[item] in kept)
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
                nodeids[item.nodeid] = instance_key(found[0], found[1].key_id)
        if self.controller is not None:
            self.controller.set_selection(nodeids)
        else:  # an xdist worker: the controller reads it (load_worker_selection)
            from harness.core.fsutil import atomic_write_json
            from harness.core.layout import collection_file

            atomic_write_json(collection_file(self.run.run_root, self.run.worker_id),
                              {"nodeids": nodeids})
        collector.settled()  # the items, the plan, the carried rows: alive to the end

    # running ----------------------------------------------------------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, Any, Any]:
        run = self.run
        if run is None or session.config.option.collectonly:
            return (yield)
        if run.role != "worker":  # the controller installs the guard of a single process
            if run.role != "single" or not run.plan.carried or session.testsfailed:
                return (yield)
            collected = list(session.items)
            try:
                report_carried_first(session, self._carried_from)
                return (yield)
            finally:
                session.items = collected
        self.guard = StopGuard(run.run_root)
        self.guard.install()
        try:
            return (yield)
        finally:
            self.guard.uninstall()

    def _carried_from(self, item: pytest.Item) -> str | None:
        """The ancestor run that settled ``item`` (None: it runs in this run)."""
        found = item_spec(item) if self.run is not None else None
        if found is None or self.run is None:
            return None
        carried = self.run.plan.carried.get(instance_key(found[0], found[1].key_id))
        return None if carried is None else str(carried.carried_from)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None
                                ) -> bool | None:
        """A carried instance under xdist, where the scheduler placed it (a single process
        reports them all first: ``pytest_runtestloop``); see :mod:`harness.runner.carried`."""
        if self.run is None or not self.run.plan.carried:
            return None
        source = self._carried_from(item)
        if source is None:
            return None
        report_carried(item, source, nextitem)
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

        ctx = InstanceContext(self.run, self.adapters[benchmark], spec, item.nodeid,
                              retry_of=item.stash.get(TRY_KEY, None))
        item.stash[STATE_KEY] = RowState(ctx)
        self._phase("setup")  # a carried instance never gets here (pytest_runtest_protocol)
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
        if call.excinfo is not None and call.when in ("setup", "call") and \
                state.retry_backoff_s is None and self._retry(item, state):
            report.outcome = "rerun"  # type: ignore[assignment]  # as pytest-rerunfailures
        if call.when == "teardown":
            report.user_properties.append((ROW_PROPERTY, self._row(state)))
        return report

    def _retry(self, item: pytest.Item, state: RowState) -> bool:
        """Ask for another try of an instance whose try failed on infrastructure
        (``--retry-infra``): never an agent's failure, an interrupted try, a stopping run,
        nor past the limit. The retry runs once this try's teardown wrote its row."""
        policy, ctx = self.retry, state.ctx
        if policy.limit <= ctx.tries or not state.is_infra():
            return False
        outcome, reason, _ = state.classify()
        if outcome is not Outcome.INFRA_FAILED or not policy.retryable(reason):
            return False
        session = item.session
        if session.shouldstop or session.shouldfail or read_stop(ctx.run_root) or (
                self.guard is not None and self.guard.cause is not None):
            return False
        from harness.runner.instance import EarlierTry

        state.retry_backoff_s = policy.backoff(ctx.tries)
        item.stash[RETRY_KEY] = EarlierTry(index=ctx.tries + 1, attempt=ctx.attempt,
                                           reason_code=reason or "infra_error")
        return True

    def _row(self, state: RowState) -> dict[str, Any]:
        """The instance's row for its teardown report (scanned for secrets and redacted)."""
        names = self._secret_names()
        if names:  # after the instance's fixtures are gone: its files are final
            from harness.core.row_details import RunDetails
            from harness.run import secrets as secrets_scan

            ctx = state.ctx
            RunDetails.model_validate(secrets_scan.instance_scan(
                ctx.instance_dir, ctx.run_root, names)).put(ctx.result.details)
        row = state.build_row().model_dump(mode="json", by_alias=True)
        if names:
            row = secrets_scan.redact_row(row, names)
        return row

    def _secret_names(self) -> list[str]:
        """The ``--agent-env`` names: their values are scanned for and redacted."""
        return list(agent_choice(self.config).env)

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
        if report.outcome == "rerun":  # type: ignore[comparison-overlap]
            return "rerun", "R", "RERUN"  # an infrastructure failure retried (--retry-infra)
        if report.when == "call" and report.failed:
            with contextlib.suppress(Exception):
                if dict(report.user_properties).get(INFRA_PROPERTY):
                    return "error", "E", "ERROR"
        return None


class RetryHooks:
    """``--retry-infra``: an instance whose try failed on infrastructure runs again in the
    same process (its whole protocol: setup with a new budget reservation and sandbox, call,
    teardown with its own row), after an exponential backoff that a stop request cuts short.
    The failed try's reports are logged with the outcome ``rerun``; each try's row reaches
    the controller on its teardown report, and the last one counts."""

    def __init__(self, hooks: WorkerHooks) -> None:
        self.hooks = hooks

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None
                                ) -> Generator[None, Any, Any]:
        if item.stash.get(NESTED_KEY, False):
            return (yield)
        result = yield
        try:
            while RETRY_KEY in item.stash:
                retry = item.stash[RETRY_KEY]
                del item.stash[RETRY_KEY]
                run = self.hooks.run
                if run is not None:
                    wait_unless_stopped(self.hooks.retry.backoff(retry.index - 1), run.run_root)
                item.stash[TRY_KEY] = retry
                item.stash[NESTED_KEY] = True
                item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
        finally:
            item.stash[NESTED_KEY] = False
            if TRY_KEY in item.stash:
                del item.stash[TRY_KEY]
        return result


def wait_unless_stopped(seconds: float, run_root: Path, step_s: float = 0.1) -> None:
    """Sleep ``seconds``, less when the run is asked to stop (the retry then records the
    stop as its row: blocked, never run)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0 and not read_stop(run_root):
        time.sleep(min(step_s, left))


@pytest.fixture
def harness_instance(request: pytest.FixtureRequest) -> InstanceContext:
    """The current benchmark instance (see :class:`harness.runner.instance.InstanceContext`)."""
    state = request.node.stash.get(STATE_KEY, None)
    if state is None:
        raise pytest.UsageError(
            "harness_instance is only available inside a harness run (not with --collect-only)")
    return state.ctx
