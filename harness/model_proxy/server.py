"""The gateway's HTTP proxy: one per instance, on a Unix socket in a private directory
(only the instance's relay container mounts it; nothing listens on a TCP address).

``POST /v1/<path>`` for ``chat/completions``, ``completions``, ``responses``,
``embeddings`` and ``messages`` (Anthropic), and ``GET /v1/models``, are forwarded to
``<upstream>/<path>`` with the provider key (``Authorization: Bearer`` and ``x-api-key``);
whatever credentials the agent sent are dropped. Streams are relayed event by event as they
arrive. For an OpenAI streamed chat call the gateway asks for the usage chunk
(``stream_options.include_usage``) and, if the client had not asked, does not pass it on.
Each response's usage is metered (:class:`~harness.model_proxy.usage.InstanceMeter`);
past ``--per-task-limit-usd`` a call is refused with 402 and an error the SDKs show:
type ``per_task_limit_reached``.

With a pin (:class:`~harness.model_proxy.pinning.ModelPin`: ``--solve-model`` and
``--allow-model``) a call that names another model, or names its model ambiguously, is
refused with 403 and an error of code ``model_not_allowed`` naming the model asked and the
allowed ones, before the per-task limit is consulted; nothing reaches the upstream and the
meter counts the refusal under the model asked (``allowed: false``).

With a tape (:mod:`harness.model_proxy.tape`; by default the session of the instance whose
agent started the gateway, :func:`~harness.model_proxy.tape.current_tape`) every exchange is
recorded after the agent got its response (``--model-record``), or every call is served
from the records and no upstream is ever contacted (``--model-replay``: the key is not used,
no HTTP client exists; a call with no record gets 409 ``replay_miss``). The pin and the
per-task limit apply in replay as they did when recording.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import socketserver
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx

from harness.model_proxy.pacing import Pacer, PacingTimeout, current_pacer
from harness.model_proxy.pinning import REFUSAL_CODE, ModelPin, load_json_object
from harness.model_proxy.tape import (
    MISS_CODE,
    RECORD_BUDGET_CODE,
    Missed,
    TapeSession,
    current_tape,
)
from harness.model_proxy.upstream import CallTrouble, send_paced
from harness.model_proxy.usage import CallCost, InstanceMeter, SSEUsage, usage_from_json

ROUTES = ("chat/completions", "completions", "responses", "embeddings", "messages")
MAX_BODY = 32 << 20
HOP_HEADERS = {"authorization", "x-api-key", "host", "content-length", "connection",
               "transfer-encoding", "keep-alive", "proxy-authorization", "accept-encoding",
               "api-key", "x-goog-api-key", "cookie"}
SOCKET_NAME = "gateway.sock"
REFUSAL_TYPE = "per_task_limit_reached"
RATE_LIMITED_TYPE = "model_rate_limited"  # no slot or turn before the call's wait ceiling
AMBIENT = "ambient"  # GatewayServer(tape=...): the current instance's session, if any


def _error_body(path: str, status: int, kind: str, message: str,
                param: str | None = None) -> bytes:
    if path.endswith("messages"):
        return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()
    return json.dumps({"error": {"message": message, "type": kind, "code": kind,
                                 "param": param}}).encode()


class GatewayServer:
    """``start()``, then ``socket_dir`` / ``socket_path``; ``close()`` when done.

    ``token``: serve on a loopback TCP port instead (``base_url``), for an agent that runs
    on the host (``--agent host-command``): only requests bearing this per-instance token
    (as their API key) are served, so no other local process can spend through it.

    ``pin``: forward only the models it allows (None: every model, as named).

    ``tape``: record through, or replay from, this session (None: neither; the default is
    the session of the instance whose agent runs in this thread, if any).

    ``pacer``: the run's pacing (default: the one the run configured in this process,
    :func:`~harness.model_proxy.pacing.current_pacer`)."""

    def __init__(self, upstream: str, key: str, meter: InstanceMeter, *,
                 timeout_s: float = 600.0, token: str | None = None,
                 pin: ModelPin | None = None,
                 tape: TapeSession | str | None = AMBIENT,
                 pacer: Pacer | None = None) -> None:
        self.upstream = upstream.rstrip("/")
        self.meter = meter
        self.pin = pin
        self.pacer = pacer or current_pacer()
        self.tape: TapeSession | None = current_tape() if isinstance(tape, str) else tape
        self.replaying = self.tape is not None and self.tape.replaying
        self.recording = self.tape is not None and self.tape.recording
        if self.tape is not None and self.recording:
            self.tape.add_secret(key)
            self.tape.add_secret(token)
        self._key = "" if self.replaying else key  # a replay holds no key
        self._token = token
        self._client: httpx.Client | None = None if self.replaying else httpx.Client(
            timeout=httpx.Timeout(timeout_s, connect=30.0))
        self.socket_dir = Path(tempfile.mkdtemp(prefix="hx-gw-"))
        os.chmod(self.socket_dir, 0o700)
        self.socket_path = self.socket_dir / SOCKET_NAME
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def address_string(self) -> str:
                return "sandbox"

            def do_GET(self) -> None:
                gateway.handle(self, "GET")

            def do_POST(self) -> None:
                gateway.handle(self, "POST")

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        class LoopbackServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server: socketserver.BaseServer
        self.base_url: str | None = None
        if token is None:
            self._server = Server(str(self.socket_path), Handler)
            os.chmod(self.socket_path, 0o600)
        else:
            loopback = LoopbackServer(("127.0.0.1", 0), Handler)
            self._server = loopback
            self.base_url = f"http://127.0.0.1:{loopback.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05},
                                        name="model-gateway", daemon=True)

    def start(self) -> GatewayServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._client is not None:
            self._client.close()
        self.socket_path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.socket_dir.rmdir()

    # -- one request -----------------------------------------------------------------
    def _send(self, h: BaseHTTPRequestHandler, status: int, body: bytes,
              ctype: str = "application/json",
              headers: dict[str, str] | None = None) -> None:
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            h.send_header(name, value)
        if h.close_connection:  # said, so a client does not send its next request on it
            h.send_header("Connection", "close")
        h.end_headers()
        h.wfile.write(body)

    def _headers(self, h: BaseHTTPRequestHandler) -> dict[str, str]:
        out = {k: v for k, v in h.headers.items() if k.lower() not in HOP_HEADERS}
        out["Authorization"] = f"Bearer {self._key}"
        out["x-api-key"] = self._key
        return out

    def _token_ok(self, h: BaseHTTPRequestHandler) -> bool:
        if self._token is None:
            return True
        bearer = h.headers.get("Authorization", "")
        sent = bearer[7:] if bearer.lower().startswith("bearer ") else h.headers.get("x-api-key")
        # as bytes: compare_digest refuses a str with non-ASCII characters (a TypeError that
        # would drop the connection instead of answering 401)
        return sent is not None and hmac.compare_digest(
            sent.strip().encode("utf-8", "surrogateescape"), self._token.encode("utf-8"))

    def _over_record_budget(self, h: BaseHTTPRequestHandler, rel: str) -> bool:
        """Past the instance's recording budget, every call (GET models too) is refused
        before it is served: nothing is served that would not be recorded."""
        over = self.tape.budget_refusal() if self.tape is not None else None
        if over is None:
            return False
        h.close_connection = True  # its body is not read
        self._send(h, 402, _error_body(rel, 402, RECORD_BUDGET_CODE, over))
        return True

    def handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        path = h.path.split("?", 1)[0]
        rel = path[len("/v1/"):] if path.startswith("/v1/") else path.lstrip("/")
        if not self._token_ok(h):
            h.close_connection = True  # its body is not read
            self._send(h, 401, _error_body(rel, 401, "invalid_api_key",
                                           "this model gateway serves only its own agent"))
            return
        if self._over_record_budget(h, rel):
            return
        if method == "GET" and rel == "models":
            if self.replaying:
                self._replay(h, "GET", rel, None, None)
            else:
                self._forward_plain(h, "GET", rel, None, None)
            return
        if method != "POST" or rel not in ROUTES:
            h.close_connection = True  # a body it may carry is not read
            self._send(h, 404, _error_body(rel, 404, "not_found",
                                           f"the model gateway does not serve {method} {path}"))
            return
        if h.headers.get("Transfer-Encoding", "").lower() not in ("", "identity"):
            h.close_connection = True  # nor are these: the body is not read
            self._send(h, 411, _error_body(rel, 411, "length_required",
                                           "send the body with a Content-Length"))
            return
        try:
            length = int(h.headers.get("Content-Length") or 0)
        except ValueError:
            h.close_connection = True
            self._send(h, 400, _error_body(rel, 400, "invalid_request",
                                           "Content-Length is not a number"))
            return
        if length < 0 or length > MAX_BODY:
            h.close_connection = True
            self._send(h, 413, _error_body(rel, 413, "request_too_large", "request too large"))
            return
        raw = h.rfile.read(length)
        try:
            body, duplicated = load_json_object(raw)
        except ValueError:
            body, duplicated = None, []
        if not isinstance(body, dict):
            self._send(h, 400, _error_body(rel, 400, "invalid_request", "body is not JSON"))
            return
        if self.pin is not None:
            query = h.path.split("?", 1)[1] if "?" in h.path else ""
            body, refused = self.pin.check(body, duplicated, query, h.headers.items())
            if refused is not None:
                self.meter.refuse_model(refused.asked)
                self._send(h, 403, _error_body(rel, 403, REFUSAL_CODE, refused.message,
                                               param="model"))
                return
        with self.meter.call_slot():  # under a per-task limit: one call at a time
            refusal = self.meter.admit()
            if refusal is not None:
                self._send(h, 402, _error_body(rel, 402, REFUSAL_TYPE, refusal))
                return
            model = body.get("model") if isinstance(body.get("model"), str) else None
            if self.replaying:
                self._replay(h, "POST", rel, body, model)
                return
            self._paced(h, rel, body, model)

    def _paced(self, h: BaseHTTPRequestHandler, rel: str, body: dict[str, Any],
               model: str | None) -> None:
        """Forward under the run's pacing: a slot of its concurrency, then the call (its
        turns and retries: :func:`~harness.model_proxy.upstream.send_paced`)."""
        deadline = time.monotonic() + self.pacer.policy.wait_max_s
        try:
            with self.pacer.slot(deadline) as waited:
                self.meter.trouble(waited_s=waited)
                if body.get("stream") is True:
                    self._forward_stream(h, rel, body, model, deadline)
                else:
                    self._forward_plain(h, "POST", rel, body, model, deadline)
        except PacingTimeout as exc:
            self.meter.upstream_error()
            self._send(h, 429, _error_body(rel, 429, RATE_LIMITED_TYPE, f"{exc} "
                                           f"({self.pacer.policy.wait_max_s:g} s)"))

    def _forward_plain(self, h: BaseHTTPRequestHandler, method: str, rel: str,
                       body: dict[str, Any] | None, model: str | None,
                       deadline: float | None = None) -> None:
        client = self._client
        assert client is not None  # never in replay
        position = self.tape.next_position() if self.tape is not None else 0
        started = time.time(), time.monotonic()  # the call's time on its tape (issue 46)
        call = CallTrouble(self.meter)
        headers = self._headers(h)
        content = None if body is None else json.dumps(body)
        url = f"{self.upstream}/{rel}"
        try:
            resp = send_paced(client, self.pacer, call,
                              lambda: client.build_request(method, url, headers=headers,
                                                           content=content),
                              stream=False, deadline=deadline or time.monotonic())
        except httpx.HTTPError as exc:
            self.meter.upstream_error()
            data = _error_body(rel, 502, "upstream_unavailable",
                               f"model upstream unavailable: {type(exc).__name__}")
            try:
                self._send(h, 502, data)
            finally:
                self._record(position, method, rel, body, 502, "application/json", data=data,
                             model=model, upstream_error=True, started=started,
                             trouble=call.counts)
            return
        data = resp.content
        usage = None
        cost: CallCost | None = None
        if body is not None and 200 <= resp.status_code < 300:
            try:
                parsed = json.loads(data)
            except ValueError:
                parsed = {}
            usage = usage_from_json(parsed if isinstance(parsed, dict) else {})
            cost = self.meter.record(usage, model)
        elif resp.status_code >= 500 or resp.status_code == 429:  # past retries/ceiling
            self.meter.upstream_error()
        ctype = resp.headers.get("content-type", "application/json")
        try:
            self._send(h, resp.status_code, data, ctype)
        finally:
            self._record(position, method, rel, body, resp.status_code, ctype, data=data,
                         usage=usage, cost=cost, model=model,
                         upstream_error=resp.status_code >= 500, started=started,
                         trouble=call.counts)

    def _record(self, position: int, method: str, rel: str, body: dict[str, Any] | None,
                status: int, ctype: str, *, started: tuple[float, float] | None = None,
                **kwargs: Any) -> None:
        if self.tape is None or not self.recording:
            return
        if started is not None:  # when the call came, and how long until its answer ended
            kwargs.update(started_at=round(started[0], 3),
                          latency_s=round(time.monotonic() - started[1], 3))
        self.tape.record(position, method, rel, body, status=status, content_type=ctype,
                         **kwargs)

    def _replay(self, h: BaseHTTPRequestHandler, method: str, rel: str,
                body: dict[str, Any] | None, model: str | None) -> None:
        """Serve the call from the records: the same status, content type and bytes (a
        stream event by event, through the same usage filter) as the agent got when it
        was recorded; 409 ``replay_miss`` when there is none."""
        assert self.tape is not None
        stream = body is not None and body.get("stream") is True
        found = self.tape.replay(method, rel, body, stream)
        if isinstance(found, Missed):
            self._send(h, 409, _error_body(rel, 409, MISS_CODE, found.message),
                       headers={"x-should-retry": "false"})
            return
        record = found.record
        resp = record.response
        if record.upstream_error:
            self.meter.upstream_error()
        elif record.usage is not None:
            self.meter.replayed(record.usage.call_usage(), model, record.cost_usd)
        if not resp.stream:
            self._send(h, resp.status, resp.body_bytes(), resp.content_type)
            return
        sse = SSEUsage(drop_usage_only_chunks=self._drops_usage(rel, body or {}))
        h.send_response(resp.status)
        h.send_header("Content-Type", resp.content_type)
        h.send_header("Cache-Control", "no-cache")
        h.send_header("Connection", "close")
        h.end_headers()
        h.close_connection = True
        with contextlib.suppress(OSError):  # the agent hung up
            for event in resp.event_bytes():
                out = sse.feed_event(event)
                if out:
                    h.wfile.write(out)
                    h.wfile.flush()
            h.wfile.write(sse.flush_tail(resp.tail_bytes()))
            h.wfile.flush()

    @staticmethod
    def _drops_usage(rel: str, body: dict[str, Any]) -> bool:
        """True when the gateway asks for the stream's usage chunk and must not pass it
        on (an OpenAI chat stream whose client did not ask for it)."""
        if rel != "chat/completions":
            return False
        opts = body.get("stream_options")
        return not (isinstance(opts, dict) and opts.get("include_usage"))

    def _forward_stream(self, h: BaseHTTPRequestHandler, rel: str, body: dict[str, Any],
                        model: str | None, deadline: float) -> None:
        client = self._client
        assert client is not None  # never in replay
        asked = body
        drop = self._drops_usage(rel, body)
        if rel == "chat/completions":
            opts = body.get("stream_options")
            opts = dict(opts) if isinstance(opts, dict) else {}
            opts["include_usage"] = True
            body = {**body, "stream_options": opts}
        position = self.tape.next_position() if self.tape is not None else 0
        started = time.time(), time.monotonic()
        call = CallTrouble(self.meter)
        events: list[bytes] | None = [] if self.recording else None
        sse = SSEUsage(drop_usage_only_chunks=drop, capture=events)
        status, ctype = 0, "text/event-stream"
        cost: CallCost | None = None
        broken = False
        headers, content, url = self._headers(h), json.dumps(body), f"{self.upstream}/{rel}"
        idle = httpx.Timeout(self.pacer.policy.stream_idle_s, connect=30.0)  # silence cuts
        try:
            with contextlib.closing(send_paced(
                    client, self.pacer, call,
                    lambda: client.build_request("POST", url, headers=headers,
                                                 content=content, timeout=idle),
                    stream=True, deadline=deadline)) as resp:
                status = resp.status_code
                if resp.status_code >= 300:
                    data = resp.read()
                    if resp.status_code >= 500 or resp.status_code == 429:
                        self.meter.upstream_error()
                    ctype = resp.headers.get("content-type", "application/json")
                    try:
                        self._send(h, resp.status_code, data, ctype)
                    finally:
                        self._record(position, "POST", rel, asked, status, ctype, data=data,
                                     model=model, upstream_error=status >= 500,
                                     started=started, trouble=call.counts)
                    return
                ctype = resp.headers.get("content-type", "text/event-stream")
                h.send_response(resp.status_code)
                h.send_header("Content-Type", ctype)
                h.send_header("Cache-Control", "no-cache")
                h.send_header("Connection", "close")
                h.end_headers()
                h.close_connection = True
                try:
                    for chunk in resp.iter_bytes():
                        out = sse.feed(chunk)
                        if out:
                            h.wfile.write(out)
                            h.wfile.flush()
                    h.wfile.write(sse.flush())
                    h.wfile.flush()
                finally:
                    cost = self.meter.record(sse.usage, model)
        except httpx.HTTPError as exc:
            broken = True
            self.meter.upstream_error()
            if status and isinstance(exc, httpx.ReadTimeout):  # a stream gone silent: cut
                call.trouble(stalls=1)
            data = _error_body(rel, 502, "upstream_unavailable",
                               f"model upstream unavailable: {type(exc).__name__}")
            if status == 0:  # before any response: the agent gets the 502; after the
                # relayed headers, the connection just ends (no second response in the body)
                with contextlib.suppress(OSError):
                    self._send(h, 502, data)
                self._record(position, "POST", rel, asked, 502, "application/json",
                             data=data, model=model, upstream_error=True, started=started,
                             trouble=call.counts)
                return
        except OSError:
            pass  # the agent hung up; the call was still metered above
        if events is not None and status:
            self._record(position, "POST", rel, asked, status, ctype, events=events,
                         tail=sse.tail, usage=sse.usage, cost=cost, model=model,
                         upstream_error=broken, started=started, trouble=call.counts)
