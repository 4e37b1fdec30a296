"""The task body as the agent server's contract model (shared by the client and the flow)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from harness.agents.gateway.errors import GatewayValidation
from harness.agents.gateway.models import TaskCreateRequest, describe_validation_error


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


def neutral_task_body(*, task_id: str, instruction: str, container: str, workspace: str,
                      timeout_sec: float, source: str,
                      metadata: Mapping[str, Any] | None = None) -> TaskCreateRequest:
    """The agent server's task for a benchmark that names only a sandbox and its instruction
    (a declared benchmark: :mod:`harness.runner.trial`): work in ``container`` through
    ``docker exec``, no network, an empty memory. A workspace of ``/`` (a task that works
    in the image's root) is not named: the agent server's contract refuses it."""
    executor: dict[str, Any] = {"type": "docker_exec", "id": container,
                                "container_name": container, "network": "none"}
    if workspace.rstrip("/"):
        executor["workspace_backend_path"] = workspace
    return validate_task_body({
        "description": instruction,
        "task_id": task_id,
        "workspace_mode": "external",
        "memory_mode": "empty",
        "allowed_resources": {"web": False, "network": False, "internet": False},
        "executor_ref": executor,
        "actor_id": source,
        "source": source,
        "timeout_sec": timeout_sec,
        "metadata": dict(metadata or {}),
    })
