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
