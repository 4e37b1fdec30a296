"""Never two live paid tasks for one instance: settle an earlier attempt's task first.

A run that crashed (SIGKILL, a lost machine) or whose client gave up waiting leaves its
gateway task on the server, where it may still run and spend. Its sandbox is gone (the
harness removes an instance's sandbox when the instance ends, and a resume starts a fresh
one), so the task cannot be reattached: before a resume submits a fresh task for the
instance, each task named by an ancestor's checkpoint is looked up and, when still in flight,
cancelled and waited on until settled. What was found and done is returned for the row
(``details.orphan_tasks``), with what the earlier attempt's copied events prove about its
spend (``paid_activity`` ``observed`` when an ``llm_usage`` record reports tokens, with
their sums; else ``unknown``): the events sit beside the checkpoint
(:class:`harness.agents.gateway.checkpoint.AgentFolder`). When the server cannot say, or the task
will not settle, the instance stops with an infra outcome instead of starting a second paid
task.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from harness.agents.gateway.checkpoint import EVENTS_NAME, AgentFolder, read_checkpoint
from harness.agents.gateway.classify import result_cost
from harness.agents.gateway.client import ClientPollTimeout, GatewayClient
from harness.agents.gateway.errors import GatewayError
from harness.agents.gateway.events import read_events, usage_with_tokens
from harness.agents.gateway.models import CANCEL_REQUESTED, IN_FLIGHT_STATUSES, TaskResult
from harness.core.row_details import AgentDetails
from harness.core.untrusted import is_regular_file

log = logging.getLogger(__name__)

ORPHAN_LIVE = "gateway_orphan_live"


def settle_orphans(client: GatewayClient, checkpoints: Iterable[Path | str]) -> list[dict[str, Any]]:
    """Cancel every still-running task the given checkpoints name; one record per task."""
    records: list[dict[str, Any]] = []
    seen: set[str] = set()
    for path in checkpoints:
        checkpoint = read_checkpoint(Path(path))
        if checkpoint is None or checkpoint.task_id in seen:
            continue
        seen.add(checkpoint.task_id)
        record = _settle(client, checkpoint.task_id, str(path))
        usage_seen = bool((checkpoint.events or {}).get("usage_observed"))
        records.append({**record, **paid_evidence(Path(path).parent / EVENTS_NAME, usage_seen)})
    return records


def paid_evidence(events: Path, usage_seen: bool = False) -> dict[str, Any]:
    """What an earlier attempt's copied events prove about its spend: ``paid_activity``
    (``observed``/``unknown``) and the tokens its ``llm_usage`` records report."""
    prompt = completion = 0
    observed = usage_seen
    for event in read_events(events):
        if not usage_with_tokens(event):
            continue
        observed = True
        prompt += _count(event, "prompt_tokens", "input_tokens")
        completion += _count(event, "completion_tokens", "output_tokens")
    out: dict[str, Any] = {"paid_activity": "observed" if observed else "unknown"}
    if observed:
        out.update(prompt_tokens=prompt, completion_tokens=completion)
    if is_regular_file(events):
        out["events"] = str(events)
    return out


def _count(event: dict[str, Any], *keys: str) -> int:
    nested = event.get("usage")
    usage: dict[str, Any] = nested if isinstance(nested, dict) else event
    for key in keys:
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def _settle(client: GatewayClient, task_id: str, checkpoint: str) -> dict[str, Any]:
    record: dict[str, Any] = {"task_id": task_id, "checkpoint": checkpoint}
    found = client.find_task(task_id)  # GatewayUnavailable (infra) when the server cannot say
    if found is None:
        return {**record, "status": None, "action": "unknown_to_server"}
    record["status_before"] = found.status
    if found.status not in IN_FLIGHT_STATUSES and found.status != CANCEL_REQUESTED:
        return {**record, "status": found.status, "action": "already_settled",
                "cost_usd": result_cost(found)[0]}
    if found.status != CANCEL_REQUESTED:
        log.warning("cancelling task %s left running by an earlier attempt", task_id)
        if not client.cancel(task_id):
            again = client.find_task(task_id)
            if again is None or again.status in IN_FLIGHT_STATUSES:
                raise GatewayError(
                    f"task {task_id} of an earlier attempt is still {found.status} and the "
                    "server refused to cancel it: not starting a second paid task (cancel it "
                    "on the agent server, then resume)", ORPHAN_LIVE, task_id=task_id)
    try:
        settled = client.wait(task_id, timeout_s=client.policy.cancel_settle_s)
    except ClientPollTimeout as exc:
        raise GatewayError(
            f"task {task_id} of an earlier attempt did not settle within "
            f"{client.policy.cancel_settle_s:.0f}s of its cancel: not starting a second paid "
            "task (resume again once it has settled)", ORPHAN_LIVE, task_id=task_id) from exc
    return {**record, "status": settled.status, "action": "cancelled",
            "cost_usd": result_cost(settled)[0]}


def orphans_cost(orphans: Iterable[dict[str, Any]]) -> float | None:
    """What the settled orphan tasks reported they cost (their known, finite, non-negative
    ``cost_usd`` summed), None when none reported one: the budget charges it to the
    instance (``AgentOutcome.earlier_cost_usd``)."""
    costs = [o.get("cost_usd") for o in orphans if isinstance(o, dict)]
    known = [float(c) for c in costs
             if isinstance(c, int | float) and not isinstance(c, bool) and math.isfinite(c)
             and c >= 0]
    return math.fsum(known) if known else None


def orphan_checkpoints(folder: AgentFolder, *, benchmark: str, instance_id: str,
                       ancestors: Iterable[Path | str]) -> list[str]:
    """Checkpoints of earlier attempts at this instance whose tasks may still run: the
    ancestors' (a resume) and ``folder``'s own (an instance run again in the same root), the
    latter moved aside so the new attempt starts fresh. ``folder``: the agent's folder (the
    same subfolder in every root).

    A task an ancestor's row already accounts for is left out (its spend is recorded once):
    one that row's attempt settled as an orphan (``agent_details.orphan_tasks``), or its own
    task when the row knows its cost."""
    roots = list(ancestors)
    found = [str(folder.in_run(root, benchmark, instance_id).checkpoint) for root in roots]
    own = folder.checkpoint
    if own.exists():
        aside = own.with_name(f"{own.stem}.earlier-{os.getpid()}-{len(found)}{own.suffix}")
        os.replace(own, aside)
        found.append(str(aside))
    accounted = accounted_task_ids(benchmark=benchmark, instance_id=instance_id,
                                   ancestors=roots)
    out = []
    for path in found:
        checkpoint = read_checkpoint(Path(path)) if Path(path).is_file() else None
        if checkpoint is not None and checkpoint.task_id not in accounted:
            out.append(path)
    return out


def accounted_task_ids(*, benchmark: str, instance_id: str,
                       ancestors: Iterable[Path | str]) -> set[str]:
    """Gateway tasks whose spend a row of this instance in an ancestor's ledger records."""
    from harness.run.ledger import LedgerError, ledger_path, read_ledger

    ids: set[str] = set()
    for root in ancestors:
        try:
            rows = read_ledger(ledger_path(Path(root))).rows
        except (LedgerError, OSError):
            continue  # an unreadable ledger accounts for nothing
        for row in rows:
            if row.benchmark != benchmark or row.instance_id != instance_id:
                continue
            agent = row.details.agent.details
            orphans = agent.get("orphan_tasks") if agent is not None else None
            for orphan in orphans if isinstance(orphans, list) else []:
                if isinstance(orphan, dict) and isinstance(orphan.get("task_id"), str):
                    ids.add(orphan["task_id"])
            task_id = row.details.agent.task_id
            if row.cost_known and isinstance(task_id, str):
                ids.add(task_id)
    return ids


def record_paid_evidence(folder: AgentFolder, details: dict[str, Any],
                         output: Callable[[str, Path], object]) -> None:
    """What the agent's ``folder`` proves about a gateway task's spend, for the row's
    ``paid_activity`` (``details.agent.paid_evidence``), and its copied events as an output."""
    events = folder.events
    if is_regular_file(events):
        output("gateway_events", events)
    checkpoint = read_checkpoint(folder.checkpoint)
    if (checkpoint is not None and (checkpoint.events or {}).get("usage_observed")) or any(
            usage_with_tokens(e) for e in read_events(events)):  # copied, not yet checkpointed
        AgentDetails(paid_evidence="gateway_events_llm_usage").put(details)
        return
    if checkpoint is not None and checkpoint.task_result:
        try:
            cost, _ = result_cost(TaskResult.parse_tolerant(checkpoint.task_result))
        except ValueError:
            return
        if cost:
            AgentDetails(paid_evidence="task_result_cost").put(details)
