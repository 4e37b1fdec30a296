"""Helpers of the agent tests: the reference agent server as a real subprocess on
127.0.0.1, a fast poll policy, task bodies."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from harness.agents.gateway.client import PollPolicy
from tests.support.forkrun import ForkedProcess
from tests.support.suite import FORK_SERVER

HERE = Path(__file__).parent
REPO = HERE.parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RefServer:
    url: str
    proc: ForkedProcess
    log_path: Path
    config_path: Path

    def state(self) -> dict[str, Any]:
        return httpx.get(f"{self.url}/api/state", timeout=5, trust_env=False).json()

    def task(self, task_id: str) -> dict[str, Any]:
        return httpx.get(f"{self.url}/api/tasks/{task_id}", timeout=5, trust_env=False).json()

    def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 10.0
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            state = self.state()
            if predicate(state):
                return state
            if time.monotonic() > deadline:
                raise AssertionError(f"server state never matched: {state}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start_server(
    tmp: Path, config: dict[str, Any] | None = None, env: dict[str, str] | None = None
) -> RefServer:
    tmp.mkdir(parents=True, exist_ok=True)
    name = uuid.uuid4().hex[:8]
    config_path = tmp / f"server-{name}.json"
    config_path.write_text(json.dumps(config or {}), encoding="utf-8")
    log_path = tmp / f"server-{name}.log"
    port = free_port()
    # A fork of the warm server (tests.support.forkrun): a process of its own, as
    # ``python -m harness.agents.reference_server.server`` would be, without the start-up imports.
    proc = FORK_SERVER.spawn(
        "harness.agents.reference_server.server",
        ["--port", str(port), "--config", str(config_path)],
        REPO,
        {**os.environ, **(env or {})},
        log_path,
    )
    server = RefServer(f"http://127.0.0.1:{port}", proc, log_path, config_path)
    deadline = time.monotonic() + 15
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"reference server exited: {log_path.read_text()}")
        try:
            if httpx.get(f"{server.url}/api/health", timeout=1, trust_env=False).status_code:
                return server
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise AssertionError("reference server did not answer /api/health")
        time.sleep(0.05)


FAST = PollPolicy(
    interval_s=0.02,
    max_interval_s=0.05,
    backoff=1.5,
    jitter=0.2,
    request_timeout_s=2.0,
    error_budget_s=3.0,
    not_ready_budget_s=3.0,
    client_grace_s=2.0,
    cancel_settle_s=3.0,
)


def task_body(workspace: Path, plan: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    """A local-executor task body whose plan the reference server runs in ``workspace``."""
    workspace.mkdir(parents=True, exist_ok=True)
    body: dict[str, Any] = {
        "description": "Reverse-engineer the reference executable.",
        "workspace_root": str(workspace),
        "memory_mode": "empty",
        "executor_ref": {
            "type": "local",
            "id": "local-test",
            "network": "host",
            "workspace_host_path": str(workspace),
        },
        "metadata": {"reference_plan": plan or {"steps": []}},
    }
    body.update(fields)
    return body
