"""Errors of the agent-server client: each is an infra failure with a stable reason code."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.core.errors import InfraError

if TYPE_CHECKING:
    from harness.agents.gateway.models import TaskResult


class GatewayError(InfraError):
    """The agent server could not be used (an infrastructure failure, never the model's)."""

    reason_code = "gateway_error"

    def __init__(
        self,
        message: str,
        reason_code: str | None = None,
        *,
        status_code: int | None = None,
        task_id: str | None = None,
    ) -> None:
        super().__init__(message, reason_code)
        self.status_code = status_code
        self.task_id = task_id


class GatewayUnavailable(GatewayError):
    reason_code = "gateway_unreachable"


class GatewayDuplicate(GatewayError):
    """409: the task id exists, or the admission fence refused the task."""

    reason_code = "gateway_duplicate_task"


class GatewayValidation(GatewayError):
    """400: the server (or our own copy of its contract) refused the body."""

    reason_code = "gateway_validation_failed"


class GatewayNotReady(GatewayError):
    """503 at submit for longer than ``not_ready_budget_s``."""

    reason_code = "gateway_not_ready"


class ClientPollTimeout(GatewayError):
    """The client stopped waiting; the task is left running and reattachable."""

    reason_code = "client_poll_timeout_reattachable"

    def __init__(self, message: str, *, task_id: str, last: TaskResult | None) -> None:
        super().__init__(message, task_id=task_id)
        self.last = last


class ClientPollError(GatewayError):
    """Polls failed for longer than the error budget; the task stays reattachable."""

    reason_code = "client_poll_error_reattachable"

    def __init__(self, message: str, *, task_id: str, last: TaskResult | None) -> None:
        super().__init__(message, task_id=task_id)
        self.last = last
