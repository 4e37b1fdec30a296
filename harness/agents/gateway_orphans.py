"""Never two live paid tasks for one instance: settle an earlier attempt's task first.

A run that crashed (SIGKILL, a lost machine) or whose client gave up waiting leaves its
gateway task on the server, where it may still run and spend. Its sandbox is gone (the
harness removes an instance's sandbox when the instance ends, and a resume starts a fresh
one), so the task cannot be reattached: before a resume submits a fresh task for the
instance, each task named by an ancestor's checkpoint is looked up and, when still in flight,
cancelled and waited on until settled. What was found and done is returned for the row
(``details.orphan_tasks``). When the server cannot say, or the task will not settle, the
instance stops with an infra outcome instead of starting a second paid task.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness.agents.checkpoint import read_checkpoint
from harness.agents.classify import result_cost
from harness.agents.gateway import ClientPollTimeout, GatewayClient
from harness.agents.gateway_errors import GatewayError
from harness.agents.gateway_models import CANCEL_REQUESTED, IN_FLIGHT_STATUSES

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
        records.append(_settle(client, checkpoint.task_id, str(path)))
    return records


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
