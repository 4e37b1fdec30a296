"""Cowork Bench on the runner's trial (issue 42): the steps of one instance's life, which the
trial (:func:`harness.api.run_trial`) runs for every agent kind with the runner's rules.

- ``instruction``: the task's description, the workspace named (:mod:`.task_body`);
- a dry run writes the instruction and the agent server's task (``cowork_bench_task_body.json``);
- ``kept_artifact``: an ancestor attempt whose eval finished is recovered, its receipt
  replayed, and neither the agent nor the checker runs again (:func:`.instance.recover_attempt`);
- ``prepare``: the runtime image (the run's admitted one, or the harness's own);
- ``provision`` (the ``provision`` deadline): the instance's internal network and seeded
  PostgreSQL sidecar, the agent container, the initial workspace and preprocess, the task's
  MCP servers, the sidecar in its agent phase (:func:`.phases.open_agent_phase`); a task
  that cannot be set up is infrastructure, its records and logs still copied out;
- the agent's request: the agent container as the runner's agents see it (:class:`.agents.AgentBox`),
  the task's MCP servers routed to an agent server (:mod:`.mcp_access`), ``mcp-call`` in a
  bash-only agent's instruction; the oracle copies the groundtruth;
- ``collect``: copy-out, the container removed, the sidecar back in its eval phase, the
  records (``agent_summary.json``, ``traj_log.json``);
- ``score``: the official checker at most once, the residual diagnostic, teardown (proven by
  listing), and the classification of the instance's files (:mod:`.classify`) as the verdict.

An instance's sandboxes never outlive it (its network and database go at its end), so an
agent server's task is never reattached across runs here: a resume runs the agent afresh.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.cowork_bench import BENCHMARK
from benchmarks.cowork_bench import models as m
from benchmarks.cowork_bench.agents import (
    AgentBox,
    oracle_agent,
    orphan_usage,
    usage_record,
    write_usage,
)
from benchmarks.cowork_bench.classify import Classification, classify_instance
from benchmarks.cowork_bench.containers import RunIdentity
from benchmarks.cowork_bench.diagnostic import run_diagnostic
from benchmarks.cowork_bench.eval_once import evaluate_once
from benchmarks.cowork_bench.images import ensure_image
from benchmarks.cowork_bench.instance import (
    TTL_MARGIN_S,
    InstanceResult,
    RecoveredAttempt,
    own_sidecar,
    recover_attempt,
    seed_for,
    teardown,
)
from benchmarks.cowork_bench.mcp_access import route_request, tools_section
from benchmarks.cowork_bench.mcp_servers import INVENTORY_NAME, McpInventory
from benchmarks.cowork_bench.phases import (
    WORKSPACE,
    AgentContext,
    AgentOutcome,
    AgentPhase,
    InstanceEnv,
    container_checker,
    open_agent_phase,
)
from benchmarks.cowork_bench.task_body import (
    SOURCE,
    description,
    disabled_tools,
    gateway_timeout,
)
from benchmarks.cowork_bench.tasks import CoworkTask, TaskDocs, read_docs
from harness.api import (
    DeclaredBenchmark,
    EngineDetails,
    EvalDetails,
    InfraError,
    Kept,
    Outcome,
    Trial,
    Verdict,
    atomic_write_text,
    copy_limits,
)

if TYPE_CHECKING:
    from benchmarks.cowork_bench.options import CoworkOptions
    from benchmarks.cowork_bench.run_images import RunImages
    from harness.api import AgentOutcome as RunnerOutcome
    from harness.api import AgentRequest, AgentTerms, Sandbox

STATE = "cowork"  # Trial.state: this instance's Life
CHECKER_TAIL = 1500
SHOWN = (m.TRAJ_LOG, m.EVAL_RES, m.AGENT_SUMMARY, m.WORKSPACE_DIR, INVENTORY_NAME)


@dataclass
class Life:
    """What one instance's steps share."""

    docs: TaskDocs
    started: float  # time.monotonic() when the instance started (the body's setup time)
    result: InstanceResult
    env: InstanceEnv | None = None
    phase: AgentPhase | None = None
    recovered: RecoveredAttempt | None = None
    ident: RunIdentity | None = None  # set when provisioning began: there is a teardown
    agent_started: float | None = None  # time.monotonic() when the agent got its task
    ended: bool = False  # teardown done and the row's details written


class CoworkSteps(DeclaredBenchmark):
    """The trial's steps for Cowork (the adapter, :class:`.adapter.CoworkAdapter`, gives
    ``options`` and ``images``)."""

    provision_phase = "provision"
    sandboxes_outlive_runs = False
    instruction_file = m.INSTRUCTION

    @property
    def options(self) -> CoworkOptions:
        raise NotImplementedError  # the adapter's

    @property
    def images(self) -> RunImages:
        raise NotImplementedError  # the adapter's

    def instruction(self, trial: Trial) -> str:
        task: CoworkTask = trial.data
        docs = read_docs(self.options.root, task.instance_id)  # once for the whole instance
        trial.state[STATE] = Life(docs, time.monotonic(),
                                  InstanceResult(task.instance_id, None, None, None))
        return description(self.options.root, task.instance_id, WORKSPACE, docs)

    def agent_timeout(self, trial: Trial) -> float:
        return self.options.task_timeout_sec

    def agent_terms(self, trial: Trial) -> AgentTerms:
        """The Ouroboros Cowork adapter's terms (reference §4 step 11): the web, delegated
        vision, ``claude_code_edit`` and subagent tools off; the root of its delegation; the
        agent container's workspace, on the task's network; the task's time less the set-up
        spent so far and a margin to finish (at least 60 s)."""
        from harness.api import AgentTerms

        opts = self.options
        metadata: dict[str, Any] = {"delegation_role": "root"}
        if opts.max_steps is not None:
            metadata["max_steps"] = opts.max_steps
        # the set-up spent so far (a dry run spends none: what a run starting now would get)
        spent = 0.0 if trial.ctx.dry_run else time.monotonic() - _life(trial).started
        return AgentTerms(metadata=metadata, tools_off=tuple(disabled_tools()), source=SOURCE,
                          workspace=WORKSPACE, offline=False,
                          work_timeout_sec=gateway_timeout(opts.task_timeout_sec, spent))

    def has_oracle(self, trial: Trial) -> bool:
        return True  # the groundtruth workspace (file checks pass, database checks fail)

    def kept_artifact(self, trial: Trial) -> Kept | None:
        recovered = recover_attempt(trial.ctx, self.options.root)
        if recovered is None:
            return None
        _life(trial).recovered = recovered
        return Kept(artifact=None, completed=True)

    def prepare(self, trial: Trial) -> str:
        life = _life(trial)
        image = self.images.image_id("runtime", trial.ctx.run_root)
        life.result.runtime_image = image or ensure_image("runtime").image_id
        return life.result.runtime_image

    def provision(self, trial: Trial, image: str, labels: Any) -> Sandbox:
        """The sidecar, the agent container and the task set up in it (see the module)."""
        ctx, opts, life, task = trial.ctx, self.options, _life(trial), trial.data
        life.ident = ident = RunIdentity(ctx.run_id, ctx.run_root, ctx.worker_id)
        trial.factory.on_close(lambda: self._end(trial))  # whatever ends the instance
        ttl = int(opts.task_timeout_sec) + TTL_MARGIN_S
        sidecar = own_sidecar(task, ident, Path(opts.root) / "db" / "init.sql.gz", ttl,
                              opts.limits, self.images.image_id("pg", ctx.run_root),
                              opts.allow_missing_db, life.result)
        life.env = InstanceEnv(
            task, Path(opts.root), ctx.instance_dir, sidecar.network, sidecar, ident, image,
            life.result.timings, ttl_s=ttl, docs=life.docs, limits=opts.limits,
            sandbox_runtime=trial.option("sandbox_runtime"),
            allow_missing_tools=opts.allow_missing_tools,
            copy_limits=copy_limits(trial.config), seed=seed_for(ctx, trial.agent_seed))
        life.phase = phase = open_agent_phase(life.env, trial.agent.kind)
        if not phase.ready or phase.container is None:  # the task could not be set up
            phase.close()
            self._end(trial)
            verdict = self._verdict(trial)
            raise InfraError(verdict.error or str(verdict.reason_code),
                             verdict.reason_code or "setup_failed")
        return phase.container

    def oracle(self, trial: Trial, sandbox: Sandbox) -> Any:
        actx = _agent_context(trial, 600.0)

        def copy_groundtruth(_request: AgentRequest) -> RunnerOutcome:
            from harness.api import AgentOutcome as Outcome_

            oracle_agent(actx)
            return Outcome_(agent="oracle", completed=True, reason_code="oracle_applied",
                            cost_usd=0.0, cost_known=True)

        return copy_groundtruth

    def agent_request(self, trial: Trial, request: AgentRequest) -> AgentRequest:
        """The agent container as the agent sees it, the task's tools routed, ``mcp-call``
        in a bash-only agent's instruction; the agent's own files in ``runner_agent/`` (a
        resumed run never finds an earlier attempt's gateway task: its containers are gone)."""
        actx = _agent_context(trial, request.timeout_sec or self.options.task_timeout_sec)
        instruction = request.instruction
        if trial.agent.shell_only and actx.mcp is not None:  # tools through mcp-call
            instruction += tools_section(actx)
            atomic_write_text(trial.instance_dir / m.INSTRUCTION, instruction)
        route = route_request(actx.mcp)
        extra = {**request.extra, "tool_route": route} if route else dict(request.extra)
        _life(trial).agent_started = time.monotonic()
        return replace(request, instruction=instruction, sandbox=AgentBox(actx.container),
                       instance_dir=trial.instance_dir / m.RUNNER_DIR, extra=extra)

    def agent_done(self, trial: Trial, outcome: RunnerOutcome | None,
                   error: BaseException | None) -> None:
        """The spend on record (``runtime_usage.jsonl``, earlier attempts' orphans too) and
        the agent's end as the phase's status; an infrastructure failure ends the instance
        here (copy-out, records, teardown), the trial then raises it."""
        life, details = _life(trial), trial.ctx.result.details
        phase = life.phase
        assert phase is not None
        timings = life.result.timings
        timings["agent_s"] = time.monotonic() - (life.agent_started or time.monotonic())
        usage = usage_record(outcome) if outcome is not None else None
        write_usage(trial.instance_dir, orphan_usage(details) + ([usage] if usage else []))
        if isinstance(error, InfraError):
            phase.run.infra(error)
            phase.close()
            self._end(trial)
            return
        if outcome is None:
            return
        if outcome.truncated:  # also a "completed" best-effort stop: upstream's max_turns
            phase.record(AgentOutcome(status="max_turns_reached",
                                      reason_code=outcome.reason_code or "deadline_local"))
        elif outcome.completed:
            phase.record(AgentOutcome(status="success", reason_code=outcome.reason_code))
        else:
            phase.record(AgentOutcome(status="failed",
                                      reason_code=outcome.reason_code or "task_not_completed"))

    def collect(self, trial: Trial, sandbox: Sandbox) -> Any:
        phase = _life(trial).phase
        assert phase is not None
        trial.agent_completed = True  # the checker judges what the agent left, done or not
        summary = phase.close()
        _life(trial).result.timings["agent_phase_s"] = time.monotonic() - phase.t0
        return summary

    def score(self, trial: Trial, sandbox: Sandbox | None, artifact: Any) -> Verdict:
        life = _life(trial)
        if life.recovered is not None:
            trial.details["recovered"] = life.recovered.model_dump(by_alias=True)
            return self._verdict(trial)
        env, summary = life.env, artifact
        assert env is not None and isinstance(summary, m.AgentSummary)
        if not summary.infra_failed:
            started = time.monotonic()
            runner = container_checker(env)
            life.result.eval = evaluate_once(env.inst_dir, env.bench_root,
                                             env.task.instance_id, runner)
            life.result.timings["eval_s"] = time.monotonic() - started
            if self.options.diagnostic:  # while the sidecar holds the agent's state
                life.result.diagnostic = run_diagnostic(
                    env.inst_dir, env.bench_root, env.task.instance_id, runner, enabled=True)
        self._end(trial)
        return self._verdict(trial)

    def _end(self, trial: Trial) -> None:
        """Teardown (once; ``--keep-sandboxes`` keeps them), then the row's details."""
        life = _life(trial)
        if life.ended or life.ident is None:
            return
        life.ended = True
        keep = bool(trial.option("keep_sandboxes"))
        life.result.cleanup = ({"kept": True} if keep
                               else teardown(life.ident, trial.spec.instance_id))
        _details(trial, life.result)

    def _verdict(self, trial: Trial) -> Verdict:
        return verdict_of(trial, classify_instance(trial.instance_dir))


def _life(trial: Trial) -> Life:
    life: Life = trial.state[STATE]
    return life


def _agent_context(trial: Trial, timeout_sec: float) -> AgentContext:
    life = _life(trial)
    phase = life.phase
    assert phase is not None and phase.container is not None and life.env is not None
    return AgentContext(life.env, phase.container, phase.req.task_text,
                        phase.req.system_prompt, time.monotonic() + timeout_sec,
                        mcp=phase.inventory)


def _details(trial: Trial, res: InstanceResult) -> None:
    """What the instance ran, on the row: timings and the eval phase (``details.eval``), the
    cleanup (``details.engine``), images and servers (Cowork's own, ``details.cowork_bench``)."""
    bag, details = trial.ctx.result.details, trial.details
    EvalDetails(timings={k: round(v, 3) for k, v in res.timings.items()}).put(bag)
    EngineDetails(cleanup=res.cleanup).put(bag)
    details["runtime_image"] = res.runtime_image
    details["pg_image"] = res.pg_image
    if res.pg_seed_missing:
        details["pg_seed_missing"] = res.pg_seed_missing
    inventory = trial.instance_dir / INVENTORY_NAME  # harness-written, on the host
    if inventory.is_file():
        inv = McpInventory.model_validate_json(inventory.read_bytes())
        details["mcp_servers"] = {s.name: s.state for s in inv.servers}
    if res.eval is not None:
        EvalDetails(phase={"kind": res.eval.kind, "attempt_id": res.eval.attempt_id}).put(bag)
    if res.diagnostic is not None:
        details["diagnostic"] = {"outcome": res.diagnostic.outcome,
                                 "reason": res.diagnostic.reason}


def verdict_of(trial: Trial, c: Classification) -> Verdict:
    """The classification as the verdict (:meth:`Classification.row_fields`): passed and
    failed are scored, ``agent_failed`` the agent's, anything else infrastructure."""
    bag, details = trial.ctx.result.details, trial.details
    fields = c.row_fields()
    sections = fields["details"]
    details.update(sections[BENCHMARK])
    details["cowork_status"] = c.status
    EvalDetails.model_validate(sections.get(EvalDetails.KEY) or {}).put(bag)
    for name in SHOWN:
        if (trial.instance_dir / name).exists():
            trial.output(name.removesuffix(".json"), trial.instance_dir / name)
    status = fields["official_eval_status"]
    if c.outcome is Outcome.SCORED:
        receipt = c.details.get("official_receipt") or {}
        tail = _checker_tail(trial.instance_dir, receipt.get("receipt_file"))
        EvalDetails(checker_output_tail=tail).put(bag)
        if c.status == "failed":
            print(f"checker output of {trial.ctx.instance_id} (tail):\n{tail}")
        return Verdict(score=fields["score"], resolved=fields["resolved"], eval_status=status,
                       reason_code=fields["reason_code"])
    adapter = c.details.get("adapter") or {}
    if c.outcome is Outcome.AGENT_FAILED:
        return Verdict(outcome="agent_failed", reason_code=fields["reason_code"],
                       error=adapter.get("error"), eval_status=status)
    infra = c.details.get("infra") or {}
    message = infra.get("message") or adapter.get("error") or f"{c.status}: {c.reason_code}"
    return Verdict(outcome="infra", reason_code=c.reason_code, error=str(message)[:2000],
                   eval_status=status)


def _checker_tail(inst_dir: Path, receipt_file: str | None) -> str:
    if not receipt_file or not (inst_dir / receipt_file).is_file():
        return ""
    receipt = m.EvalReceipt.model_validate_json((inst_dir / receipt_file).read_bytes())
    return (receipt.stdout_tail + receipt.stderr_tail)[-CHECKER_TAIL:]
