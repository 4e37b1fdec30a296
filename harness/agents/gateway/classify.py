"""Turn an agent server's task result into an :class:`AgentOutcome` (reference §1.8).

Infrastructure: ``reason_code`` in {llm_api_error, provider_unavailable}, or
``outcome_axes.execution`` with status ``infra_failed``/``llm_api_error`` or one of those
reason codes. Truncation: the server's best-effort reason codes. Pure functions.
"""

from __future__ import annotations

from harness.agents.base import AgentOutcome, RuntimeOutcome
from harness.agents.gateway.models import (
    INFRA_EXECUTION_STATUSES,
    INFRA_REASON_CODES,
    TRUNCATION_REASON_CODES,
    TaskResult,
)
from harness.core.models import Tokens


def is_infra_failure(result: TaskResult) -> bool:
    if result.reason_code in INFRA_REASON_CODES:
        return True
    execution = result.outcome_axes.execution if result.outcome_axes else None
    if execution is None:
        return False
    return (
        execution.status in INFRA_EXECUTION_STATUSES
        or execution.reason_code in INFRA_REASON_CODES
        or execution.reason_code in INFRA_EXECUTION_STATUSES
    )


def is_truncated(result: TaskResult) -> bool:
    return result.reason_code in TRUNCATION_REASON_CODES


def result_tokens(result: TaskResult) -> Tokens:
    prompt, completion = result.prompt_tokens, result.completion_tokens
    total = prompt + completion if prompt is not None and completion is not None else None
    return Tokens(prompt=prompt, completion=completion, total=total)


def result_cost(result: TaskResult) -> tuple[float | None, bool]:
    """(cost in USD, known): the accounted upper bound, children included when reported."""
    cost = result.accounted_upper_bound_usd_with_children
    if cost is None:
        cost = result.accounted_upper_bound_usd
    known = bool(result.cost_known) and cost is not None and not result.unknown_unmetered
    if result.cost_with_children_partial:
        known = False
    return cost, known


def runtime_outcome(result: TaskResult) -> RuntimeOutcome:
    execution = result.outcome_axes.execution if result.outcome_axes else None
    return RuntimeOutcome(
        available=result.status is not None,
        status=result.status,
        reason_code=result.reason_code,
        truncated=is_truncated(result),
        degraded=result.degraded,
        degraded_reason=result.degraded_reason,
        execution_status=execution.status if execution else None,
        execution_reason_code=execution.reason_code if execution else None,
        resource_limit=result.loop_outcome.resource_limit if result.loop_outcome else None,
    )


def classify_result(
    result: TaskResult,
    *,
    task_id: str | None = None,
    raw_result_path: str | None = None,
    agent: str = "gateway",
) -> AgentOutcome:
    """The outcome of a settled task (completed only on an explicit ``completed`` status)."""
    infra = is_infra_failure(result)
    completed = result.status == "completed" and not infra
    reason = result.reason_code
    if reason is None:
        reason = "completed" if completed else f"task_{result.status or 'unknown'}"
    cost, known = result_cost(result)
    return AgentOutcome(
        agent=agent,
        completed=completed,
        infra=infra,
        reason_code=reason,
        truncated=is_truncated(result),
        cost_usd=cost,
        cost_known=known,
        tokens=result_tokens(result),
        runtime_outcome=runtime_outcome(result),
        task_id=task_id or result.task_id,
        raw_result_path=raw_result_path,
        details={
            "total_rounds": result.total_rounds,
            "cost_final": result.cost_final,
            "artifact_status": result.artifact_status,
            "dropped_fields": sorted(result.dropped_fields),
        },
    )
