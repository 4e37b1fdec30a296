"""One agent-server request at a time: JSON over httpx, retries with back-off and jitter.

:class:`GatewayHTTP` is the transport half of :class:`~harness.agents.gateway.client.GatewayClient`:
connection errors, timeouts, 5xx and 503 answers are retried within the policy's error
budget; anything else is answered or raised at once. Reads of the server's identity
(``/api/health``, ``/api/settings``, ``/api/state``) and of one task live here too.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from typing import Any, Self, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ConfigDict, Field

from harness.agents.gateway.errors import GatewayError, GatewayUnavailable
from harness.agents.gateway.models import HealthInfo, ServerSettings, ServerState, TaskResult

T = TypeVar("T")
# An answer (a task result with its output) is read at most this far: what reaches memory
# and the instance folder stays bounded whatever the agent made the server return.
MAX_RESPONSE_BYTES = 32 << 20


class PollPolicy(BaseModel):
    """Timing of every retry and poll loop of the client (short values suit tests)."""

    model_config = ConfigDict(extra="forbid")

    interval_s: float = Field(default=5.0, gt=0)
    max_interval_s: float = Field(default=30.0, gt=0)
    backoff: float = Field(default=1.5, ge=1.0)
    jitter: float = Field(default=0.2, ge=0.0, lt=1.0)
    request_timeout_s: float = Field(default=30.0, gt=0)
    # A run of failed requests (transport errors, 5xx, unknown task) longer than this
    # gives up; a successful request resets it.
    error_budget_s: float = Field(default=300.0, ge=0)
    # How long a 503 ("still starting") at submit is retried.
    not_ready_budget_s: float = Field(default=120.0, ge=0)
    # The client waits this much longer than the task's own timeout, so the server's
    # deadline settles the task before the client gives up on it.
    client_grace_s: float = Field(default=120.0, ge=0)
    # How long a reattach waits for a task in ``cancel_requested`` to settle.
    cancel_settle_s: float = Field(default=60.0, ge=0)


class RetryableError(Exception):
    """A failed request that a retry may fix (transport error, 5xx, bad JSON)."""


def describe_exc(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def error_text(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text[:300]
    if isinstance(data, dict):
        for key in ("error", "detail", "message"):
            if data.get(key):
                return str(data[key])[:300]
    return str(data)[:300]


class GatewayHTTP:
    """JSON requests to one agent server (``base_url`` such as http://127.0.0.1:8770)."""

    def __init__(
        self,
        base_url: str,
        *,
        policy: PollPolicy | None = None,
        trust_env: bool = False,
        rng: random.Random | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.policy = policy or PollPolicy()
        self._rng = rng or random.Random()
        self._sleep = sleep
        self._http = httpx.Client(
            base_url=self.base_url,
            timeout=httpx.Timeout(self.policy.request_timeout_s),
            trust_env=trust_env,
            headers={"Accept": "application/json"},
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one request ------------------------------------------------------------------

    def _send(
        self, method: str, path: str, body: Any = None, timeout: float | None = None
    ) -> httpx.Response:
        try:
            kwargs: dict[str, Any] = {}
            if body is not None:
                kwargs["json"] = body
            if timeout is not None:
                kwargs["timeout"] = timeout
            with self._http.stream(method, path, **kwargs) as streamed:
                content = bytearray()
                for chunk in streamed.iter_bytes():  # decoded: a compressed bomb stops too
                    content += chunk
                    if len(content) > MAX_RESPONSE_BYTES:
                        raise GatewayError(
                            f"{method} {path}: the agent server's answer exceeds "
                            f"{MAX_RESPONSE_BYTES >> 20} MiB; not read further",
                            "gateway_response_too_large",
                        )
            headers = [
                (k, v)
                for k, v in streamed.headers.multi_items()
                if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")
            ]
            response = httpx.Response(
                streamed.status_code,
                headers=headers,
                content=bytes(content),
                request=streamed.request,
            )
        except httpx.TransportError as exc:
            raise RetryableError(describe_exc(exc)) from exc
        if response.status_code >= 500 and response.status_code != 503:
            raise RetryableError(f"HTTP {response.status_code}: {error_text(response)}")
        return response

    def _pause(self, attempt: int, cap: float | None = None) -> None:
        delay = min(
            self.policy.interval_s * self.policy.backoff**attempt, self.policy.max_interval_s
        )
        if cap is not None:
            delay = min(delay, max(cap, 0.0))
        self._sleep(self._jitter(delay))

    def _jitter(self, delay: float) -> float:
        j = self.policy.jitter
        return max(0.0, delay * self._rng.uniform(1 - j, 1 + j))

    def _retrying(
        self,
        call: Callable[[], T],
        budget_s: float | None,
        make_error: Callable[[RetryableError], GatewayUnavailable],
    ) -> T:
        """``call()`` again (with back-off) while it raises :class:`RetryableError`, for at
        most ``budget_s`` (the policy's error budget when None); then ``make_error(exc)``
        is raised from the last error."""
        budget = self.policy.error_budget_s if budget_s is None else budget_s
        started = time.monotonic()
        attempt = 0
        while True:
            try:
                return call()
            except RetryableError as exc:
                if time.monotonic() - started >= budget:
                    raise make_error(exc) from exc
                self._pause(attempt, budget - (time.monotonic() - started))
                attempt += 1

    def _get_json_once(self, path: str) -> Any:
        response = self._send("GET", path)
        if response.status_code == 503:
            raise RetryableError(f"HTTP 503: {error_text(response)}")
        if response.status_code >= 400:
            raise GatewayError(
                f"GET {path}: HTTP {response.status_code}: {error_text(response)}",
                "gateway_http_error",
                status_code=response.status_code,
            )
        try:
            return response.json()
        except ValueError as exc:
            raise RetryableError(f"GET {path}: the answer is not JSON") from exc

    def _get_json(self, path: str, budget_s: float | None = None) -> Any:
        """GET with retries on transport errors, 5xx and 503 within the error budget."""
        return self._retrying(
            lambda: self._get_json_once(path),
            budget_s,
            lambda exc: GatewayUnavailable(
                f"agent server {self.base_url} unreachable: GET {path}: {exc}"
            ),
        )

    # -- read-only endpoints -------------------------------------------------------------

    def health(self, budget_s: float | None = None) -> HealthInfo:
        return HealthInfo.model_validate(self._get_json("/api/health", budget_s))

    def settings(self, budget_s: float | None = None) -> ServerSettings:
        data = self._get_json("/api/settings", budget_s)
        if isinstance(data, dict) and isinstance(data.get("settings"), dict):
            data = data["settings"]
        return ServerSettings.model_validate(data if isinstance(data, dict) else {})

    def state(self, budget_s: float | None = None) -> ServerState:
        return ServerState.model_validate(self._get_json("/api/state", budget_s))

    def get_task(self, task_id: str) -> TaskResult | None:
        """One read of a task: ``None`` when the server does not know it (404)."""
        response = self._send("GET", f"/api/tasks/{task_id}")
        if response.status_code == 404:
            return None
        if response.status_code == 503:
            raise RetryableError(f"HTTP 503: {error_text(response)}")
        if response.status_code >= 400:
            raise GatewayError(
                f"GET task {task_id}: HTTP {response.status_code}: {error_text(response)}",
                "gateway_http_error",
                status_code=response.status_code,
                task_id=task_id,
            )
        try:
            return TaskResult.parse_tolerant(response.json())
        except ValueError as exc:
            raise RetryableError(f"GET task {task_id}: the answer is not JSON") from exc

    def task_events(self, task_id: str, cursor: str | int | None) -> Any:
        """One page of a task's events past ``cursor`` (``GET /api/tasks/{id}/events``,
        never waiting): the decoded JSON (an NDJSON answer as a list), or None when the
        server has no such endpoint or task (404, 405, 501)."""
        path = f"/api/tasks/{task_id}/events"
        query = f"?cursor={quote(str(cursor), safe='')}&wait=0" if cursor is not None else "?wait=0"
        response = self._send("GET", path + query)
        if response.status_code in (404, 405, 501):
            return None
        if response.status_code == 503:
            raise RetryableError(f"HTTP 503: {error_text(response)}")
        if response.status_code >= 400:
            raise GatewayError(f"GET {path}: HTTP {response.status_code}: {error_text(response)}",
                               "gateway_http_error", status_code=response.status_code,
                               task_id=task_id)
        try:
            return response.json()
        except ValueError:
            pass
        try:  # newline-delimited JSON
            return [json.loads(line) for line in response.text.splitlines() if line.strip()]
        except ValueError as exc:
            raise RetryableError(f"GET {path}: the answer is not JSON") from exc

    def find_task(self, task_id: str, budget_s: float | None = None) -> TaskResult | None:
        """:meth:`get_task` with retries; ``GatewayUnavailable`` when the budget runs out."""
        return self._retrying(
            lambda: self.get_task(task_id),
            budget_s,
            lambda exc: GatewayUnavailable(
                f"agent server {self.base_url} unreachable asking for task {task_id}: {exc}",
                task_id=task_id,
            ),
        )
