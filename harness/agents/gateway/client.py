"""HTTP client of the agent server's task API: submit, wait, reattach, cancel.

Terminal detection compares only the explicit ``status`` with the settled set (never error
text; ``cancel_requested`` is not terminal). Connection errors, timeouts and 5xx answers are
retried with back-off and jitter within a budget; a 503 at submit ("still starting") is
retried until its own bound. Every poll writes ``task_checkpoint.json`` atomically, so a
killed run reattaches to its task instead of submitting it again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from harness.agents.gateway.body import validate_task_body
from harness.agents.gateway.checkpoint import write_checkpoint
from harness.agents.gateway.errors import (
    ClientPollError,
    ClientPollTimeout,
    GatewayDuplicate,
    GatewayError,
    GatewayNotReady,
    GatewayUnavailable,
    GatewayValidation,
)
from harness.agents.gateway.http import (
    GatewayHTTP,
    PollPolicy,
    RetryableError,
    describe_exc,
    error_text,
)
from harness.agents.gateway.models import (
    SETTLED_STATUSES,
    SubmitResponse,
    TaskCreateRequest,
    TaskResult,
)

if TYPE_CHECKING:
    from harness.agents.gateway.events import EventLog

log = logging.getLogger("harness.agents.gateway.client")

__all__ = [
    "ClientPollError",
    "ClientPollTimeout",
    "GatewayClient",
    "GatewayDuplicate",
    "GatewayError",
    "GatewayNotReady",
    "GatewayUnavailable",
    "GatewayValidation",
    "PollPolicy",
]


class GatewayClient(GatewayHTTP):
    """A synchronous client of one agent server's task API.

    ``GatewayClient(url, policy=PollPolicy(...))``; use as a context manager or ``close()``.
    """

    # -- submit --------------------------------------------------------------------------

    def submit(self, body: TaskCreateRequest | Mapping[str, Any]) -> SubmitResponse:
        """``POST /api/tasks``. 409, 400 and a lasting 503 raise distinct errors."""
        request = validate_task_body(body)
        payload = request.body()
        task_id = request.task_id
        started = time.monotonic()
        attempt = 0
        ambiguous = False
        while True:
            elapsed = time.monotonic() - started
            try:
                response = self._http.post("/api/tasks", json=payload)
            except httpx.ConnectError as exc:  # never reached the server: safe to retry
                self._retry_or_raise(exc, elapsed, attempt)
                attempt += 1
                continue
            except httpx.TransportError as exc:
                # The server may have created the task. With our own id, ask it.
                if task_id is None:
                    raise GatewayError(
                        f"submit failed after the request was sent ({describe_exc(exc)}); "
                        "the task may exist on the server: give the body a task_id to make "
                        "submission idempotent",
                        "gateway_submit_ambiguous",
                    ) from exc
                ambiguous = True
                found = self.find_task(task_id)
                if found is not None:
                    return SubmitResponse(task_id=task_id, status=found.status or "scheduled")
                self._retry_or_raise(exc, elapsed, attempt)
                attempt += 1
                continue
            status = response.status_code
            if status < 300 or status in (400, 409, 422):
                return self._submit_answer(response, task_id, ambiguous)
            if status == 503:
                if elapsed >= self.policy.not_ready_budget_s:
                    raise GatewayNotReady(
                        f"agent server not ready after {elapsed:.0f}s (503: "
                        f"{error_text(response)})",
                        status_code=503,
                        task_id=task_id,
                    )
                log.info("agent server not ready (503), retrying submit")
                self._pause(attempt, self.policy.not_ready_budget_s - elapsed)
                attempt += 1
                continue
            if status >= 500:
                ambiguous = True
                if task_id and self.find_task(task_id) is not None:
                    return SubmitResponse(task_id=task_id, status="scheduled")
                self._retry_or_raise(RuntimeError(f"HTTP {status}"), elapsed, attempt)
                attempt += 1
                continue
            raise GatewayError(
                f"submit: HTTP {status}: {error_text(response)}",
                "gateway_http_error",
                status_code=status,
                task_id=task_id,
            )

    def _submit_answer(self, response: httpx.Response, task_id: str | None,
                       ambiguous: bool) -> SubmitResponse:
        """A submit's final answer (2xx, 409, 400 or 422): the task, or the refusal raised.
        ``ambiguous``: an earlier try may have created the task (a 409 is then ours)."""
        status = response.status_code
        if status < 300:
            data = response.json()
            if not isinstance(data, dict) or not data.get("task_id"):
                raise GatewayError(
                    f"submit answered {status} without a task_id",
                    "gateway_protocol_error",
                    status_code=status,
                )
            return SubmitResponse.model_validate(data)
        if status == 409:
            if ambiguous and task_id and self.find_task(task_id) is not None:
                return SubmitResponse(task_id=task_id, status="scheduled")  # our own retry
            raise GatewayDuplicate(
                f"agent server refused task {task_id or '(no id)'}: 409 "
                f"{_admission_reason(response)}",
                status_code=409,
                task_id=task_id,
            )
        raise GatewayValidation(
            f"agent server refused the task body: HTTP {status}: {error_text(response)}",
            status_code=status,
            task_id=task_id,
        )

    def _retry_or_raise(self, exc: BaseException, elapsed: float, attempt: int) -> None:
        if elapsed >= self.policy.error_budget_s:
            raise GatewayUnavailable(
                f"agent server {self.base_url} unreachable at submit: {describe_exc(exc)}"
            ) from exc
        self._pause(attempt, self.policy.error_budget_s - elapsed)

    # -- cancel --------------------------------------------------------------------------

    def cancel(self, task_id: str, *, cascade: bool = False, attempts: int = 3) -> bool:
        """Best effort ``POST /api/tasks/{id}/cancel``; logs and returns False on failure."""
        body: dict[str, Any] = {"cascade": True} if cascade else {}
        for attempt in range(attempts):
            try:
                response = self._send(
                    "POST",
                    f"/api/tasks/{task_id}/cancel",
                    body,
                    timeout=min(10.0, self.policy.request_timeout_s),
                )
            except RetryableError as exc:
                log.warning("cancel of task %s failed (%s)", task_id, exc)
                if attempt + 1 < attempts:
                    self._sleep(min(self._jitter(self.policy.interval_s * (attempt + 1)), 2.0))
                continue
            if response.status_code < 300:
                log.warning("cancelled agent task %s", task_id)
                return True
            log.warning(
                "cancel of task %s: HTTP %s %s",
                task_id,
                response.status_code,
                "(not active)" if response.status_code == 404 else error_text(response),
            )
            return False
        return False

    # -- wait ----------------------------------------------------------------------------

    def wait(
        self,
        task_id: str,
        *,
        timeout_s: float,
        checkpoint_path: Path | None = None,
        on_poll: Callable[[TaskResult], None] | None = None,
        events: EventLog | None = None,
    ) -> TaskResult:
        """Poll until the task's status is settled; raise when the client gives up.

        ``events``: copied before every status request, so an abort keeps the evidence
        (:mod:`harness.agents.gateway.events`); its state goes into the checkpoint."""
        deadline = time.monotonic() + timeout_s
        interval = self.policy.interval_s
        failing_since: float | None = None
        failures = 0
        last: TaskResult | None = None
        polls = 0
        while True:
            problem: str | None = None
            if events is not None:
                events.copy()
            try:
                result = self.get_task(task_id)
                if result is None:
                    problem = "the server does not know the task (404)"
            except RetryableError as exc:
                problem = str(exc)
            now = time.monotonic()
            if problem is not None:
                failing_since = failing_since or now
                if now - failing_since >= self.policy.error_budget_s:
                    raise ClientPollError(
                        f"polling task {task_id} failed for {now - failing_since:.0f}s: {problem}",
                        task_id=task_id,
                        last=last,
                    )
                if now >= deadline:
                    raise ClientPollTimeout(
                        f"gave up waiting for task {task_id} after {timeout_s:.0f}s "
                        f"(last poll failed: {problem})",
                        task_id=task_id,
                        last=last,
                    )
                log.info("poll of task %s failed: %s", task_id, problem)
                self._pause(failures, deadline - now)
                failures += 1
                continue
            assert result is not None
            failing_since, failures = None, 0
            polls += 1
            if last is None or result.status != last.status:
                interval = self.policy.interval_s
            else:
                interval = min(interval * self.policy.backoff, self.policy.max_interval_s)
            last = result
            if checkpoint_path is not None:
                write_checkpoint(
                    checkpoint_path,
                    task_id,
                    result.status or "unknown",
                    result,
                    self.base_url,
                    polls,
                    events.status.model_dump(mode="json") if events is not None else None,
                )
            if on_poll is not None:
                on_poll(result)
            if result.status in SETTLED_STATUSES:
                return result
            if now >= deadline:
                raise ClientPollTimeout(
                    f"gave up waiting for task {task_id} after {timeout_s:.0f}s "
                    f"(status {result.status}); it is left running and reattachable",
                    task_id=task_id,
                    last=result,
                )
            self._sleep(min(self._jitter(interval), max(deadline - now, 0.0)))


def _admission_reason(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(data, dict):
        admission = data.get("admission")
        if isinstance(admission, dict) and admission.get("reason_code"):
            return str(admission["reason_code"])
        return str(data.get("reason_code") or data.get("error") or data)[:200]
    return str(data)[:200]
