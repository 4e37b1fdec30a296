"""Worker side of one instance: its context, what it records, and its ledger row.

The ``harness_instance`` fixture hands each benchmark test an :class:`InstanceContext`. The
test records its verdict on it (``ctx.scored(...)``, ``ctx.agent_failed(...)``); hooks turn
the phases' outcomes into exactly one :class:`~harness.core.models.TaskRow`, which travels to the
controller on the teardown report's ``user_properties``.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest

from harness.core.adapter import BenchmarkAdapter, InstanceSpec
from harness.core.errors import InfraError, RunInterrupted
from harness.core.models import (
    RESOLVED_AT,
    Manifest,
    ModelCalls,
    Outcome,
    Plan,
    TaskRow,
    Tokens,
    instance_key,
)
from harness.core.outcomes import INFRA_PROPERTY as INFRA_PROPERTY
from harness.core.outcomes import ROW_PROPERTY as ROW_PROPERTY
from harness.core.row_details import AgentDetails, DetailsBag, RowDetails, RunDetails
from harness.run.ledger import instance_dir

if TYPE_CHECKING:
    from harness.run.resume import Ancestry

Role = Literal["single", "controller", "worker"]


class OutcomeSkip(pytest.skip.Exception):  # type: ignore[misc,name-defined]
    """A skip that carries the row's outcome (dry run, carried forward, blocked, skipped)."""

    def __init__(self, outcome: Outcome, reason_code: str, message: str) -> None:
        super().__init__(msg=f"{reason_code}: {message}", pytrace=False)
        self.outcome = outcome
        self.reason_code = reason_code


class Unresolved(pytest.fail.Exception):  # type: ignore[misc,name-defined]
    """The instance was scored (or the agent failed) and is not resolved."""


@dataclass
class RunContext:
    """What every process knows about the run."""

    run_id: str
    run_root: Path
    worker_id: str
    role: Role
    plan: Plan
    adapters: dict[str, BenchmarkAdapter]
    manifest: Manifest | None = None  # controller only
    ancestry: Ancestry | None = None  # controller only: a resume's ancestors, read once
    samples: int = 1  # K: attempts per task (``--attempts``)
    _resolved_root: Path | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def dry_run(self) -> bool:
        return self.plan.dry_run

    @property
    def resolved_root(self) -> Path:
        """``run_root`` with its symlinks resolved (once: a run root is never moved)."""
        if self._resolved_root is None:
            self._resolved_root = Path(self.run_root).resolve()
        return self._resolved_root

    def for_retry(self) -> RunContext:
        """The run as an instance retried within it (``--retry-infra``) sees it: its own
        root first among the ancestors, so the earlier try's agent checkpoint and kept
        sandbox are found there as a resume finds an ancestor's (reattached, or its task
        cancelled, before a new paid task starts)."""
        plan = self.plan.model_copy(update={
            "ancestors": [str(self.run_root), *self.plan.ancestors]})
        return replace(self, plan=plan)


@dataclass(frozen=True)
class EarlierTry:
    """The try of an instance that an infrastructure retry follows (``--retry-infra``)."""

    index: int  # retries before this try: 1 for the first retry
    attempt: int  # the earlier try's attempt number (its row's ``attempt``)
    reason_code: str  # why the earlier try failed


@dataclass
class InstanceResult:
    outcome: Outcome | None = None
    reason_code: str | None = None
    score: float | None = None
    resolved: bool | None = None
    near_resolved: bool | None = None
    official_eval_status: str = "not_run"
    tests_passed: int | None = None
    tests_total: int | None = None
    cost_usd: float | None = None
    cost_known: bool = False
    # for the budget's settlement, not the row (AgentOutcome.reattached, .earlier_cost_usd)
    reattached: bool = False
    earlier_cost_usd: float | None = None
    tokens: Tokens | None = None
    models: list[ModelCalls] | None = None  # per model and source (issue 24)
    steps: int | None = None  # the agent's own count of its steps, where it keeps one
    prediction_written: bool = False
    agent_started: bool = False  # the agent was called (its cost must be settled)
    error: str | None = None
    output_paths: dict[str, str] = field(default_factory=dict)
    # the row's details as they are built (harness.core.row_details: sections by their model)
    details: DetailsBag = field(default_factory=DetailsBag)


class InstanceContext:
    """One instance of one run, as a benchmark test sees it."""

    def __init__(
        self, run: RunContext, adapter: BenchmarkAdapter, spec: InstanceSpec, nodeid: str,
        retry_of: EarlierTry | None = None,
    ) -> None:
        self.run = run if retry_of is None else run.for_retry()
        self.adapter = adapter
        self.spec = spec
        self.nodeid = nodeid
        self.benchmark = adapter.name
        self.key = instance_key(adapter.name, spec.key_id)
        self.retry_of = retry_of  # None: the instance's first try in this run
        self.tries = 0 if retry_of is None else retry_of.index  # retries before this try
        self.attempt = run.plan.attempts.get(self.key, 1) + self.tries
        self.result = InstanceResult()
        self.timeout_s: float | None = None  # the agent's wall clock (sandbox TTL follows)
        self.instance_dir = instance_dir(run.run_root, adapter.name, spec.key_id)
        self.instance_dir.mkdir(parents=True, exist_ok=True)

    # identity ---------------------------------------------------------------------------
    @property
    def instance_id(self) -> str:
        """The run's id of this instance (its row, folder, sandbox labels): the task's id,
        or ``<task id>@<k>`` for attempt k of K (``--attempts``)."""
        return self.spec.key_id

    @property
    def task_id(self) -> str:
        """The benchmark task's own id (what an adapter looks its task, image and official
        eval up by); the instance id when K=1."""
        return self.spec.instance_id

    @property
    def sample(self) -> int | None:
        """Which of K attempts at the task this is (1..K); None when K=1."""
        return self.spec.sample

    @property
    def budget_key(self) -> str:
        """The key of this try's budget reservation: the instance key, and for a retry
        within the run its own (:func:`harness.budget.campaign.try_key`)."""
        from harness.budget.campaign import try_key

        return try_key(self.key, self.tries)

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def run_root(self) -> Path:
        return self.run.run_root

    @property
    def worker_id(self) -> str:
        return self.run.worker_id

    @property
    def dry_run(self) -> bool:
        return self.run.dry_run

    @property
    def data(self) -> Any:
        return self.spec.data

    # recording --------------------------------------------------------------------------
    def output(self, name: str, path: Path) -> Path:
        """Record an output file under a name (stored relative to the run root)."""
        path = Path(path)
        if path.parent == self.instance_dir and not path.is_symlink():
            # a file of the instance's folder (the harness made every folder on its way)
            self.result.output_paths[name] = str(path.relative_to(self.run_root))
            return path
        try:
            rel = path.resolve().relative_to(self.run.resolved_root)
            self.result.output_paths[name] = str(rel)
        except ValueError:
            self.result.output_paths[name] = str(path)
        return path

    def prepared(self) -> None:
        """End a dry run here: inputs are written, nothing runs."""
        if self.dry_run:
            raise OutcomeSkip(Outcome.DRY_RUN, "dry_run", "inputs prepared; nothing run")

    def scored(
        self,
        *,
        score: float,
        resolved: bool | None = None,
        near_resolved: bool | None = None,
        official_eval_status: str = "completed",
        reason_code: str | None = None,
        tests_passed: int | None = None,
        tests_total: int | None = None,
    ) -> None:
        r = self.result
        r.outcome = Outcome.SCORED
        r.score = float(score)
        r.resolved = score >= RESOLVED_AT if resolved is None else resolved
        if near_resolved is None and self.adapter.near_resolved_at is not None:
            near_resolved = score >= self.adapter.near_resolved_at
        r.near_resolved = near_resolved
        r.official_eval_status = official_eval_status
        r.reason_code = reason_code or ("resolved" if r.resolved else "unresolved")
        r.tests_passed, r.tests_total = tests_passed, tests_total

    def awaiting_eval(self, official_eval_status: str, reason_code: str) -> None:
        """The agent's output is ready but unscored: scored later (``pending``, a batch eval
        at session end) or never (``not_run``)."""
        r = self.result
        r.outcome = Outcome.SCORED
        r.official_eval_status = official_eval_status
        r.reason_code = reason_code
        r.score = r.resolved = r.near_resolved = None

    def agent_failed(self, reason_code: str, error: str | None = None) -> None:
        self.result.outcome = Outcome.AGENT_FAILED
        self.result.reason_code = reason_code
        self.result.resolved = False
        if error:
            self.result.error = error[:4000]

    def conclude(self) -> None:
        """Turn the recorded verdict into the pytest outcome (called after the test body)."""
        r = self.result
        if r.outcome is None:
            raise InfraError(
                f"the {self.benchmark} test recorded no outcome for {self.instance_id}",
                "harness_no_outcome",
            )
        if r.outcome is Outcome.SCORED and (r.resolved or r.official_eval_status in (
                "pending", "not_run")):
            return  # resolved, or scored later (batch eval) or never (--pb-eval off)
        if r.outcome is Outcome.INFRA_FAILED:
            raise InfraError(r.error or r.reason_code or "infrastructure failure",
                             r.reason_code or "infra_error")
        score = "n/a" if r.score is None else f"{r.score:.3f}"
        raise Unresolved(f"{r.outcome.value}: {r.reason_code} (score {score})", pytrace=False)


@dataclass
class RowState:
    """Collects one item's phases; builds its row at teardown."""

    ctx: InstanceContext
    duration: float = 0.0
    skip: OutcomeSkip | None = None
    exc: BaseException | None = None
    exc_phase: str | None = None
    teardown_error: str | None = None
    retry_backoff_s: float | None = None  # set when this try is retried (--retry-infra)

    def observe(self, when: str, excinfo: pytest.ExceptionInfo[BaseException] | None,
                duration: float) -> None:
        self.duration += duration
        if excinfo is None:
            return
        exc = excinfo.value
        if when == "teardown":
            self.teardown_error = f"{type(exc).__name__}: {exc}"[:2000]
            return
        if isinstance(exc, OutcomeSkip):
            self.skip = exc
        elif self.exc is None:
            self.exc = exc
            self.exc_phase = when
            run = RunDetails.read(self.ctx.result.details)
            if not isinstance(exc, (Unresolved, pytest.skip.Exception)) and not run.traceback:
                RunDetails(traceback="".join(traceback.format_exception(exc, limit=-6))[-6000:]
                           ).put(self.ctx.result.details)

    def is_infra(self) -> bool:
        return self.exc is not None and not isinstance(self.exc, (Unresolved, pytest.skip.Exception))

    def classify(self) -> tuple[Outcome, str | None, str | None]:
        r = self.ctx.result
        if self.skip is not None:
            return self.skip.outcome, self.skip.reason_code, None
        exc = self.exc
        if exc is None:
            return r.outcome or Outcome.INFRA_FAILED, r.reason_code, r.error
        if isinstance(exc, Unresolved):
            return r.outcome or Outcome.AGENT_FAILED, r.reason_code, r.error
        if isinstance(exc, RunInterrupted):
            return Outcome.INFRA_FAILED, f"interrupted:{exc.cause}", str(exc)
        if isinstance(exc, KeyboardInterrupt):
            return Outcome.INFRA_FAILED, "interrupted:signal_2", "KeyboardInterrupt"
        if isinstance(exc, pytest.skip.Exception):
            return Outcome.SKIPPED, "skipped", str(getattr(exc, "msg", exc))
        message = f"{type(exc).__name__}: {exc}"[:4000]
        if isinstance(exc, InfraError):
            return Outcome.INFRA_FAILED, exc.reason_code, message
        phase = "setup_error" if self.exc_phase == "setup" else "harness_error"
        return Outcome.INFRA_FAILED, f"{phase}:{type(exc).__name__}", message

    def build_row(self) -> TaskRow:
        ctx, r = self.ctx, self.ctx.result
        outcome, reason, error = self.classify()
        details = DetailsBag(r.details)
        run = RunDetails()
        if self.teardown_error:
            run.teardown_error = self.teardown_error
        if ctx.retry_of is not None:
            run.retry_of = {"attempt": ctx.retry_of.attempt,
                            "reason_code": ctx.retry_of.reason_code}
        if self.retry_backoff_s is not None:
            run.retried = {"attempt": ctx.attempt + 1, "backoff_s": self.retry_backoff_s}
        run.put(details)
        infra = outcome is Outcome.INFRA_FAILED
        return TaskRow(
            ts_unix=time.time(),
            run_id=ctx.run_id,
            benchmark=ctx.benchmark,
            instance_id=ctx.instance_id,
            status=ctx.adapter.status_for(outcome, r.resolved),
            outcome=outcome,
            reason_code=reason,
            attempt=ctx.attempt,
            worker=ctx.worker_id,
            nodeid=ctx.nodeid,
            duration_s=round(self.duration, 3),
            score=r.score,
            resolved=r.resolved,
            near_resolved=r.near_resolved,
            infra=infra,
            official_eval_status=r.official_eval_status,
            tests_passed=r.tests_passed,
            tests_total=r.tests_total,
            cost_usd=r.cost_usd,
            cost_known=r.cost_known,
            paid_activity=paid_activity(r),
            tokens=r.tokens,
            models=list(r.models) if r.models is not None else None,
            steps=r.steps,
            prediction_written=r.prediction_written,
            output_paths=dict(r.output_paths),
            error=error or r.error,
            details=RowDetails.of(details, ctx.benchmark),
            sample_of=ctx.task_id if ctx.sample is not None else None,
            sample=ctx.sample,
        )


def paid_activity(r: InstanceResult) -> bool | None:
    """What a row can say about the agent's spend, also when it was interrupted."""
    if not r.agent_started:
        return False
    if AgentDetails.read(r.details).paid_evidence:  # e.g. llm_usage copied before the abort
        return True
    if (r.cost_usd or 0) > 0 or (r.tokens is not None and any(
            (v or 0) > 0 for v in r.tokens.model_dump().values() if isinstance(v, int | float))):
        return True
    if r.cost_known and r.cost_usd == 0:
        return False
    return None
