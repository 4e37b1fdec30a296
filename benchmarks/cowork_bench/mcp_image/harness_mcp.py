"""The harness's MCP supervisor and bridge; runs INSIDE the Cowork runtime image.

Installed at ``/opt/harness_mcp/harness_mcp.py`` and run by ``/opt/venv/bin/python3`` (the
``mcp`` SDK from PyPI lives in that venv). It imports nothing from the harness.

``serve SPEC``  the supervisor: starts every server of the spec (a JSON file: name, command,
               args, env, cwd, timeout) as a stdio child, keeps one MCP session to each for
               the whole attempt, and exposes each at ``http://<host>:<port>/<name>/mcp``
               (streamable HTTP). A server's stderr goes to ``<log_dir>/<name>.stderr.log``,
               at most ``stderr_limit`` bytes. ``GET /status`` answers the servers' states.
``bridge URL``  stdio <-> streamable HTTP: what the generated client config runs, so an
               in-container agent's stdio client talks to the persistent session.

The probe (waits for the supervisor to settle, lists each ready server's tools) is
``harness_mcp_probe.py``, standard library only: it starts without this SDK's import cost.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import threading
import time
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import timedelta
from typing import Any

import anyio
import uvicorn
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route
from starlette.types import Receive, Scope, Send


def proxy_server(name: str, get_session: Any) -> Server:
    """An MCP server whose tools are those of an upstream session (``await get_session()``)."""
    server: Server = Server(name)

    @server.list_tools()
    async def _list_tools() -> list[types.Tool]:
        session = await get_session()
        return (await session.list_tools()).tools

    @server.call_tool(validate_input=False)
    async def _call_tool(tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
        session = await get_session()
        return await session.call_tool(tool, arguments)

    return server


class BoundedLog:
    """A pipe whose reader thread copies at most ``limit`` bytes into ``path``."""

    def __init__(self, path: str, limit: int) -> None:
        rfd, wfd = os.pipe()
        self.path = path
        self.writer = os.fdopen(wfd, "w")
        self._thread = threading.Thread(target=self._pump, args=(rfd, path, limit), daemon=True)
        self._thread.start()

    @staticmethod
    def _pump(rfd: int, path: str, limit: int) -> None:
        kept = 0
        with open(path, "wb") as out, os.fdopen(rfd, "rb", buffering=0) as src:
            while chunk := src.read(65536):
                if kept < limit:
                    part = chunk[: limit - kept]
                    out.write(part)
                    out.flush()
                    kept += len(part)
                    if kept >= limit:
                        out.write(b"\n[harness: stderr truncated]\n")
                        out.flush()


class Upstream:
    """One supervised server: its stdio session and its state."""

    def __init__(self, spec: dict[str, Any], log_dir: str, stderr_limit: int) -> None:
        self.spec = spec
        self.name: str = spec["name"]
        self.timeout = float(spec.get("timeout_s") or 60)
        self.state = "starting"
        self.error: str | None = None
        self.tools: int | None = None
        self.session: ClientSession | None = None
        self.ready = anyio.Event()
        self.log = BoundedLog(os.path.join(log_dir, f"{self.name}.stderr.log"), stderr_limit)

    def stderr_tail(self, size: int = 300) -> str:
        """The server's own words: its first line naming an error, else its last bytes."""
        time.sleep(0.2)  # let the pump copy what the dead server wrote last
        try:
            with open(self.log.path, "rb") as fh:
                text = fh.read(65536).decode("utf-8", "replace")
        except OSError:
            return ""
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        named = [ln for ln in lines if re.search(r"\berror\b\s*[:\[]", ln, re.IGNORECASE)]
        said = named[0] if named else " ".join(" ".join(lines).split())[-size:]
        return f" | stderr: {said[:size]}" if said else ""

    async def get_session(self) -> ClientSession:
        await self.ready.wait()
        if self.session is None:
            raise RuntimeError(f"MCP server {self.name} is unavailable: {self.error}")
        return self.session

    async def run(self) -> None:
        params = StdioServerParameters(
            command=self.spec["command"],
            args=list(self.spec.get("args") or []),
            env={**(self.spec.get("env") or {}), **os.environ},  # upstream: process env wins
            cwd=self.spec.get("cwd") or None,
        )
        try:
            async with AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(
                    stdio_client(params, errlog=self.log.writer)
                )
                session = await stack.enter_async_context(
                    ClientSession(read, write, read_timeout_seconds=timedelta(seconds=self.timeout))
                )
                with anyio.fail_after(self.timeout):
                    await session.initialize()
                    listed = await session.list_tools()
                self.session, self.tools, self.state = session, len(listed.tools), "ready"
                self.ready.set()
                await anyio.sleep_forever()
        except BaseException as exc:  # reported in /status, never raised
            if isinstance(exc, anyio.get_cancelled_exc_class()) and self.state == "ready":
                raise
            self.state = "failed"
            self.error = _describe(exc, self.timeout) + self.stderr_tail()
            self.session = None
            self.ready.set()


def _describe(exc: BaseException, timeout: float) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e, timeout) for e in exc.exceptions)[:500]
    if isinstance(exc, TimeoutError):
        return f"no MCP handshake within client_session_timeout_seconds={timeout:g}"
    return f"{type(exc).__name__}: {exc}"[:500]


def serve(spec_path: str) -> None:
    with open(spec_path, encoding="utf-8") as fh:
        spec = json.load(fh)
    os.makedirs(spec["log_dir"], exist_ok=True)
    ups = [Upstream(s, spec["log_dir"], int(spec["stderr_limit"])) for s in spec["servers"]]
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    managers = {
        u.name: StreamableHTTPSessionManager(
            app=proxy_server(u.name, u.get_session), security_settings=security
        )
        for u in ups
    }

    def endpoint(manager: StreamableHTTPSessionManager) -> Any:
        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            await manager.handle_request(scope, receive, send)

        return app

    async def status(_request: Request) -> JSONResponse:
        return JSONResponse({u.name: {"state": u.state, "error": u.error, "tools": u.tools}
                             for u in ups})  # fmt: skip

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> Any:
        async with AsyncExitStack() as stack:
            for manager in managers.values():
                await stack.enter_async_context(manager.run())
            async with anyio.create_task_group() as tg:
                for u in ups:
                    tg.start_soon(u.run)
                yield
                tg.cancel_scope.cancel()

    routes: list[Any] = [Route("/status", status)]
    routes += [Mount(f"/{name}/mcp", app=endpoint(mgr)) for name, mgr in managers.items()]
    app = Starlette(routes=routes, lifespan=lifespan)
    uvicorn.run(app, host=spec.get("host", "0.0.0.0"), port=int(spec["port"]),
                log_level="warning", lifespan="on")  # fmt: skip


async def _bridge(url: str) -> None:
    async with AsyncExitStack() as stack:
        read, write, _ = await stack.enter_async_context(streamable_http_client(url))
        session = await stack.enter_async_context(ClientSession(read, write))
        await session.initialize()

        async def get_session() -> ClientSession:
            return session

        server = proxy_server(url, get_session)
        async with stdio_server() as (sread, swrite):
            await server.run(sread, swrite, server.create_initialization_options())


def main() -> None:
    parser = argparse.ArgumentParser(prog="harness_mcp")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("serve").add_argument("spec")
    sub.add_parser("bridge").add_argument("url")
    args = parser.parse_args()
    if args.cmd == "serve":
        serve(args.spec)
    else:
        anyio.run(_bridge, args.url)


if __name__ == "__main__":
    main()
