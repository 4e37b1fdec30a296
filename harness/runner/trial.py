"""One instance's life for a declared benchmark (issue 42): instruction, image, sandbox,
agent, collect, score, the row.

A declared benchmark (:class:`DeclaredBenchmark`) says what its tasks are and how one is
judged; the trial runs the life around it once, for every agent kind, with the runner's
rules: a dry run writes the instruction and the agent server's task and stops; the oracle
agent on a task without a solution is a skipped row, known before any image is built; each
step runs under its phase deadline (``--phase-timeout``); the agent's infrastructure failure
is infra (retried), its unfinished work is still collected and scored (the benchmark says
whether partial work counts) and the row is the agent's failure; a verdict is recorded on
the row as the benchmark gives it. Attempts, budgets, resume, shards, record and replay are
the runner's and need nothing here.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest

from harness.core.adapter import BenchmarkAdapter, InstanceSpec
from harness.core.errors import InfraError
from harness.core.fsutil import atomic_write_json
from harness.core.models import Outcome
from harness.runner.deadlines import phase
from harness.runner.instance import InstanceContext, OutcomeSkip

if TYPE_CHECKING:
    from harness.agents.base import AgentOutcome, OraclePlan
    from harness.sandbox.container import Sandbox

BODY_NAME = "task_body.json"


@dataclass(frozen=True)
class SandboxPlan:
    """The sandbox an instance's agent works in (no network, labelled, limited)."""

    image: str  # an image ID or local tag
    user: str = "agent"  # the agent's user (its commands run as this user)
    workdir: str = "/workspace"
    cpus: float | None = 1.0
    memory: str | None = "2g"
    pids_limit: int | None = 1024
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    """How a benchmark judged one instance.

    ``scored``: the score stands; ``agent_failed``: the agent's fault (a score, when given,
    is kept on the row); ``infra``: the judge could not judge (the runner retries it)."""

    outcome: Literal["scored", "agent_failed", "infra"] = "scored"
    score: float | None = None
    reason_code: str | None = None
    error: str | None = None
    resolved: bool | None = None
    tests_passed: int | None = None
    tests_total: int | None = None
    eval_status: str = "completed"  # the row's official_eval_status (e.g. "timeout")
    details: Mapping[str, Any] = field(default_factory=dict)


class Trial:
    """What a declared benchmark's steps see of one instance."""

    def __init__(self, ctx: InstanceContext, request: pytest.FixtureRequest) -> None:
        self.ctx = ctx
        self.request = request
        self.config = request.config

    @property
    def spec(self) -> InstanceSpec:
        return self.ctx.spec

    @property
    def data(self) -> Any:
        return self.ctx.data

    @property
    def instance_dir(self) -> Path:
        return self.ctx.instance_dir

    @property
    def details(self) -> dict[str, Any]:
        """The row's section of this benchmark (``details[<benchmark>]``)."""
        section: dict[str, Any] = self.ctx.result.details.setdefault(self.ctx.benchmark, {})
        return section

    def option(self, name: str) -> Any:
        return self.config.getoption(name)

    def output(self, name: str, path: Path) -> Path:
        """Record a file of the instance under a name (the report links it)."""
        return self.ctx.output(name, path)

    @property
    def client(self) -> Any:
        """The engine's client (the one the sandboxes are created on)."""
        return self.request.getfixturevalue("sandbox_client")

    def build_image(self, folder: Path, name: str,
                    from_map: Mapping[str, str] | None = None) -> str:
        """The image ID of a folder with a Dockerfile, built unless built before
        (:mod:`harness.sandbox.images.folder`); recorded on the row."""
        from harness.sandbox.images.folder import ensure_folder_image

        tag, image_id = ensure_folder_image(folder, name, client=self.client,
                                            from_map=from_map)
        self.ctx.result.details["image"] = {"ref": tag, "id": image_id, "built_locally": True}
        return image_id

    def pull_image(self, ref: str) -> str:
        """The image ID of ``ref``, pulled per ``--pull`` (``--image-mirror``, pins) and
        recorded on the row."""
        from harness.runner.pull_plugin import pull_settings
        from harness.sandbox.images.pull import resolve_image

        settings = pull_settings(self.config, self.ctx.run_root, self.ctx.task_id)
        record = resolve_image(self.client, ref, settings)
        self.ctx.result.details["image"] = record.model_dump(exclude_none=True)
        return record.id

    def image_workdir(self, image: str) -> str | None:
        """The image's own working directory (its Dockerfile's last WORKDIR), if any."""
        config = self.client.api.inspect_image(image).get("Config") or {}
        return config.get("WorkingDir") or None


class DeclaredBenchmark(BenchmarkAdapter):
    """A benchmark given as a declaration: override what its tasks need."""

    # Whether an agent that did not finish is still collected and scored (its row is the
    # agent's failure either way; the score stays on it).
    score_unfinished: bool = True

    def instruction(self, trial: Trial) -> str:
        raise NotImplementedError

    def agent_timeout(self, trial: Trial) -> float:
        return 600.0

    def prepare(self, trial: Trial) -> str:
        """The instance's image, built or pulled (under the ``pull`` phase deadline)."""
        raise NotImplementedError

    def sandbox(self, trial: Trial, image: str) -> SandboxPlan:
        return SandboxPlan(image=image)

    def oracle(self, trial: Trial) -> OraclePlan | None:
        """The reference solution as commands in the sandbox; None: the task has none."""
        return None

    def collect(self, trial: Trial, sandbox: Sandbox) -> Any:
        """What the agent produced, taken out of the sandbox (``collect`` deadline)."""
        return None

    def score(self, trial: Trial, sandbox: Sandbox, artifact: Any) -> Verdict:
        """The verdict (``eval`` deadline); the sandbox is still running."""
        raise NotImplementedError

    def task_metadata(self, trial: Trial) -> dict[str, Any]:
        """Metadata the agent server's task carries (never the tests or the solution)."""
        return {}


def run_trial(ctx: InstanceContext, request: pytest.FixtureRequest) -> None:
    """One instance of a declared benchmark, start to end (its test function's body)."""
    benchmark = ctx.adapter
    if not isinstance(benchmark, DeclaredBenchmark):
        raise TypeError(f"{ctx.benchmark}: run_trial needs a DeclaredBenchmark adapter")
    trial = Trial(ctx, request)
    instruction = benchmark.instruction(trial)
    path = ctx.instance_dir / "instruction.md"
    path.write_text(instruction)
    ctx.output("instruction", path)
    ctx.timeout_s = benchmark.agent_timeout(trial)
    if ctx.dry_run:
        _write_body(trial, benchmark, instruction, "<container>", benchmark.sandbox(
            trial, "<image>").workdir)
        ctx.prepared()
    agent = request.getfixturevalue("harness_agent")
    oracle = benchmark.oracle(trial)
    if agent.needs_reference_solution and oracle is None:
        raise OutcomeSkip(Outcome.SKIPPED, "oracle_unavailable",
                          f"{ctx.task_id}: the task has no reference solution; nothing built")
    with phase(request.config, "pull"):
        image = benchmark.prepare(trial)
    plan = benchmark.sandbox(trial, image)
    with phase(request.config, "create"):
        sandbox = request.getfixturevalue("sandbox_factory")(
            plan.image, user=plan.user, workdir=plan.workdir, network="none",
            cpus=plan.cpus, memory=plan.memory, pids_limit=plan.pids_limit,
            env=dict(plan.env))
    ctx.result.details["container"] = sandbox.name
    outcome = _run_agent(trial, benchmark, agent, sandbox, instruction, plan, oracle)
    if not outcome.completed and not benchmark.score_unfinished:
        ctx.agent_failed(outcome.reason_code or "task_not_completed")
        return
    with phase(request.config, "collect"):
        artifact = benchmark.collect(trial, sandbox)
    with phase(request.config, "eval"):
        verdict = benchmark.score(trial, sandbox, artifact)
    record_verdict(ctx, verdict, outcome)


def _run_agent(trial: Trial, benchmark: DeclaredBenchmark, agent: Any, sandbox: Sandbox,
               instruction: str, plan: SandboxPlan, oracle: OraclePlan | None
               ) -> AgentOutcome:
    from harness.agents.base import AgentRequest
    from harness.runner.agent_plugin import run_agent

    ctx = trial.ctx
    body = _write_body(trial, benchmark, instruction, sandbox.name, plan.workdir)
    started = time.monotonic()
    outcome = run_agent(ctx, agent, AgentRequest(
        instance_id=ctx.task_id, instance_dir=ctx.instance_dir, instruction=instruction,
        task_body=body, sandbox=sandbox, timeout_sec=ctx.timeout_s,
        env_allowlist=tuple(trial.option("agent_env")), oracle=oracle,
        adapter=ctx.benchmark))
    ctx.result.details["agent_wall_s"] = round(time.monotonic() - started, 3)
    return outcome


def _write_body(trial: Trial, benchmark: DeclaredBenchmark, instruction: str,
                container: str, workspace: str) -> Any:
    """The agent server's task for this try (written for every agent kind: the record of
    what an agent server would be asked)."""
    from harness.agents.gateway.body import neutral_task_body

    ctx = trial.ctx
    ref = ctx.instance_id.replace("@", ":")
    body = neutral_task_body(
        task_id=f"{ctx.run_id}-{ref}-a{ctx.attempt}", instruction=instruction,
        container=container, workspace=workspace, timeout_sec=ctx.timeout_s or 600.0,
        source=ctx.benchmark, metadata=benchmark.task_metadata(trial))
    path = ctx.instance_dir / BODY_NAME
    atomic_write_json(path, body.model_dump(mode="json", exclude_none=True))
    ctx.output("task_body", path)
    return body


def record_verdict(ctx: InstanceContext, verdict: Verdict, outcome: AgentOutcome) -> None:
    """The verdict on the row; an unfinished agent's row is its failure, score kept."""
    if verdict.details:
        ctx.result.details.setdefault(ctx.benchmark, {}).update(verdict.details)
    ctx.result.official_eval_status = verdict.eval_status
    if verdict.outcome == "infra":
        raise InfraError(verdict.error or verdict.reason_code or "judge_failed",
                         verdict.reason_code or "judge_failed")
    if verdict.score is not None:
        ctx.scored(score=verdict.score, resolved=verdict.resolved,
                   tests_passed=verdict.tests_passed, tests_total=verdict.tests_total,
                   reason_code=verdict.reason_code if verdict.outcome == "scored" else None,
                   official_eval_status=verdict.eval_status)
    if verdict.outcome == "agent_failed":
        ctx.agent_failed(verdict.reason_code or "agent_failed", verdict.error)
    elif not outcome.completed:
        ctx.agent_failed(outcome.reason_code or "task_not_completed")
    elif verdict.score is None:
        raise InfraError(f"{ctx.benchmark} gave no score and no failure", "judge_no_score")
