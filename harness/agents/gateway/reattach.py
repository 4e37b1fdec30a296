"""Never throw away an unsettled agent-server task: keep its sandbox, reattach on resume.

A ``docker_exec`` task works inside one sandbox. When the harness stops waiting before the
task settled, that sandbox is kept (:mod:`harness.sandbox.reattach`: labelled, ended by its
TTL) and a resume takes it over and reattaches to the same task id (no second submission,
no second paid task). The steps, for an adapter whose gateway task runs in a sandbox:

1. :func:`reattach_labels` on the sandbox it creates for a gateway agent;
   :func:`record_sandbox` once the sandbox is ready (protected files installed);
2. on resume, :func:`adopt_kept_sandbox` before creating one: the nearest ancestor's record
   and checkpoint, the server's word that the task is in flight or completed, and the
   sandbox still the same; it returns the sandbox and the ``AgentRequest.extra`` for the
   reattach, or None (the row says why; the fresh start then cancels the old task);
3. :func:`keep_after_give_up` when the client gave up on a task it left running.

The instance is seen through :class:`harness.agents.base.InstanceView` (the runner's
``harness.runner.agent_run.instance_view(ctx)``) and the instance's sandbox factory
through :class:`SandboxKeeper` (``harness.runner.sandbox_fixtures.SandboxFactory``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from harness.agents.base import SandboxKeeper
from harness.agents.gateway import run as gateway_run
from harness.agents.gateway.checkpoint import CHECKPOINT_NAME
from harness.agents.gateway.client import GatewayClient, PollPolicy
from harness.core.row_details import AgentDetails
from harness.sandbox import labels as L
from harness.sandbox.reattach import (
    RECORD_NAME,
    ReattachUnavailable,
    read_record,
    record_of,
    write_record,
)

if TYPE_CHECKING:
    from harness.agents.base import Agent, InstanceView
    from harness.sandbox.container import Sandbox

log = logging.getLogger(__name__)

__all__ = [
    "SandboxKeeper",
    "adopt_kept_sandbox",
    "keep_after_give_up",
    "reattach_labels",
    "record_sandbox",
    "redo_existing",
]


class ServerAgent(Protocol):
    """What a reattach needs of the agent: its server, and how to poll it."""

    base_url: str
    policy: PollPolicy


def _server(agent: Agent) -> ServerAgent | None:
    """The agent, when it reattaches to its server's tasks (``Agent.reattaches``)."""
    if not agent.reattaches:
        return None
    if not isinstance(getattr(agent, "base_url", None), str):
        raise TypeError(f"agent kind {agent.kind!r} reattaches but names no server base_url")
    return cast(ServerAgent, agent)


def reattach_labels(agent: Agent) -> dict[str, str]:
    """Labels of a sandbox the agent's task works in: kept for a reattach when the agent
    reattaches (``Agent.reattaches``)."""
    return {L.REATTACH: "gateway"} if _server(agent) is not None else {}


def record_sandbox(view: InstanceView, sandbox: Sandbox) -> None:
    """Write ``sandbox.json`` in the instance folder (what a resume needs to adopt it)."""
    write_record(view.instance_dir, record_of(sandbox))


def adopt_kept_sandbox(view: InstanceView, agent: Agent,
                       factory: SandboxKeeper) -> tuple[Sandbox, dict[str, Any]] | None:
    """The nearest ancestor's kept sandbox, adopted, and the request ``extra`` that
    reattaches to its task; None when there is none to take over (``details.reattach``
    says why)."""
    gateway = _server(agent)
    if gateway is None or not view.ancestors:
        return None
    for root in view.ancestors:
        folder = Path(root) / view.benchmark / view.instance_id
        checkpoint = folder / CHECKPOINT_NAME
        if not checkpoint.is_file():
            continue  # that ancestor never submitted: look further back
        note: dict[str, Any] = {"from": str(folder)}
        try:
            return _adopt(folder, checkpoint, note, view, gateway, factory)
        finally:
            AgentDetails(reattach=note).put(view.details)
    return None


def _adopt(folder: Path, checkpoint: Path, note: dict[str, Any], view: InstanceView,
           gateway: ServerAgent, factory: SandboxKeeper) -> tuple[Sandbox, dict[str, Any]] | None:
    """Adopt the sandbox ``folder``'s attempt kept for its task (what happened: ``note``)."""
    record = read_record(folder / RECORD_NAME)
    if record is None or not record.reattachable:
        note["adopted"], note["reason"] = False, "no_kept_sandbox"
        return None
    with GatewayClient(gateway.base_url, policy=gateway.policy) as client:
        decision = gateway_run.reattach_decision(client, checkpoint)
    note.update(task_id=decision.task_id, task_status=decision.status)
    if decision.action != "reattach":
        note["adopted"], note["reason"] = False, decision.reason
        return None
    try:
        sandbox = factory.adopt(record)
    except ReattachUnavailable as exc:
        log.warning("cannot reattach: %s", exc)
        note["adopted"], note["reason"], note["error"] = False, exc.reason, str(exc)
        return None
    note.update(adopted=True, sandbox=record.name, expires_unix=record.expires_unix())
    write_record(view.instance_dir, record)  # a crash now can reattach again
    return sandbox, {"reattach": True, "reattach_checkpoint": str(checkpoint)}


def redo_existing(view: InstanceView, factory: SandboxKeeper) -> dict[str, Any]:
    """``--pb-redo-existing``: the ancestors' task checkpoints are cleared for this instance,
    as the specification's flag does: nothing is reattached, the tasks they name are settled
    as orphans before a fresh one is submitted (the gateway agent's ``before_run``), and a
    sandbox an ancestor kept for its task is taken over only to be removed with this
    instance's. The ancestors' files are never changed (their history stays); what was
    cleared is returned for ``details.redo_existing``."""
    out: dict[str, Any] = {"cleared_checkpoints": [], "kept_sandboxes_removed": []}
    for root in view.ancestors:
        folder = Path(root) / view.benchmark / view.instance_id
        if (folder / CHECKPOINT_NAME).is_file():
            out["cleared_checkpoints"].append(str(folder / CHECKPOINT_NAME))
        record = read_record(folder / RECORD_NAME)
        if record is None or not record.reattachable:
            continue
        try:
            factory.adopt(record)  # removed with this instance's sandboxes
        except ReattachUnavailable:
            continue
        out["kept_sandboxes_removed"].append(record.name)
    return out


def keep_after_give_up(view: InstanceView, factory: SandboxKeeper, sandbox: Sandbox) -> bool:
    """After a client give-up that left the task running (``agent_details.reattachable``),
    leave the sandbox running for a resume; True when kept (recorded in the row)."""
    agent = AgentDetails.read(view.details)
    agent_details = agent.details or {}
    if not agent_details.get("reattachable") or agent_details.get("cancelled_on_give_up"):
        return False
    try:
        factory.keep(sandbox)
    except ValueError:
        return False
    record = read_record(view.instance_dir / RECORD_NAME)
    AgentDetails(kept_sandbox={
        "name": sandbox.name, "task_id": agent.task_id,
        "expires_unix": record.expires_unix() if record else None,
        "resume": f"--resume-from {view.run_root}"}).put(view.details)
    return True
