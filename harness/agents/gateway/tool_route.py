"""A route for an agent server outside a task's internal network to that task's tool
endpoints (``--agent gateway``): a per-task HTTP proxy on the host's loopback, behind a
per-task token.

The task's endpoints (e.g. Cowork's MCP servers, served in the agent container) sit on an
internal Docker network that has no host address: nothing outside it can reach them. A
route is two pieces, both made for one task attempt and gone with it:

* a **relay container** on the task's network (the harness's base image; read-only, every
  capability dropped, ``no-new-privileges``, an unprivileged user, labelled with the run
  and instance, ended by its TTL if the harness dies) listening on a Unix socket in a
  private host directory (bind-mounted; the directory's parent is the harness user's and
  mode 0700, so no other host user reaches the socket) and forwarding each connection to
  one ``host:port`` on that network (the agent container's endpoint port);
* a **token proxy** in the harness process on ``127.0.0.1:<free port>``: a request reaches
  the socket only when it carries the route's token (as the URL's first path segment,
  ``http://127.0.0.1:<port>/<token>/<server>/mcp``, or ``Authorization: Bearer <token>``)
  and asks for one of the route's paths; anything else gets 401 (no or a wrong token) or
  404 (another path) and reaches nothing. The token is stripped before forwarding; each
  connection carries one request (``Connection: close``), so every request is checked.

Isolation: a route's relay sits on its own task's network and connects to one address
there, so no token reaches another task's endpoints, and another task's token is refused
here. The token is a capability of this attempt only: the route closes with it.
The relay's socket directory is a bind mount, so the engine must run on this host (as the
model gateway's relay needs).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from docker.errors import APIError, NotFound
from pydantic import BaseModel, ConfigDict, Field

from harness.core.errors import InfraError
from harness.sandbox import labels as L
from harness.sandbox.relay import UNIX_TO_TCP

if TYPE_CHECKING:
    from harness.sandbox.protocol import Sandbox

SOCKET = "route.sock"
MOUNT = "/route"
RELAY_USER = "65534:65534"  # nobody: the socket directory is writable by anyone mounting it
READY_TIMEOUT_S = 60.0
HEAD_LIMIT = 64 << 10  # bytes of a request's line and headers
HEAD_TIMEOUT_S = 30.0
ROLE_LABEL = "harness.route"
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # in a request head: only HTAB
HOP_HEADERS = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authorization",
                         "te", "upgrade"})  # fmt: skip


def fingerprint(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()[:16]


def _answer(status: int, reason: str, message: str) -> bytes:
    body = json.dumps({"error": message}).encode()
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


class Decision(BaseModel):
    """What the proxy does with one request head (:func:`decide`)."""

    model_config = ConfigDict(extra="forbid")

    status: int  # 200: forward ``head``; else answer with this status
    head: bytes = b""
    message: str = ""


def decide(head: bytes, token: str, paths: Collection[str]) -> Decision:
    """Check a request head (request line and headers, CRLF-terminated) against the route's
    token and paths; the head to forward (token removed, ``Connection: close``) or why not."""
    try:
        text = head.decode("latin-1")
        line, _, rest = text.partition("\r\n")
        method, target, version = line.split(" ")
    except ValueError:
        return Decision(status=400, message="malformed request line")
    if (not target.startswith("/") or not version.startswith("HTTP/1.")
            or _CONTROL.search(line)):  # fmt: skip
        return Decision(status=400, message="malformed request line")
    fields: list[tuple[str, str]] = []
    for raw in rest.split("\r\n"):
        if not raw:
            continue
        if _CONTROL.search(raw):  # a bare LF or CR would start a line the server reads
            return Decision(status=400, message="control character in a header")
        name, sep, value = raw.partition(":")
        if not sep or not name.strip() or name != name.strip():
            return Decision(status=400, message="malformed header")
        fields.append((name, value.strip()))
    path, qmark, query = target.partition("?")
    segments = path.split("/")
    authorized = False
    if len(segments) > 2 and hmac.compare_digest(segments[1].encode(), token.encode()):
        path, authorized = "/" + "/".join(segments[2:]), True
    kept: list[tuple[str, str]] = []
    for name, value in fields:
        low = name.lower()
        if low == "authorization":
            scheme, _, given = value.partition(" ")
            if scheme.lower() == "bearer" and hmac.compare_digest(
                given.strip().encode(), token.encode()
            ):
                authorized = True
                continue  # the route's own credential stays here
        if low in HOP_HEADERS:
            continue
        kept.append((name, value))
    if not authorized:
        return Decision(status=401, message="missing or wrong route token")
    if path.rstrip("/") not in paths:
        return Decision(status=404, message="no such endpoint on this route")
    out = f"{method} {path}{qmark}{query} {version}\r\n"
    out += "".join(f"{n}: {v}\r\n" for n, v in kept) + "Connection: close\r\n\r\n"
    return Decision(status=200, head=out.encode("latin-1"))


class TokenProxy:
    """The route's host half: loopback HTTP in a thread of its own, checked by
    :func:`decide`, forwarded to a Unix socket (``start()``, then ``port``; ``close()``)."""

    def __init__(
        self, socket_path: str, token: str, paths: Collection[str], host: str = "127.0.0.1"
    ) -> None:
        self.socket_path = socket_path
        self.token = token
        self.paths = frozenset(p.rstrip("/") for p in paths)
        self.host = host
        self.port = 0
        self.forwarded = 0
        self.refused = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="tool-route")  # fmt: skip
        self._server: asyncio.AbstractServer | None = None
        self._open: set[asyncio.StreamWriter] = set()  # connections of running handlers
        self._closing = False

    def start(self) -> TokenProxy:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        self.port = future.result(timeout=30)
        return self

    async def _listen(self) -> int:
        self._server = await asyncio.start_server(self._handle, self.host, 0, limit=HEAD_LIMIT)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_w: asyncio.StreamWriter | None = None
        self._open.add(writer)
        if self._closing:  # the route is closing: nothing more goes through
            writer.close()
            self._open.discard(writer)
            return
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
                self.refused += 1
                writer.write(_answer(400, "Bad Request", "incomplete request head"))
                await writer.drain()
                return
            decision = decide(head, self.token, self.paths)
            if decision.status != 200:
                self.refused += 1
                reasons = {400: "Bad Request", 401: "Unauthorized", 404: "Not Found"}
                writer.write(_answer(decision.status, reasons[decision.status],
                                     decision.message))  # fmt: skip
                await writer.drain()
                return
            try:
                up_r, up_w = await asyncio.open_unix_connection(self.socket_path, limit=HEAD_LIMIT)
            except OSError:
                writer.write(_answer(502, "Bad Gateway", "the task's endpoints are gone"))
                await writer.drain()
                return
            self._open.add(up_w)
            self.forwarded += 1
            up_w.write(decision.head)
            await asyncio.gather(_pipe(reader, up_w, half=True), _answer_back(up_r, writer))
        except (Exception, asyncio.CancelledError):  # a peer gone, or the route closing
            pass
        finally:  # no await here: a cancelled handler closes its sockets and ends
            for w in (up_w, writer):
                if w is not None:
                    w.close()
                    self._open.discard(w)

    def close(self) -> None:
        async def stop() -> None:
            """Every open connection closed under its handler, which then ends by itself
            (a handler cancelled before its first step would never close its socket); a
            connection that arrives meanwhile is closed at once. Then no more listening."""
            self._closing = True
            others: list[asyncio.Task[Any]] = []
            for _ in range(200):
                await asyncio.sleep(0.01)  # also: closed transports release their sockets
                others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                if not others and not self._open:
                    break
                for w in list(self._open):
                    w.close()
            else:  # a handler that will not end
                for task in others:
                    task.cancel()
                await asyncio.gather(*others, return_exceptions=True)
            if self._server is not None:
                self._server.close()
                await asyncio.sleep(0.01)

        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        if not self._loop.is_running():
            self._loop.close()


def closing_head(head: bytes) -> bytes:
    """A response head saying ``Connection: close`` (the connection ends with it)."""
    lines = head.decode("latin-1").split("\r\n")
    kept = [ln for ln in lines[1:] if ln and ln.split(":", 1)[0].strip().lower() not in
            ("connection", "keep-alive")]  # fmt: skip
    return "\r\n".join([lines[0], *kept, "Connection: close", "", ""]).encode("latin-1")


async def _answer_back(upstream: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The upstream's answer to the client, its head (and any 1xx before it) marked
    ``Connection: close`` so the client does not send another request on it."""
    try:
        while True:
            head = await upstream.readuntil(b"\r\n\r\n")
            writer.write(closing_head(head) if not head.startswith(b"HTTP/1.1 1") else head)
            if not head.startswith(b"HTTP/1.1 1"):
                break
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        with contextlib.suppress(Exception):
            writer.close()
        return
    await _pipe(upstream, writer, half=False)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, half: bool) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except Exception:
        pass
    with contextlib.suppress(Exception):
        if half and writer.can_write_eof():
            writer.write_eof()
        else:
            writer.close()


class RouteRecord(BaseModel):
    """What a route was (never its token: its fingerprint)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: str = Field(default="harness.tool_route.v1", alias="schema")
    kind: str = "loopback_token_proxy"
    base_url: str
    token_sha256: str
    target: str
    paths: list[str]
    relay: str
    opened_at: float
    closed_at: float | None = None
    forwarded: int = 0
    refused: int = 0


@dataclass
class ToolRoute:
    """One task attempt's route (see the module docstring): :meth:`open`, :meth:`url`,
    :meth:`close` (idempotent)."""

    client: Any
    folder: Path  # the private directory holding the relay's socket
    proxy: TokenProxy
    relay_id: str
    record: RouteRecord

    @property
    def base_url(self) -> str:
        return self.record.base_url

    def url(self, path: str) -> str:
        """The URL of ``path`` with the token in it (what an outside agent is given)."""
        return f"{self.base_url}/{self.proxy.token}/{path.lstrip('/')}"

    @classmethod
    def open(
        cls,
        client: Any,
        *,
        network: str,
        target_host: str,
        target_port: int,
        paths: Collection[str],
        labels: dict[str, str],
        ttl_s: int,
        image: str | None = None,
        name_parts: tuple[str, str] = ("run", "task"),
    ) -> ToolRoute:
        """Start the relay on ``network`` (forwarding to ``target_host:target_port``) and the
        token proxy; ``InfraError`` ``tool_route_failed`` when Docker cannot."""
        api = client.api
        folder = Path(tempfile.mkdtemp(prefix="hx-route-"))
        os.chmod(folder, 0o700)
        sock_dir = folder / "s"
        sock_dir.mkdir()
        os.chmod(sock_dir, 0o777)  # the relay's user makes the socket; the parent guards it
        relay_id = ""
        name = L.resource_name("harness-route", *name_parts)
        try:
            if image is None:
                from harness.model_proxy.network import relay_image

                image = relay_image(client)
            host_config = api.create_host_config(
                network_mode=network, auto_remove=True, read_only=True, cap_drop=["ALL"],
                security_opt=["no-new-privileges"], pids_limit=64, mem_limit="128m", init=True,
                binds={str(sock_dir): {"bind": MOUNT, "mode": "rw"}})  # fmt: skip
            created = api.create_container(
                image, ["python3", "-c", UNIX_TO_TCP, f"{MOUNT}/{SOCKET}", target_host,
                        str(target_port), str(ttl_s)],
                name=name,
                labels={**labels, L.TTL: str(ttl_s), ROLE_LABEL: "relay"},
                host_config=host_config, user=RELAY_USER)  # fmt: skip
            relay_id = created["Id"]
            api.start(relay_id)
            _wait_ready(api, relay_id)
            token = secrets.token_hex(24)
            proxy = TokenProxy(str(sock_dir / SOCKET), token, paths).start()
        except BaseException as exc:
            _remove(api, relay_id)
            shutil.rmtree(folder, ignore_errors=True)
            if isinstance(exc, InfraError | KeyboardInterrupt | SystemExit):
                raise
            if isinstance(exc, APIError | NotFound | OSError | TimeoutError):
                raise InfraError(f"tool route setup failed: {exc}", "tool_route_failed") from exc
            raise
        record = RouteRecord(base_url=f"http://127.0.0.1:{proxy.port}",
                             token_sha256=fingerprint(token),
                             target=f"{target_host}:{target_port}", paths=sorted(proxy.paths),
                             relay=name, opened_at=time.time())  # fmt: skip
        return cls(client, folder, proxy, relay_id, record)

    def close(self) -> RouteRecord:
        if self.record.closed_at is None:
            self.proxy.close()
            _remove(self.client.api, self.relay_id)
            shutil.rmtree(self.folder, ignore_errors=True)
            self.record = self.record.model_copy(update={
                "closed_at": time.time(), "forwarded": self.proxy.forwarded,
                "refused": self.proxy.refused})  # fmt: skip
        return self.record

    def __enter__(self) -> ToolRoute:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _remove(api: Any, container_id: str) -> None:
    if container_id:
        with contextlib.suppress(APIError, NotFound):
            api.remove_container(container_id, force=True)


def _wait_ready(api: Any, container_id: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        logs = api.logs(container_id, stdout=True, stderr=True)
        if b"route relay ready" in logs:
            return
        if not api.inspect_container(container_id)["State"].get("Running"):
            raise InfraError(f"tool route relay exited: {logs[-300:]!r}", "tool_route_failed")
        time.sleep(0.1)
    raise InfraError("tool route relay did not start", "tool_route_failed")


class RouteRequest(BaseModel):
    """What an adapter asks routed for its task (``AgentRequest.extra["tool_route"]``): the
    endpoints (name -> path) on ``port`` of the task's sandbox, and the task body's metadata
    key that gets ``name=url,...`` of the route's URLs."""

    model_config = ConfigDict(extra="forbid")

    port: int = Field(gt=0, lt=65536)
    endpoints: dict[str, str] = Field(min_length=1)
    metadata_key: str = "tool_urls"


def open_for(sandbox: Sandbox, req: RouteRequest) -> ToolRoute:
    """The route to ``req``'s endpoints of ``sandbox`` (its container on its task network),
    labelled as the sandbox's run and instance; ``InfraError`` when it has no network."""
    spec = sandbox.spec
    if not spec.network or spec.network == "none":
        raise InfraError("a tool route needs a sandbox on a task network", "tool_route_failed")
    labels = L.run_labels(spec.run_id, spec.instance_id, spec.worker, spec.run_root)
    return ToolRoute.open(sandbox.client, network=spec.network, target_host=sandbox.name,
                          target_port=req.port, paths=list(req.endpoints.values()),
                          labels=labels, ttl_s=int(spec.ttl_s or 0) or 7 * 3600,
                          name_parts=(spec.run_id, spec.instance_id))  # fmt: skip


def route_urls(route: ToolRoute, req: RouteRequest) -> str:
    """``name=url,...`` of ``req``'s endpoints through ``route`` (upstream's MCP_HTTP_URLS
    form)."""
    return ",".join(f"{name}={route.url(path)}" for name, path in req.endpoints.items())
