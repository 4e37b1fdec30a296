"""One task from start to end: reattach or submit, wait, write the result; cancel on
interrupt.

Reattach rule (reference §3 step 8.3): when the instance folder's checkpoint names a task,
ask the server. In flight or ``completed`` -> reattach (no second submission); settled
``failed``/``cancelled``/``rejected_duplicate`` or unknown -> fresh start. A task still in
``cancel_requested`` is first waited on until it settles.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from harness.agents.gateway.body import validate_task_body
from harness.agents.gateway.checkpoint import (
    AgentFolder,
    new_task_id,
    read_checkpoint,
    write_checkpoint,
)
from harness.agents.gateway.errors import ClientPollTimeout, GatewayError
from harness.agents.gateway.events import EventLog
from harness.agents.gateway.models import (
    CANCEL_REQUESTED,
    IN_FLIGHT_STATUSES,
    TaskCreateRequest,
    TaskResult,
)
from harness.core.fsutil import atomic_write_json
from harness.core.models import ModelCalls

if TYPE_CHECKING:
    from harness.agents.gateway.client import GatewayClient

__all__ = ["ReattachDecision", "TaskRun", "reattach_decision", "run_task", "validate_task_body"]

log = logging.getLogger("harness.agents.gateway.client")

RESULT_NAME = "task_result.json"
MAX_FINAL_EVENT_PAGES = 20
DEFAULT_TASK_TIMEOUT_S = 6 * 3600.0


class ReattachDecision(BaseModel):
    action: Literal["reattach", "fresh"]
    reason: str
    task_id: str | None = None
    status: str | None = None


class TaskRun(BaseModel):
    """What :meth:`GatewayClient.run_task` did."""

    task_id: str
    result: TaskResult
    reattached: bool
    decision: ReattachDecision
    body_path: str | None
    checkpoint_path: str
    result_path: str
    polls: int
    events_path: str | None = None
    events: dict[str, Any] = {}
    # The task's llm_usage records per model (gateway_server), ``allowed`` not yet decided.
    models: dict[str, ModelCalls] = {}
    # Set when ``--per-task-limit-usd`` cancelled the task: what it had spent then.
    limit_reached: str | None = None


class TaskLimitReached(Exception):
    """The task's spend reached the per-task limit (raised from a poll)."""


def limit_check(limit_usd: float | None, events: EventLog | None) -> Any:
    """A ``wait`` poll callback raising :class:`TaskLimitReached` once the task's spend
    (the larger of the cost its status reports and the costs of its ``llm_usage`` events)
    reaches ``limit_usd``; None without a limit."""
    if limit_usd is None:
        return None

    def check(result: TaskResult) -> None:
        from harness.agents.gateway.classify import result_cost

        if result.status in ("completed", "failed", "cancelled"):
            return
        reported, known = result_cost(result)
        seen = events.status.usage_cost_usd if events is not None else 0.0
        spent = max(reported or 0.0, seen)
        if spent >= limit_usd:
            raise TaskLimitReached(f"spent ${spent:.6f} of ${limit_usd:g}")
        if not known and result.unknown_unmetered:
            # Spend the server cannot meter: the limit cannot be kept (like the model
            # gateway after an unpriceable call).
            raise TaskLimitReached(f"cost_unknown: the server reports unmetered spend "
                                   f"(${spent:.6f} known) under a ${limit_usd:g} limit")

    return check


def reattach_decision(client: GatewayClient, checkpoint_path: Path) -> ReattachDecision:
    """Reattach to the checkpoint's task when it is in flight or completed."""
    checkpoint = read_checkpoint(checkpoint_path)
    if checkpoint is None:
        return ReattachDecision(action="fresh", reason="no_checkpoint")
    task_id = checkpoint.task_id
    found = client.find_task(task_id)
    if found is not None and found.status == CANCEL_REQUESTED:
        try:
            found = client.wait(task_id, timeout_s=client.policy.cancel_settle_s)
        except ClientPollTimeout as exc:
            raise GatewayError(
                f"task {task_id} from the checkpoint is still cancelling; retry later",
                "gateway_cancel_pending",
                task_id=task_id,
            ) from exc
    if found is None:
        return ReattachDecision(action="fresh", reason="task_unknown", task_id=task_id)
    status = found.status
    if status in IN_FLIGHT_STATUSES or status == "completed":
        return ReattachDecision(
            action="reattach", reason=f"task_{status}", task_id=task_id, status=status
        )
    return ReattachDecision(action="fresh", reason=f"task_{status}", task_id=task_id, status=status)


def run_task(
    client: GatewayClient,
    body: TaskCreateRequest | Mapping[str, Any],
    *,
    instance_dir: Path,
    adapter: str = "harness",
    timeout_s: float | None = None,
    assign_task_id: bool = True,
    secrets: Mapping[str, str] | None = None,
    limit_usd: float | None = None,
) -> TaskRun:
    """Reattach or submit, then wait; cancel the task if interrupted (Ctrl-C, stop).

    The task's events are copied (scrubbed of ``secrets``) before every status request
    (:mod:`harness.agents.gateway.events`). With ``limit_usd`` (``--per-task-limit-usd``)
    the task is cancelled once its spend reaches it (:func:`limit_check`); the result
    then says ``reason_code: per_task_limit_reached`` (the server's own answer is kept in
    ``task_result.json``)."""
    instance_dir = Path(instance_dir)
    instance_dir.mkdir(parents=True, exist_ok=True)
    checkpoint_path = AgentFolder(instance_dir).checkpoint  # readers: AgentFolder too
    request = validate_task_body(body)
    decision = reattach_decision(client, checkpoint_path)
    if timeout_s is None:
        timeout_s = request.timeout_sec or request.timeout
    wait_s = (timeout_s or DEFAULT_TASK_TIMEOUT_S) + client.policy.client_grace_s
    body_path: Path | None = None
    task_id: str | None = None
    try:
        if decision.action == "reattach":
            assert decision.task_id is not None
            task_id = decision.task_id
            log.info("reattaching to task %s (%s)", task_id, decision.reason)
        else:
            if assign_task_id and request.task_id is None:
                request = request.model_copy(
                    update={"task_id": new_task_id(f"{adapter}-{instance_dir.name}")}
                )
            body_path = instance_dir / f"{adapter}_task_body.json"
            atomic_write_json(body_path, request.body())
            task_id = request.task_id  # known before the POST: cancellable if interrupted
            task_id = client.submit(request).task_id
            write_checkpoint(checkpoint_path, task_id, "submitted", None, client.base_url, 0)
        events = EventLog(client, task_id, instance_dir, secrets)
        result, limit_reached = _settle(client, task_id, wait_s, checkpoint_path, events,
                                        limit_usd)
    except Exception:
        raise
    except BaseException:
        if task_id is not None:
            log.warning("interrupted: cancelling agent task %s", task_id)
            client.cancel(task_id)
        raise
    result_path = instance_dir / RESULT_NAME
    atomic_write_json(result_path, result)
    if limit_reached is not None:
        result = result.model_copy(update={"reason_code": "per_task_limit_reached"})
    return TaskRun(
        task_id=task_id,
        limit_reached=limit_reached,
        result=result,
        reattached=decision.action == "reattach",
        decision=decision,
        body_path=str(body_path) if body_path else None,
        checkpoint_path=str(checkpoint_path),
        result_path=str(result_path),
        polls=read_polls(checkpoint_path),
        events_path=str(events.path) if events.status.copied else None,
        events=events.status.model_dump(mode="json"),
        models=events.models,
    )


def _settle(client: GatewayClient, task_id: str, wait_s: float, checkpoint_path: Path,
            events: EventLog, limit_usd: float | None) -> tuple[TaskResult, str | None]:
    """Wait for the task to settle (cancelled once its spend reaches ``limit_usd``), copy
    what it logged as it settled and checkpoint it: its result, and why the per-task limit
    stopped it (None: it did not)."""
    limit_reached: str | None = None
    try:
        result = client.wait(task_id, timeout_s=wait_s, checkpoint_path=checkpoint_path,
                             events=events, on_poll=limit_check(limit_usd, events))
    except TaskLimitReached as exc:
        limit_reached = str(exc)
        log.warning("task %s reached --per-task-limit-usd (%s): cancelling", task_id, exc)
        client.cancel(task_id)
        result = client.wait(task_id, timeout_s=client.policy.cancel_settle_s,
                             checkpoint_path=checkpoint_path, events=events)
    for _ in range(MAX_FINAL_EVENT_PAGES):  # what the task logged as it settled
        before = events.status.copied
        if events.copy().copied == before:
            break
    write_checkpoint(checkpoint_path, task_id, result.status or "unknown", result,
                     client.base_url, read_polls(checkpoint_path),
                     events.status.model_dump(mode="json"))
    return result, limit_reached


def read_polls(checkpoint_path: Path) -> int:
    checkpoint = read_checkpoint(checkpoint_path)
    return checkpoint.polls if checkpoint else 0


