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
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import socketserver
import tempfile
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx

from harness.model_proxy.pinning import REFUSAL_CODE, ModelPin, load_json_object
from harness.model_proxy.usage import InstanceMeter, SSEUsage, usage_from_json

ROUTES = ("chat/completions", "completions", "responses", "embeddings", "messages")
MAX_BODY = 32 << 20
HOP_HEADERS = {"authorization", "x-api-key", "host", "content-length", "connection",
               "transfer-encoding", "keep-alive", "proxy-authorization", "accept-encoding",
               "api-key", "x-goog-api-key", "cookie"}
SOCKET_NAME = "gateway.sock"
REFUSAL_TYPE = "per_task_limit_reached"


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

    ``pin``: forward only the models it allows (None: every model, as named)."""

    def __init__(self, upstream: str, key: str, meter: InstanceMeter, *,
                 timeout_s: float = 600.0, token: str | None = None,
                 pin: ModelPin | None = None) -> None:
        self.upstream = upstream.rstrip("/")
        self.meter = meter
        self.pin = pin
        self._key = key
        self._token = token
        self._client = httpx.Client(timeout=httpx.Timeout(timeout_s, connect=30.0))
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
        self._client.close()
        self.socket_path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.socket_dir.rmdir()

    # -- one request -----------------------------------------------------------------
    def _send(self, h: BaseHTTPRequestHandler, status: int, body: bytes,
              ctype: str = "application/json") -> None:
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body)))
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
        return sent is not None and hmac.compare_digest(sent.strip(), self._token)

    def handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        path = h.path.split("?", 1)[0]
        rel = path[len("/v1/"):] if path.startswith("/v1/") else path.lstrip("/")
        if not self._token_ok(h):
            h.close_connection = True  # its body is not read
            self._send(h, 401, _error_body(rel, 401, "invalid_api_key",
                                           "this model gateway serves only its own agent"))
            return
        if method == "GET" and rel == "models":
            self._forward_plain(h, "GET", rel, None, None)
            return
        if method != "POST" or rel not in ROUTES:
            self._send(h, 404, _error_body(rel, 404, "not_found",
                                           f"the model gateway does not serve {method} {path}"))
            return
        if h.headers.get("Transfer-Encoding", "").lower() not in ("", "identity"):
            self._send(h, 411, _error_body(rel, 411, "length_required",
                                           "send the body with a Content-Length"))
            return
        try:
            length = int(h.headers.get("Content-Length") or 0)
        except ValueError:
            self._send(h, 400, _error_body(rel, 400, "invalid_request",
                                           "Content-Length is not a number"))
            return
        if length < 0 or length > MAX_BODY:
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
            if body.get("stream") is True:
                self._forward_stream(h, rel, body, model)
            else:
                self._forward_plain(h, "POST", rel, body, model)

    def _forward_plain(self, h: BaseHTTPRequestHandler, method: str, rel: str,
                       body: dict[str, Any] | None, model: str | None) -> None:
        try:
            resp = self._client.request(method, f"{self.upstream}/{rel}",
                                        headers=self._headers(h),
                                        content=None if body is None else json.dumps(body))
        except httpx.HTTPError as exc:
            self.meter.upstream_error()
            self._send(h, 502, _error_body(rel, 502, "upstream_unavailable",
                                           f"model upstream unavailable: {type(exc).__name__}"))
            return
        data = resp.content
        if body is not None and 200 <= resp.status_code < 300:
            try:
                parsed = json.loads(data)
            except ValueError:
                parsed = {}
            self.meter.record(usage_from_json(parsed if isinstance(parsed, dict) else {}),
                              model)
        elif resp.status_code >= 500:
            self.meter.upstream_error()
        self._send(h, resp.status_code, data,
                   resp.headers.get("content-type", "application/json"))

    def _forward_stream(self, h: BaseHTTPRequestHandler, rel: str, body: dict[str, Any],
                        model: str | None) -> None:
        drop = False
        if rel == "chat/completions":
            opts = body.get("stream_options")
            opts = dict(opts) if isinstance(opts, dict) else {}
            drop = not opts.get("include_usage")
            opts["include_usage"] = True
            body = {**body, "stream_options": opts}
        sse = SSEUsage(drop_usage_only_chunks=drop)
        try:
            with self._client.stream("POST", f"{self.upstream}/{rel}", headers=self._headers(h),
                                     content=json.dumps(body)) as resp:
                if resp.status_code >= 300:
                    data = resp.read()
                    if resp.status_code >= 500:
                        self.meter.upstream_error()
                    self._send(h, resp.status_code, data,
                               resp.headers.get("content-type", "application/json"))
                    return
                h.send_response(resp.status_code)
                h.send_header("Content-Type", resp.headers.get("content-type",
                                                               "text/event-stream"))
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
                    self.meter.record(sse.usage, model)
        except httpx.HTTPError as exc:
            self.meter.upstream_error()
            with contextlib.suppress(OSError):
                self._send(h, 502, _error_body(rel, 502, "upstream_unavailable",
                                               f"model upstream unavailable: "
                                               f"{type(exc).__name__}"))
        except OSError:
            pass  # the agent hung up; the call was still metered above
