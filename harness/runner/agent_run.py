"""One instance's run of its agent: the agent's hooks around ``run``, the instance's tape
session (``--model-record``/``--model-replay``), and what the row records of the outcome
(cost, tokens, models, steps, the agent's section). The trial calls :func:`run_agent`; the
``harness_agent`` fixture (:mod:`harness.runner.agent_plugin`) registers each agent's tape.
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.errors import InfraError
from harness.core.outcomes import Outcome

if TYPE_CHECKING:  # agents and rows load when a run starts, not at collection
    from harness.agents.base import Agent, AgentOutcome, AgentRequest, InstanceView
    from harness.core.row_details import DetailsBag
    from harness.model_proxy.tape import TapeConfig, TapeSession
    from harness.runner.instance import InstanceContext

# Reasons an agent's run ends with when its model calls fail: a strict replay's miss wins.
MODEL_FAILURES = ("model_upstream_failed", "model_api_error")
# The tape of each agent this process built (the harness_agent fixture's).
TAPES: weakref.WeakKeyDictionary[Agent, TapeConfig] = weakref.WeakKeyDictionary()


def instance_view(ctx: InstanceContext) -> InstanceView:
    """What an agent's hooks see of ``ctx`` (:class:`harness.agents.base.InstanceView`)."""
    from harness.agents.base import InstanceView

    return InstanceView(benchmark=ctx.benchmark, instance_id=ctx.instance_id,
                        instance_dir=ctx.instance_dir, run_root=ctx.run_root,
                        ancestors=tuple(Path(a) for a in ctx.run.plan.ancestors),
                        details=ctx.result.details, output=ctx.output)


def run_agent(ctx: InstanceContext, agent: Agent, request: AgentRequest) -> AgentOutcome:
    """Run the agent for this instance and record what the row needs.

    Raises :class:`OutcomeSkip` (skipped row) when the oracle is unavailable and
    :class:`InfraError` for an infrastructure outcome; returns the outcome otherwise
    (``completed`` false means the agent did not finish: the adapter decides whether to
    score partial work).
    """
    from harness.agents.base import OracleUnavailable
    from harness.model_proxy.tape import TapeSession, instance_tape
    from harness.runner.instance import OutcomeSkip, Unresolved

    view = instance_view(ctx)
    request = agent.before_run(view, request)
    r = ctx.result
    tape = TAPES.get(agent)
    session = None if tape is None else TapeSession(tape, ctx.benchmark, ctx.instance_id,
                                                    ctx.instance_dir)
    r.agent_started = True
    outcome: AgentOutcome | None = None
    try:
        with instance_tape(session):  # closed (index or replay report written) at its end
            outcome = agent.run(request)
    except OracleUnavailable as exc:
        r.agent_started = False
        raise OutcomeSkip(Outcome.SKIPPED, exc.reason, str(exc)) from exc
    finally:
        agent.after_run(view, request, outcome)  # also when interrupted or given up
        if session is not None:
            from harness.core.row_details import AgentDetails

            AgentDetails.model_validate({f"model_{session.config.mode}": session.summary()}
                                        ).put(r.details)
    if session is not None and session.replaying:
        outcome = replayed_outcome(ctx, session, outcome)
    r.cost_usd = outcome.cost_usd
    r.cost_known = outcome.cost_known
    r.reattached, r.earlier_cost_usd = outcome.reattached, outcome.earlier_cost_usd
    r.tokens = outcome.tokens
    r.models = outcome.models
    r.steps = outcome.steps
    record_outcome(r.details, outcome)
    for name, path in outcome.output_paths.items():
        ctx.output(name, Path(path))
    if outcome.infra:
        raise InfraError(f"agent {outcome.agent}: {outcome.reason_code}",
                         outcome.reason_code or "agent_infra")
    if outcome.sandbox_lost:  # the agent ended its own sandbox: nothing left to collect
        reason = outcome.reason_code or "agent_sandbox_exited"
        ctx.agent_failed(reason, f"the agent's sandbox ended while it ran: {reason}")
        raise Unresolved(f"agent_failed: {reason}", pytrace=False)
    return outcome


def record_outcome(details: DetailsBag, outcome: AgentOutcome) -> None:
    """The row's agent section of ``outcome`` (its own details under ``details``)."""
    from harness.core.row_details import AgentDetails

    section = AgentDetails(
        cost_source=outcome.details.get("cost_source") or (
            "agent_reported" if outcome.cost_known else "unknown"),
        kind=outcome.agent, runtime_outcome=outcome.runtime_outcome.model_dump(mode="json"))
    if outcome.task_id:
        section.task_id = outcome.task_id
    if outcome.truncated:
        section.truncated = True
    if outcome.details:
        section.details = dict(outcome.details)
    for key in ("model_trouble", "model_upstream_failure"):  # the provider's pushback (45)
        if key in outcome.details:
            setattr(section, key, outcome.details[key])
    section.put(details)


def replayed_outcome(ctx: InstanceContext, session: TapeSession,
                     outcome: AgentOutcome) -> AgentOutcome:
    """A replayed agent's outcome: cost $0 (``cost_source: replay``; what the calls cost
    when recorded is in ``details.model_replay``), and a strict replay's miss the agent's
    failure ``replay_miss`` (unless the agent already failed on infrastructure of its
    own)."""
    from harness.model_proxy.tape import MISS_CODE, REPORT_NAME

    report = ctx.instance_dir / REPORT_NAME
    update: dict[str, Any] = {
        "cost_usd": 0.0, "cost_known": True,
        "models": None if outcome.models is None else
        [m.model_copy(update={"cost_usd": 0.0}) for m in outcome.models],
        "details": {**outcome.details, "cost_source": "replay"},
        "output_paths": {**outcome.output_paths,
                         **({"model_replay": str(report)} if report.is_file() else {})},
    }
    if session.missed and (not outcome.infra or outcome.reason_code in MODEL_FAILURES):
        update.update(completed=False, infra=False, reason_code=MISS_CODE)
    return outcome.model_copy(update=update)
