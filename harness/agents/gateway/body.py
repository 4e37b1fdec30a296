"""The task body as the agent server's contract model (shared by the client and the flow)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from harness.agents.gateway.errors import GatewayValidation
from harness.agents.gateway.models import TaskCreateRequest, describe_validation_error

if TYPE_CHECKING:
    from harness.agents.base import AgentRequest
    from harness.sandbox.protocol import Sandbox


def validate_task_body(body: TaskCreateRequest | Mapping[str, Any]) -> TaskCreateRequest:
    """The body as the contract model; a contract violation raises GatewayValidation."""
    if isinstance(body, TaskCreateRequest):
        return body
    try:
        return TaskCreateRequest.model_validate(dict(body))
    except ValidationError as exc:
        raise GatewayValidation(
            "task body does not satisfy the agent server's contract: "
            + describe_validation_error(exc),
            "task_body_invalid",
        ) from exc


def task_for(request: AgentRequest, task_id: str) -> TaskCreateRequest:
    """The agent server's task for a neutral request (the gateway agent builds every task
    it submits from its request; no benchmark builds one). In the request's sandbox through
    ``docker exec`` (a dry run, with none: ``<sandbox>``), in its workspace (a host folder
    mounted there is named too), with an empty memory; a sandbox without a network is said
    to be one, and the task then gets no web, network or internet either. The task's terms
    (:class:`harness.agents.base.AgentTerms`) give the rest: the tools it must not use, the
    files it may only run, what the work must meet, who asks, its metadata and its time. A
    workspace of ``/`` (a task that works in the image's root) is not named: the agent
    server's contract refuses it."""
    terms, sandbox = request.terms, request.sandbox
    container = sandbox.name if sandbox is not None else "<sandbox>"
    workspace = terms.workspace or (sandbox.spec.workdir if sandbox is not None else None) or "/"
    offline = terms.offline if terms.offline is not None else (
        sandbox is None or sandbox.spec.network == "none")
    host = (host_workspace(sandbox, workspace) if sandbox is not None
            else terms.host_workspace)
    executor: dict[str, Any] = {"type": "docker_exec", "id": container,
                                "container_name": container}
    if offline:
        executor["network"] = "none"
    if host is not None:
        executor["workspace_host_path"] = host
    if workspace.rstrip("/"):
        executor["workspace_backend_path"] = workspace
    body: dict[str, Any] = {
        "description": request.instruction, "task_id": task_id, "workspace_root": host,
        "workspace_mode": "external", "memory_mode": "empty", "executor_ref": executor,
        "actor_id": terms.source or request.adapter, "source": terms.source or request.adapter,
        "timeout_sec": terms.work_timeout_sec or request.timeout_sec or 600.0,
        "metadata": dict(terms.metadata)}
    if offline:
        body["allowed_resources"] = {"web": False, "network": False, "internet": False}
    if terms.protected:
        body["resource_policy"] = {"protected_artifacts": [
            {"id": p.id, "role": p.role, "paths": list(p.paths), "allow": list(p.allow),
             "deny": list(p.deny)} for p in terms.protected]}
    if terms.tools_off:
        body["disabled_tools"] = list(terms.tools_off)
    if terms.acceptance:
        body["acceptance_claims"] = [
            {"id": a.id, "claim": a.claim, "surface": a.surface, "support": a.support,
             "priority": a.priority} for a in terms.acceptance]
    return validate_task_body(body)


def host_workspace(sandbox: Sandbox, workspace: str) -> str | None:
    """The host folder bind-mounted on the sandbox's ``workspace``, if any (its spec: for a
    sandbox taken over from an earlier run, as the engine reported its mounts)."""
    want = workspace.rstrip("/") or "/"
    return next((str(host) for host, inside in getattr(sandbox.spec, "binds", ()) or ()
                 if (inside.rstrip("/") or "/") == want), None)
