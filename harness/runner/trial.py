"""One instance's life for a declared benchmark (issue 42): instruction, image, sandbox,
agent, collect, score, the row.

A declared benchmark (:class:`DeclaredBenchmark`) says what its tasks are and how one is
judged; the trial runs the life around it once, for every agent kind, with the runner's
rules:

- a dry run writes the instruction (and what :meth:`DeclaredBenchmark.dry_run` adds), and
  stops;
- the oracle agent on a task without a solution is a skipped row, known before any image;
- a resume scores what an earlier run kept (:meth:`DeclaredBenchmark.kept_artifact`)
  instead of paying the agent again;
- an agent server's task that outlived its run is reattached in the sandbox it works in,
  and a sandbox is kept for a resume when the client gave up on a running task
  (the trial asks the agent's capability ``Agent.reattaches`` and its sandbox hooks, no
  benchmark does);
- each step runs under its phase deadline (``--phase-timeout``): pull, create, collect,
  eval;
- the agent's infrastructure failure is infra (retried); its unfinished work is still
  collected and scored and the row is the agent's failure with the score kept;
- the verdict goes on the row as the benchmark gives it (:class:`Verdict`).

Attempts, budgets, resume, shards, record and replay are the runner's and need nothing here.
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
from harness.runner.deadlines import PhaseTimeout, phase

if TYPE_CHECKING:  # the models load when an instance runs, not at collection
    from harness.agents.base import (
        Agent,
        AgentCapabilities,
        AgentOutcome,
        AgentRequest,
        AgentTerms,
        InstanceView,
        OracleCallable,
        OraclePlan,
    )
    from harness.runner.instance import InstanceContext
    from harness.sandbox.container import Sandbox
    from harness.sandbox.images.ceiling import ImageCeiling
    from harness.sandbox.images.pull import ImageRecord

IMAGE_STATE = "harness.image"  # Trial.state: the ImageRecord of the instance's pulled image


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
    is kept on the row); ``infra``: the judge could not judge (the runner retries it);
    ``pending``: scored later (a batch at session end); ``skipped``: not scored in this run
    (kept for a later one)."""

    outcome: Literal["scored", "agent_failed", "infra", "pending", "skipped"] = "scored"
    score: float | None = None
    reason_code: str | None = None
    error: str | None = None
    resolved: bool | None = None
    near_resolved: bool | None = None
    tests_passed: int | None = None
    tests_total: int | None = None
    eval_status: str = "completed"  # the row's official_eval_status (e.g. "timeout")
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AgentSeed:
    """The agent's own checkout (``--agent-repo``), as a trial shows it to a benchmark that
    copies it into the sandbox, for a kind whose code runs there (the run's admission has
    recorded and gated it: ``extra.agent_source``, ``extra.seed_gate``)."""

    repo: str
    allow_dirty: bool  # ``--allow-dirty-seed``


@dataclass(frozen=True)
class Kept:
    """What an earlier run kept of this instance's agent work, to score without the agent."""

    artifact: Any
    completed: bool
    reason: str | None = None


class Trial:
    """What a declared benchmark's steps see of one instance."""

    def __init__(self, ctx: InstanceContext, request: pytest.FixtureRequest, kind: str,
                 env: tuple[str, ...] = (), seed: AgentSeed | None = None) -> None:
        """The trial of ``ctx`` with an agent of ``kind`` (its ``--agent-env`` names
        ``env``, its checkout ``seed``); the row names the kind from the start."""
        from harness.agents.base import agent_capabilities
        from harness.core.row_details import AgentDetails

        self.ctx = ctx
        self.request = request
        self.config = request.config
        # what the agent under test's kind can do (never the agent)
        self.agent: AgentCapabilities = agent_capabilities(kind)
        self.agent_env = env  # the names of the runner's variables it gets
        # the agent's own checkout (``--agent-repo``), for a kind whose code runs in the
        # sandbox: a benchmark that makes the sandbox copies it in
        self.agent_seed = seed if self.agent.runs_in_sandbox else None
        AgentDetails(kind=kind).put(ctx.result.details)
        self.state: dict[str, Any] = {}  # the benchmark's own, for this instance
        self.agent_completed = True  # the agent finished (False: timed out, gave up, ...)
        self.agent_reason: str | None = None  # why it did not

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
    def factory(self) -> Any:
        """The instance's sandbox factory (its sandboxes are removed at its end)."""
        return self.request.getfixturevalue("sandbox_factory")

    @property
    def client(self) -> Any:
        """The instance's engine client (where its sandboxes and images are)."""
        return self.factory.client

    def build_image(self, folder: Path, name: str,
                    from_map: Mapping[str, str] | None = None) -> str:
        """The image ID of a folder with a Dockerfile, built unless built before
        (:mod:`harness.sandbox.images.folder`); recorded on the row."""
        from harness.core.row_details import EngineDetails
        from harness.sandbox.images.folder import ensure_folder_image

        tag, image_id = ensure_folder_image(folder, name, client=self.client,
                                            from_map=from_map)
        EngineDetails(image={"ref": tag, "id": image_id, "built_locally": True}).put(
            self.ctx.result.details)
        return image_id

    def pull_image(self, ref: str) -> str:
        """The image ID of ``ref``, pulled per ``--pull`` (``--image-mirror``, pins) and
        recorded on the row (``details.engine.image``); the pull's progress goes to the live view.
        Under ``--image-disk-ceiling-gb`` the image is held while the instance runs and
        released when it ends, after its sandboxes are gone (so after its eval): removed
        then when this run pulled it and no other instance of the run holds it."""
        from harness.core import activity
        from harness.core.row_details import EngineDetails
        from harness.runner.pull_plugin import image_ceiling, pull_settings
        from harness.sandbox.images.pull import resolve_image

        ctx = self.ctx

        def progress(text: str) -> None:
            activity.report(ctx.run_root, ctx.worker_id, ctx.instance_id, text)

        settings = pull_settings(self.config, ctx.run_root, ctx.task_id)
        ceiling = image_ceiling(self.config, ctx.run_root, self.client.api, ctx.key, progress)
        if ceiling is not None:  # before the pull: a hold taken, then interrupted, goes too
            self.factory.on_close(lambda: self._release_image(ceiling))
        try:
            record = resolve_image(self.client, ref, settings, progress=progress,
                                   ceiling=ceiling)
        finally:
            activity.clear(ctx.run_root, ctx.worker_id)
        self.state[IMAGE_STATE] = record
        EngineDetails(image=record.model_dump(exclude_none=True)).put(ctx.result.details)
        return record.id

    def _release_image(self, ceiling: ImageCeiling) -> None:
        """The instance ended: let go of its image under the ceiling; the row says whether
        it was removed (``details.engine.image.ceiling``)."""
        from harness.core.row_details import EngineDetails

        released = ceiling.release()
        record: ImageRecord | None = self.state.get(IMAGE_STATE)
        if record is None or record.ceiling is None:
            return
        done = released.get(record.pulled_from or record.ref)
        update: dict[str, Any] = {"removed_after_eval": False}
        if done is not None:
            update = done.model_dump(include={"released_unix", "removed_after_eval",
                                              "freed_bytes", "kept_reason"})
        record.ceiling = record.ceiling.model_copy(update=update)
        EngineDetails(image=record.model_dump(exclude_none=True)).put(self.ctx.result.details)

    def copy_out(self, sandbox: Sandbox, src: str, dest: Path, *, max_bytes: int,
                 max_files: int = 64) -> bool:
        """Directory ``src`` of the sandbox into ``dest`` through the engine (no tool of
        the container runs: the agent may have replaced them), bounded; links kept as
        links, never followed. False when it is missing or over the bounds."""
        from harness.sandbox.limits import CopyLimits
        from harness.sandbox.transfer import CopyFailed, CopyRefused, extract_to

        limits = CopyLimits(max_bytes=max_bytes, max_files=max_files)
        try:
            extract_to(sandbox.api, sandbox.id, src, dest, limits=limits)
        except (CopyRefused, CopyFailed):
            return False
        return True

    def stop_agent(self, sandbox: Sandbox, user: str) -> str:
        """Stop every process the agent left (its daemons, a writer it left behind, a fork
        bomb): an unprivileged agent's by its user, a root agent's as every process but the
        sandbox's own; the survivors ("" if none). The judge then runs alone."""
        from harness.sandbox.execution import kill_all_but

        keep = self.state.get("main_pids") or ""
        if user not in ("root", "0"):
            # by its user: the image's own services (another user) are not the agent's
            return sandbox.end_user_processes(user)
        said = kill_all_but(sandbox.api, sandbox.id, keep)
        # What the engine sees, not what a shell in the container says (a root agent may
        # have replaced the shell): the init and the sandbox's own processes, nothing more
        left = sandbox.api.top(sandbox.id).get("Processes") or []
        extra = len(left) - 1 - len(keep.split())
        if not said and extra > 0:
            said = f"{extra} processes the engine still lists"
        return said

    def image_workdir(self, image: str) -> str | None:
        """The image's own working directory (its Dockerfile's last WORKDIR), if any."""
        config = self.client.api.inspect_image(image).get("Config") or {}
        return config.get("WorkingDir") or None


class DeclaredBenchmark(BenchmarkAdapter):
    """A benchmark given as a declaration: override what its tasks need."""

    instruction_file = "instruction.md"
    # the deadline :meth:`provision` runs under (``--phase-timeout``): ``create`` for one
    # sandbox, ``provision`` for a benchmark that starts services and sets the task up
    provision_phase = "create"
    # whether an agent server's task may outlive its run in this benchmark's sandbox (kept
    # for a reattach on resume); False when an instance's sandboxes end with it (their
    # network and services go at its end: a resume runs the agent afresh)
    sandboxes_outlive_runs = True

    def instruction(self, trial: Trial) -> str:
        raise NotImplementedError

    def agent_timeout(self, trial: Trial) -> float:
        return 600.0

    def dry_run(self, trial: Trial, instruction: str) -> None:
        """What a dry run writes besides the instruction (an agent server's task, say)."""

    def has_oracle(self, trial: Trial) -> bool:
        """Whether the task has a reference solution (asked before any image is built)."""
        return False

    def oracle(self, trial: Trial, sandbox: Sandbox) -> OraclePlan | OracleCallable | None:
        """The reference solution: commands (and folders) in the sandbox, or a callable."""
        return None

    def prepare(self, trial: Trial) -> str:
        """The instance's image, built or pulled (under the ``pull`` phase deadline)."""
        raise NotImplementedError

    def kept_artifact(self, trial: Trial) -> Kept | None:
        """An earlier run's kept agent work to score instead of running the agent (a
        resume re-scores, it does not re-solve); None: run the agent."""
        return None

    def redo_existing(self, trial: Trial) -> bool:
        """Clear what earlier runs left of this instance (no kept work, no reattach)."""
        return False

    def sandbox(self, trial: Trial, image: str) -> SandboxPlan:
        return SandboxPlan(image=image)

    def provision(self, trial: Trial, image: str, labels: Mapping[str, str]) -> Sandbox:
        """The agent's sandbox (``create`` deadline), from :meth:`sandbox`; ``labels`` mark a
        sandbox an agent server's task may outlive its run in (kept for a reattach)."""
        plan = self.sandbox(trial, image)
        sandbox: Sandbox = trial.factory(
            plan.image, user=plan.user, workdir=plan.workdir, network="none", cpus=plan.cpus,
            memory=plan.memory, pids_limit=plan.pids_limit, env=dict(plan.env),
            labels=dict(labels))
        return sandbox

    def agent_request(self, trial: Trial, request: AgentRequest) -> AgentRequest:
        """The request the agent gets (default as the trial made it): a benchmark may give
        the agent another view of its sandbox, more tool routes, or a longer instruction,
        after what the agent's kind can do (``trial.agent``: its capabilities)."""
        return request

    def agent_done(self, trial: Trial, outcome: AgentOutcome | None,
                   error: BaseException | None) -> None:
        """The agent ended, with ``outcome`` or raising ``error`` (then re-raised: an
        infrastructure failure is infra); what the benchmark records of it."""

    def agent_terms(self, trial: Trial) -> AgentTerms:
        """The task's terms for the agent (:class:`harness.agents.base.AgentTerms`): its
        metadata, the tools the agent must not use, the files it may only run, what the work
        must meet. An agent server's task is built from them by that agent; no benchmark
        builds one."""
        from harness.agents.base import AgentTerms

        return AgentTerms()

    def collect(self, trial: Trial, sandbox: Sandbox) -> Any:
        """What the agent produced, taken out of the sandbox (``collect`` deadline); a
        :class:`Verdict` ends the instance there (its output refused, say)."""
        return None

    def score(self, trial: Trial, sandbox: Sandbox | None, artifact: Any) -> Verdict:
        """The verdict (``eval`` deadline); ``sandbox`` is still running, or None when a
        kept artifact is scored."""
        raise NotImplementedError

    def eval_interrupted(self, trial: Trial) -> None:
        """The eval was cut at its deadline: set aside what it left (not a verdict)."""


def live(ctx: InstanceContext, request: pytest.FixtureRequest, agent: Agent | None,
         kind: str, env: tuple[str, ...], seed: AgentSeed | None) -> None:
    """One instance of a declared benchmark, start to end, with the agent under test: the
    ``agent`` of ``kind`` (None in a dry run; its ``--agent-env`` names ``env``, its
    checkout ``seed``), handed over by :func:`harness.runner.agent_choice.run_trial`."""
    from harness.core.models import Outcome
    from harness.runner.instance import OutcomeSkip

    benchmark = ctx.adapter
    if not isinstance(benchmark, DeclaredBenchmark):
        raise TypeError(f"{ctx.benchmark}: run_trial needs a DeclaredBenchmark adapter")
    trial = Trial(ctx, request, kind, env, seed)
    ctx.timeout_s = benchmark.agent_timeout(trial)
    instruction = benchmark.instruction(trial)
    path = ctx.instance_dir / benchmark.instruction_file
    path.write_text(instruction)
    ctx.output("instruction", path)
    if ctx.dry_run:
        benchmark.dry_run(trial, instruction)
        _preview(trial, benchmark, instruction)
        ctx.prepared()
    if agent is None:  # only a dry run has none, and it ended above
        raise TypeError(f"{ctx.benchmark}: the trial of {ctx.instance_id} got no agent")
    if trial.agent.needs_reference_solution and not benchmark.has_oracle(trial):
        raise OutcomeSkip(Outcome.SKIPPED, "oracle_unavailable",
                          f"{ctx.task_id}: the task has no reference solution; no image "
                          "was built or pulled for it")
    with phase(trial.config, "pull"):
        image = benchmark.prepare(trial)
    kept = None if benchmark.redo_existing(trial) else benchmark.kept_artifact(trial)
    if kept is not None:  # a resume re-scores what was kept, never buys a new solve
        trial.agent_completed, trial.agent_reason = kept.completed, kept.reason
        _score(trial, benchmark, None, kept.artifact)
        return
    sandbox = _agent_phase(trial, benchmark, agent, image, instruction)
    with phase(trial.config, "collect"):
        artifact = benchmark.collect(trial, sandbox)
    if isinstance(artifact, Verdict):
        record_verdict(trial, artifact)
        return
    _score(trial, benchmark, sandbox, artifact)


def _preview(trial: Trial, benchmark: DeclaredBenchmark, instruction: str) -> None:
    """A dry run's view of what the agent kind would submit (an agent server's task, in
    ``<sandbox>``: ``<benchmark>_task_body.json``, where the agent writes it when it runs)."""
    from harness.agents.base import AgentRequest, agent_class

    ctx = trial.ctx
    task = agent_class(trial.agent.kind).task_preview(AgentRequest(
        instance_id=ctx.task_id, instance_dir=ctx.instance_dir, instruction=instruction,
        timeout_sec=ctx.timeout_s, adapter=ctx.benchmark, terms=benchmark.agent_terms(trial)))
    if task is not None:
        path = ctx.instance_dir / f"{ctx.benchmark}_task_body.json"
        atomic_write_json(path, task.model_dump(mode="json", exclude_none=True))
        ctx.output("task_body", path)


def _agent_phase(trial: Trial, benchmark: DeclaredBenchmark, agent: Agent, image: str,
                 instruction: str) -> Sandbox:
    """The sandbox (new, or the one a reattached task works in) and the agent in it."""
    from harness.agents.base import AgentRequest
    from harness.core.row_details import AgentDetails, EngineDetails
    from harness.runner.agent_run import instance_view, run_agent

    ctx, factory = trial.ctx, trial.factory
    view = instance_view(ctx)
    # an agent whose task may outlive its run keeps the sandbox it works in for a resume
    reattaches = agent.reattaches and benchmark.sandboxes_outlive_runs
    sandbox, extra = _sandbox(trial, benchmark, agent, image, reattaches, view)
    EngineDetails(container=sandbox.name).put(ctx.result.details)
    request = benchmark.agent_request(trial, AgentRequest(
        instance_id=ctx.task_id, instance_dir=ctx.instance_dir, instruction=instruction,
        sandbox=sandbox, timeout_sec=ctx.timeout_s, env_allowlist=trial.agent_env,
        oracle=benchmark.oracle(trial, sandbox), adapter=ctx.benchmark, extra=extra,
        terms=benchmark.agent_terms(trial)))
    started = time.monotonic()
    try:
        outcome = run_agent(ctx, agent, request)
    except BaseException as exc:
        if reattaches and isinstance(exc, InfraError):
            agent.keep_sandbox(view, factory, sandbox)  # the task still runs in it: resume
        benchmark.agent_done(trial, None, exc)
        raise
    AgentDetails(wall_s=round(time.monotonic() - started, 3)).put(ctx.result.details)
    trial.agent_completed = outcome.completed
    trial.agent_reason = None if outcome.completed else (outcome.reason_code
                                                         or "task_not_completed")
    benchmark.agent_done(trial, outcome, None)
    return sandbox


def _sandbox(trial: Trial, benchmark: DeclaredBenchmark, agent: Agent, image: str,
             reattaches: bool, view: InstanceView) -> tuple[Sandbox, dict[str, Any]]:
    """The agent's sandbox and the request's extra: the one an earlier run's task still
    works in (adopted), or a new one (``provision``), labelled for a reattach when the
    agent's tasks may outlive the run."""
    from harness.agents.gateway.reattach import record_sandbox, redo_existing
    from harness.core.row_details import AgentDetails

    ctx, factory = trial.ctx, trial.factory
    redo = benchmark.redo_existing(trial)
    if redo:  # the task checkpoints of earlier runs are cleared
        AgentDetails(redo_existing=redo_existing(view, factory)).put(ctx.result.details)
    adopted = agent.adopt_sandbox(view, factory) if reattaches and not redo else None
    if adopted is not None:
        return adopted
    labels = agent.sandbox_labels() if reattaches else {}
    with phase(trial.config, benchmark.provision_phase):
        sandbox = benchmark.provision(trial, image, labels)
    if labels:
        record_sandbox(view, sandbox)
    trial.state["main_pids"] = _main_pids(sandbox)
    return sandbox, ({"keep_sandbox": True} if labels else {})


def _main_pids(sandbox: Sandbox) -> str:
    """The sandbox's own processes before the agent runs (the init's children: its main
    process), spared when a root agent's processes are stopped."""
    try:
        res = sandbox.exec(["cat", "/proc/1/task/1/children"], user="root", timeout=30)
    except Exception:  # no such file on this kernel: nothing is spared but PID 1
        return ""
    return " ".join(p for p in res.stdout.decode(errors="replace").split() if p.isdigit())


def _score(trial: Trial, benchmark: DeclaredBenchmark, sandbox: Sandbox | None,
           artifact: Any) -> None:
    try:
        with phase(trial.config, "eval"):
            verdict = benchmark.score(trial, sandbox, artifact)
    except PhaseTimeout:
        benchmark.eval_interrupted(trial)
        raise
    record_verdict(trial, verdict)


def record_verdict(trial: Trial, verdict: Verdict) -> None:
    """The verdict on the row; an unfinished agent's row is its failure, score kept."""
    from harness.core.models import Outcome
    from harness.runner.instance import OutcomeSkip

    ctx = trial.ctx
    if verdict.details:
        ctx.result.details.setdefault(ctx.benchmark, {}).update(verdict.details)
    ctx.result.official_eval_status = verdict.eval_status
    reason = verdict.reason_code
    if verdict.outcome == "infra":
        raise InfraError(verdict.error or reason or "judge_failed", reason or "judge_failed")
    if verdict.outcome == "skipped":
        raise OutcomeSkip(Outcome.SKIPPED, reason or "not_scored", verdict.error or "")
    if verdict.outcome == "pending":
        ctx.awaiting_eval(verdict.eval_status, reason or "eval_pending")
        return
    if verdict.score is not None:
        ctx.scored(score=verdict.score, resolved=verdict.resolved,
                   near_resolved=verdict.near_resolved, tests_passed=verdict.tests_passed,
                   tests_total=verdict.tests_total, official_eval_status=verdict.eval_status,
                   reason_code=reason if verdict.outcome == "scored" else None)
    if verdict.outcome == "agent_failed":
        ctx.agent_failed(reason or "agent_failed", verdict.error)
    elif not trial.agent_completed:
        ctx.agent_failed(trial.agent_reason or "task_not_completed")
    elif verdict.score is None:
        raise InfraError(f"{ctx.benchmark} gave no score and no failure", "judge_no_score")


__all__ = ["AgentSeed", "DeclaredBenchmark", "Kept", "SandboxPlan", "Trial", "Verdict", "live",
           "record_verdict"]
