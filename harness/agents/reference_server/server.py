"""The reference agent server: the reference implementation and self-test of the agent
server's task API (what ``--agent gateway`` talks to), running scripted plans instead of a
model. It is a user-facing tool, not only a test double: check a gateway setup end to end
(health, settings, task lifecycle, ``docker_exec`` in the sandbox, cancel) before paying
for a model, or compare a real server's behaviour with it.

    harness agent-server --port 8770 --config server.json
    python -m harness.agents.reference_server.server --port 8770 --config server.json

It answers ``/api/health``, ``/api/settings``, ``/api/state``, ``POST /api/tasks``,
``GET /api/tasks[/{id}]``, ``GET /api/tasks/{id}/events?cursor=N`` (its own event format:
``{task_id, events: [{seq, ts, type: status|llm_usage|step, ...}], cursor}``) and
``POST /api/tasks/{id}/cancel`` like the real server, runs a
task's plan (``metadata.reference_plan``, else the config's ``default_plan``) locally or
in the container named by ``executor_ref`` (``docker_exec``), makes the plan's MCP tool
calls itself (``mcp`` steps, to the servers the body names in ``metadata.mcp_http_urls``,
e.g. a Cowork task's tool route: :mod:`.mcp_client`), and injects the faults its
config asks for. It logs one line per request (method, path, status) and never a body,
a setting value or an environment value. ``/api/state`` also reports counters (submissions,
cancels) that tests read. Its parts: :mod:`.reference_config` (the config, plans and
faults), :mod:`.reference_tasks` (admission, runs, results), :mod:`.reference_exec`
(where a step runs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import ValidationError

from harness.agents.gateway.models import TaskCreateRequest, describe_validation_error
from harness.agents.reference_server.config import FaultInjector, ReferenceServerConfig
from harness.agents.reference_server.tasks import Admission, TaskStore

log = logging.getLogger("harness.agents.reference_server.server")

MAX_BODY = 8 * 1024 * 1024


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body leave in two writes: with Nagle's algorithm on, the body waited for the
    # client's delayed ACK of the headers, about 40 ms a response on a kept-alive connection.
    disable_nagle_algorithm = True
    server: ReferenceHTTPServer
    timeout = 60

    # -- plumbing ------------------------------------------------------------------------

    def log_message(self, format: str, *args: Any) -> None:
        pass  # replaced by one line per request in _finish

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        log.info("%s %s %d", self.command, self._path(), status)

    def _path(self) -> str:
        return unquote(urlsplit(self.path).path)

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise ValueError("body too large")
        return self.rfile.read(length) if length else b""

    def _drop(self) -> None:
        log.info("%s %s dropped (fault)", self.command, self._path())
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _faults(self) -> bool:
        """Apply injected faults; True when the request has been answered (or dropped)."""
        for rule in self.server.faults.faults_for(self.command, self._path()):
            if rule.kind == "delay":
                time.sleep(rule.delay_s)
            elif rule.kind == "error":
                self._send(rule.status, {"ok": False, "error": f"injected HTTP {rule.status}"})
                return True
            else:
                self._drop()
                return True
        return False

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        try:
            body = self._read_body() if method == "POST" else b""
        except (ValueError, OSError):
            self._send(400, {"ok": False, "error": "unreadable body"})
            return
        if self._faults():
            return
        parts = [p for p in self._path().split("/") if p]
        try:
            self._route(method, parts, body)
        except BrokenPipeError:
            pass
        except Exception as exc:
            log.exception("handler error")
            self._send(500, {"ok": False, "error": type(exc).__name__})

    # -- routes --------------------------------------------------------------------------

    def _route(self, method: str, parts: list[str], body: bytes) -> None:
        srv = self.server
        store = srv.store
        if method == "GET" and parts == ["api", "health"]:
            health: dict[str, Any] = {
                "status": "ok",
                "version": srv.config.app_version,
                "app_version": srv.config.app_version,
            }
            if srv.config.runtime_version:
                health["runtime_version"] = srv.config.runtime_version
            return self._send(200, health)
        if method == "GET" and parts == ["api", "settings"]:
            store.count("settings_reads")
            return self._send(200, srv.config.public_settings())
        if method == "GET" and parts == ["api", "state"]:
            return self._send(200, {**store.state(), "faults": srv.faults.counts()})
        if parts[:2] == ["api", "tasks"]:
            if method == "POST" and len(parts) == 2:
                return self._submit(body)
            if method == "GET" and len(parts) == 2:
                return self._send(
                    200,
                    {
                        "tasks": [
                            {"task_id": t, "status": s} for t, s in store.state()["tasks"].items()
                        ]
                    },
                )
            if method == "GET" and len(parts) == 3:
                envelope = store.envelope(parts[2])
                if envelope is None:
                    return self._send(404, {"ok": False, "error": "unknown task"})
                return self._send(200, envelope)
            if method == "POST" and len(parts) == 4 and parts[3] == "cancel":
                return self._cancel(parts[2], body)
            if method == "GET" and len(parts) == 4 and parts[3] == "events":
                return self._events(parts[2])
        return self._send(404, {"ok": False, "error": "no such route"})

    def _submit(self, body: bytes) -> None:
        try:
            data = json.loads(body or b"{}")
            if not isinstance(data, dict):
                raise ValueError("the body must be a JSON object")
        except ValueError:
            return self._send(400, {"ok": False, "error": "the body is not a JSON object"})
        if isinstance(data.get("metadata"), dict) and "executor_ref" in data["metadata"]:
            return self._send(
                400, {"ok": False, "error": "executor_ref must be top-level, not in metadata"}
            )
        try:
            request = TaskCreateRequest.model_validate(data)
        except ValidationError as exc:
            return self._send(
                400, {"ok": False, "error": "validation failed: " + describe_validation_error(exc)}
            )
        try:
            task = self.server.store.submit(request)
        except Admission as exc:
            return self._send(exc.status, exc.body)
        return self._send(200, {"ok": True, "task_id": task.task_id, "status": "scheduled"})

    def _events(self, task_id: str) -> None:
        query = parse_qs(urlsplit(self.path).query)
        try:
            cursor = max(int((query.get("cursor") or ["0"])[0] or 0), 0)
        except ValueError:
            return self._send(400, {"ok": False, "error": "cursor must be an integer"})
        page = self.server.store.events(task_id, cursor, limit=500)
        if page is None:
            return self._send(404, {"ok": False, "error": "unknown task"})
        return self._send(200, page)

    def _cancel(self, task_id: str, body: bytes) -> None:
        try:
            cascade = bool(json.loads(body or b"{}").get("cascade"))
        except (ValueError, AttributeError):
            cascade = False
        if not self.server.store.cancel(task_id):
            return self._send(404, {"ok": False, "error": "task is not active"})
        answer: dict[str, Any] = {"ok": True, "task_id": task_id}
        if cascade:
            answer["cascade"] = True
        return self._send(200, answer)


class ReferenceHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], config: ReferenceServerConfig) -> None:
        super().__init__(address, _Handler)
        self.config = config
        self.store = TaskStore(config)
        self.faults = FaultInjector(config.faults)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def stop(self) -> None:
        self.shutdown()
        self.store.shutdown()
        self.server_close()


def start_in_thread(
    config: ReferenceServerConfig, host: str = "127.0.0.1", port: int = 0
) -> ReferenceHTTPServer:
    """An in-process server on a background thread (``.url``; stop with ``.stop()``)."""
    server = ReferenceHTTPServer((host, port), config)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True, name="reference-server").start()
    return server


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="harness agent-server", description="Run the reference agent server on loopback."
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8770, help="0 picks a free port")
    p.add_argument("--config", type=Path, default=None, help="JSON config file")
    p.add_argument(
        "--port-file", type=Path, default=None, help="write the bound port here once listening"
    )
    p.add_argument("--quiet", action="store_true", help="do not log requests")
    return p


def agent_server_command(argv: list[str] | None = None) -> int:
    """``harness agent-server ...``: serve until SIGINT/SIGTERM; 2 on a bad config."""
    args = _parser().parse_args(argv)
    try:
        config = ReferenceServerConfig.load(args.config)
    except (OSError, ValueError) as exc:
        detail = describe_validation_error(exc) if isinstance(exc, ValidationError) else exc
        print(f"harness agent-server: bad config {args.config}: {detail}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s reference-server %(message)s",
        stream=sys.stderr,
    )
    try:
        server = ReferenceHTTPServer((args.host, args.port), config)
    except OSError as exc:
        print(
            f"harness agent-server: cannot listen on {args.host}:{args.port}: {exc}",
            file=sys.stderr,
        )
        return 2

    def _stop(signum: int, _frame: Any) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    port = server.server_address[1]
    if args.port_file:
        args.port_file.write_text(f"{port}\n", encoding="utf-8")
    print(f"reference agent server listening on {server.url}", flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.store.shutdown()
        server.server_close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


if __name__ == "__main__":
    sys.exit(agent_server_command())
