"""A FAKE model provider for tests: a scripted OpenAI-compatible (and minimal
Anthropic-compatible) HTTP server that replays canned responses and reports usage.

It is not a model: each request gets the next response of a script file, whatever was
asked. Endpoints: ``POST /v1/chat/completions`` (tool calls; ``stream: true`` answers with
server-sent events, and a usage chunk when ``stream_options.include_usage`` is set),
``POST /v1/messages`` (Anthropic Messages, streaming or not), ``GET /v1/models``.

Script (JSON)::

    {"model": "fake/scripted",
     "loop": false,                 # after the last response: start again (true) or 410
     "responses": [
        {"content": "thinking",     # assistant text (optional)
         "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}],
         "usage": {"prompt_tokens": 100, "completion_tokens": 20, "cost": 0.01}},
        {"status": 503, "error": "overloaded"},         # an HTTP error instead
        {"status": 429, "retry_after": "2"},             # ... with a Retry-After header
        {"content": "x", "stall_after_chunks": 1, "stall_s": 30},  # a stream that stops
        {"content": "slow", "trickle_s": 0.5}            # a stream, a chunk each 0.5 s
     ]}

``usage.cost`` (optional) is reported like OpenRouter's provider cost field. Every request
is appended to ``--log`` as one JSON line (path, model, stream flag, whether an
authorization header came and its SHA-256, never its value).

Run: ``python -m harness.testing.fake_model_server --script S.json --port-file P`` (binds
127.0.0.1 and a free port unless ``--host``/``--port``), or :func:`start_fake_model_server`
in a thread.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class FakeToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "bash"
    arguments: dict[str, Any] | str = Field(default_factory=dict)


class FakeUsage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = None


class FakeResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str | None = None
    tool_calls: list[FakeToolCall] = Field(default_factory=list)
    usage: FakeUsage = Field(default_factory=FakeUsage)
    status: int = 200
    error: str | None = None
    delay_s: float = Field(default=0.0, ge=0, le=60)  # answer this much later (a slow model)
    retry_after: str | None = None  # the Retry-After header of an error answer (a 429)
    # a stream: send this many chunks, then nothing for stall_s (the connection kept open)
    stall_after_chunks: int | None = Field(default=None, ge=0)
    stall_s: float = Field(default=30.0, ge=0, le=600)
    trickle_s: float = Field(default=0.0, ge=0, le=60)  # a stream: this long between chunks


class FakeScript(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = "fake/scripted"
    loop: bool = False
    responses: list[FakeResponse] = Field(min_length=1)


def load_script(path: Path | str) -> FakeScript:
    return FakeScript.model_validate_json(Path(path).read_text())


class _State:
    def __init__(self, script: FakeScript, log: Path | None) -> None:
        self.script = script
        self.log = log
        self.lock = threading.Lock()
        self.index = 0
        self.requests = 0

    def next_response(self) -> FakeResponse | None:
        with self.lock:
            self.requests += 1
            n = len(self.script.responses)
            if self.index >= n:
                if not self.script.loop:
                    return None
                self.index = 0
            resp = self.script.responses[self.index]
            self.index += 1
            return resp

    def record(self, entry: dict[str, Any]) -> None:
        if self.log is None:
            return
        with self.lock, self.log.open("a") as fh:
            fh.write(json.dumps(entry) + "\n")


def _args_text(call: FakeToolCall) -> str:
    return call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)


def _usage(u: FakeUsage) -> dict[str, Any]:
    out: dict[str, Any] = {"prompt_tokens": u.prompt_tokens,
                           "completion_tokens": u.completion_tokens,
                           "total_tokens": u.prompt_tokens + u.completion_tokens}
    if u.cost is not None:
        out["cost"] = u.cost
    return out


def chat_completion(resp: FakeResponse, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": resp.content}
    if resp.tool_calls:
        message["tool_calls"] = [
            {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
             "function": {"name": c.name, "arguments": _args_text(c)}}
            for c in resp.tool_calls]
    return {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion",
            "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if resp.tool_calls else "stop"}],
            "usage": _usage(resp.usage)}


def chat_chunks(resp: FakeResponse, model: str, include_usage: bool) -> Iterator[dict[str, Any]]:
    base = {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": model}
    yield {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                "finish_reason": None}]}
    if resp.content:
        half = len(resp.content) // 2  # two pieces: the client must join them
        for piece in (resp.content[:half], resp.content[half:]):
            if piece:
                yield {**base, "choices": [{"index": 0, "delta": {"content": piece},
                                            "finish_reason": None}]}
    for i, call in enumerate(resp.tool_calls):
        text = _args_text(call)
        cut = len(text) // 2
        yield {**base, "choices": [{"index": 0, "finish_reason": None, "delta": {"tool_calls": [
            {"index": i, "id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
             "function": {"name": call.name, "arguments": text[:cut]}}]}}]}
        yield {**base, "choices": [{"index": 0, "finish_reason": None, "delta": {"tool_calls": [
            {"index": i, "function": {"arguments": text[cut:]}}]}}]}
    yield {**base, "choices": [{"index": 0, "delta": {},
                                "finish_reason": "tool_calls" if resp.tool_calls else "stop"}]}
    if include_usage:
        yield {**base, "choices": [], "usage": _usage(resp.usage)}


def anthropic_message(resp: FakeResponse, model: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if resp.content:
        content.append({"type": "text", "text": resp.content})
    for call in resp.tool_calls:
        args = call.arguments if isinstance(call.arguments, dict) else json.loads(call.arguments)
        content.append({"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:12]}",
                        "name": call.name, "input": args})
    usage: dict[str, Any] = {"input_tokens": resp.usage.prompt_tokens,
                             "output_tokens": resp.usage.completion_tokens}
    return {"id": f"msg_{uuid.uuid4().hex[:12]}", "type": "message", "role": "assistant",
            "model": model, "content": content,
            "stop_reason": "tool_use" if resp.tool_calls else "end_turn",
            "stop_sequence": None, "usage": usage}


def anthropic_events(resp: FakeResponse, model: str) -> Iterator[tuple[str, dict[str, Any]]]:
    msg = anthropic_message(resp, model)
    start = {**msg, "content": [], "stop_reason": None,
             "usage": {"input_tokens": resp.usage.prompt_tokens, "output_tokens": 1}}
    yield "message_start", {"type": "message_start", "message": start}
    for i, block in enumerate(msg["content"]):
        if block["type"] == "text":
            yield "content_block_start", {"type": "content_block_start", "index": i,
                                          "content_block": {"type": "text", "text": ""}}
            yield "content_block_delta", {"type": "content_block_delta", "index": i,
                                          "delta": {"type": "text_delta", "text": block["text"]}}
        else:
            yield "content_block_start", {"type": "content_block_start", "index": i,
                                          "content_block": {**block, "input": {}}}
            yield "content_block_delta", {"type": "content_block_delta", "index": i, "delta": {
                "type": "input_json_delta", "partial_json": json.dumps(block["input"])}}
        yield "content_block_stop", {"type": "content_block_stop", "index": i}
    yield "message_delta", {"type": "message_delta",
                            "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
                            "usage": {"output_tokens": resp.usage.completion_tokens}}
    yield "message_stop", {"type": "message_stop"}


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    # Headers and body leave in two writes: with Nagle's algorithm on, the body waited for the
    # client's delayed ACK of the headers, about 40 ms a response on a kept-alive connection.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _json(self, status: int, body: dict[str, Any],
              headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            model = self.server.state.script.model
            self._json(200, {"object": "list", "data": [{"id": model, "object": "model"}]})
        else:
            self._json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        state = self.server.state
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._json(400, {"error": {"message": "body is not JSON"}})
            return
        auth = self.headers.get("Authorization") or self.headers.get("x-api-key") or ""
        anthropic = self.path.rstrip("/").endswith("/messages")
        if not anthropic and not self.path.rstrip("/").endswith("/chat/completions"):
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        stream = bool(body.get("stream"))
        state.record({"path": self.path, "model": body.get("model"), "stream": stream,
                      "messages": len(body.get("messages") or []),
                      "tools": [t.get("function", t).get("name") for t in body.get("tools") or []
                                if isinstance(t, dict)],
                      "auth_sha256": hashlib.sha256(auth.encode()).hexdigest() if auth else None})
        resp = state.next_response()
        if resp is None:
            self._json(410, {"error": {"message": "fake model server: script exhausted",
                                       "type": "script_exhausted"}})
            return
        if resp.delay_s:
            time.sleep(resp.delay_s)
        if resp.status != 200:
            self._json(resp.status, {"error": {"message": resp.error or "scripted error",
                                               "type": "scripted_error"}},
                       {"Retry-After": resp.retry_after} if resp.retry_after else None)
            return
        model = str(body.get("model") or state.script.model)
        if not stream:
            self._json(200, anthropic_message(resp, model) if anthropic
                       else chat_completion(resp, model))
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        if anthropic:
            for name, event in anthropic_events(resp, model):
                self.wfile.write(f"event: {name}\ndata: {json.dumps(event)}\n\n".encode())
                self.wfile.flush()
        else:
            opts = body.get("stream_options") or {}
            include = bool(isinstance(opts, dict) and opts.get("include_usage"))
            for n, chunk in enumerate(chat_chunks(resp, model, include)):
                if n and resp.trickle_s:
                    time.sleep(resp.trickle_s)
                if resp.stall_after_chunks is not None and n >= resp.stall_after_chunks:
                    time.sleep(resp.stall_s)  # silent, the connection open
                    return
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, addr: tuple[str, int], state: _State) -> None:
        super().__init__(addr, _Handler)
        self.state = state


@dataclass
class FakeModelServer:
    """A running fake server (thread). ``url`` ends without a slash; ``base_url`` adds /v1."""

    server: _Server
    thread: threading.Thread

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else str(host)
        return f"http://{name}:{port}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    @property
    def requests(self) -> int:
        return self.server.state.requests

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def start_fake_model_server(script: FakeScript | dict[str, Any] | Path, *,
                            host: str = "127.0.0.1", port: int = 0,
                            log: Path | None = None) -> FakeModelServer:
    if isinstance(script, Path):
        script = load_script(script)
    elif isinstance(script, dict):
        script = FakeScript.model_validate(script)
    server = _Server((host, port), _State(script, log))
    thread = threading.Thread(target=server.serve_forever, name="fake-model-server",
                              kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    return FakeModelServer(server, thread)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fake_model_server", description=__doc__)
    parser.add_argument("--script", required=True, type=Path)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", default=0, type=int)
    parser.add_argument("--port-file", type=Path, help="write the bound port here")
    parser.add_argument("--log", type=Path, help="append one JSON line per request")
    args = parser.parse_args(argv)
    srv = start_fake_model_server(args.script, host=args.host, port=args.port, log=args.log)
    if args.port_file:
        tmp = args.port_file.with_suffix(".tmp")
        tmp.write_text(str(srv.server.server_address[1]))
        tmp.replace(args.port_file)
    try:
        srv.thread.join()
    except KeyboardInterrupt:
        srv.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
