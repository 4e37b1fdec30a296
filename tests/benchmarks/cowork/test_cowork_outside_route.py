"""The tool route's host half without Docker (issue 26 point 3): the token proxy forwards a
request to its Unix socket only with the route's token (path segment or bearer header) and
for one of its paths, stripped of the token, one request per connection; everything else is
refused before it reaches the socket. The relay container half is in
``test_cowork_outside.py``."""

from __future__ import annotations

import contextlib
import gc
import json
import math
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from harness.agents.gateway.events import add_usage, usage_cost
from harness.agents.gateway.tool_route import TokenProxy, decide
from harness.core.models import ModelCalls
from tests.benchmarks.cowork.cowork_seed_support import echo_server

TOKEN = "a" * 48
PATHS = ["/emails/mcp", "/google_calendar/mcp"]


def head(line: str, *headers: str) -> bytes:
    return ("\r\n".join([line, *headers]) + "\r\n\r\n").encode()


def test_decide_checks_the_token_then_the_path_and_strips_the_credential() -> None:
    ok = decide(head(f"POST /{TOKEN}/emails/mcp?x=1 HTTP/1.1", "Host: h", "Connection: keep-alive",
                     "Content-Length: 2"), TOKEN, PATHS)  # fmt: skip
    assert ok.status == 200
    assert ok.head.decode().splitlines() == [
        "POST /emails/mcp?x=1 HTTP/1.1",
        "Host: h",
        "Content-Length: 2",
        "Connection: close",
        "",
    ]
    bearer = decide(head("GET /google_calendar/mcp/ HTTP/1.1", f"Authorization: Bearer {TOKEN}"),
                    TOKEN, PATHS)  # fmt: skip
    assert bearer.status == 200 and b"Authorization" not in bearer.head
    assert decide(head("GET /emails/mcp HTTP/1.1"), TOKEN, PATHS).status == 401  # no token
    assert decide(head(f"GET /{'b' * 48}/emails/mcp HTTP/1.1"), TOKEN, PATHS).status == 401
    assert decide(head("GET /emails/mcp HTTP/1.1", "Authorization: Bearer nope"), TOKEN,
                  PATHS).status == 401  # fmt: skip
    assert decide(head(f"GET /{TOKEN}/status HTTP/1.1"), TOKEN, PATHS).status == 404
    assert decide(head(f"GET /{TOKEN}/other/mcp HTTP/1.1"), TOKEN, PATHS).status == 404
    assert decide(head(f"GET /{TOKEN}/../status HTTP/1.1"), TOKEN, PATHS).status == 404
    assert decide(head("nonsense"), TOKEN, PATHS).status == 400
    assert decide(head(f"GET /{TOKEN}/emails/mcp HTTP/1.1", "Bad Header : x"), TOKEN,
                  PATHS).status == 400  # fmt: skip


def test_a_bare_line_break_cannot_smuggle_a_header_or_a_request_line() -> None:
    """A server that ends lines at a bare LF (Python's ``http.server``) would read a header
    the proxy never saw (``Connection: keep-alive`` ahead of the proxy's ``close``: the
    body's bytes a second, unchecked request) or a second request line: refused here."""
    for line, *headers in (
        (f"GET /{TOKEN}/emails/mcp HTTP/1.1", "X: a\nConnection: keep-alive", "Host: h"),
        (f"GET /{TOKEN}/emails/mcp HTTP/1.1", "X: a\rConnection: keep-alive"),
        (f"GET /{TOKEN}/emails/mcp HTTP/1.1", "X: a\x00b"),
        (f"GET /{TOKEN}/emails/mcp?\nGET\t/status HTTP/1.1", "Host: h"),
    ):
        assert decide(head(line, *headers), TOKEN, PATHS).status == 400, (line, headers)
    tab = decide(head(f"GET /{TOKEN}/emails/mcp HTTP/1.1", "X: a\tb"), TOKEN, PATHS)
    assert tab.status == 200 and b"X: a\tb\r\n" in tab.head  # HTAB is a field's own


def test_an_outside_server_reporting_a_cost_past_a_float_does_not_break_the_poll() -> None:
    """The outside agent server's ``llm_usage`` records are the adversary's JSON: an integer
    cost too large for a float (``json`` parses it exactly) is infinite spend for the limit
    and an unknown cost for the row, never an ``OverflowError`` in the poll loop."""
    event = json.loads('{"type": "llm_usage", "model": "m", "prompt_tokens": 5, "cost": 1'
                       + "0" * 400 + "}")  # fmt: skip
    assert usage_cost(event) == math.inf
    models: dict[str, ModelCalls] = {}
    add_usage(models, event)
    assert (models["m"].calls, models["m"].prompt_tokens, models["m"].cost_usd) == (1, 5, None)


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[TokenProxy]:
    sock = tmp_path / "s.sock"
    server = echo_server(sock)
    proxy = TokenProxy(str(sock), TOKEN, PATHS).start()
    yield proxy
    proxy.close()
    server.shutdown()
    server.server_close()


def test_the_proxy_forwards_only_what_carries_its_token(proxy: TokenProxy) -> None:
    base = f"http://127.0.0.1:{proxy.port}"
    with httpx.Client(trust_env=False, timeout=10) as client:
        got = client.post(f"{base}/{TOKEN}/emails/mcp", content=b'{"jsonrpc": "2.0"}')
        assert got.status_code == 200, got.text
        seen = got.json()
        assert seen["path"] == "/emails/mcp" and seen["body"] == '{"jsonrpc": "2.0"}'
        assert TOKEN not in got.text and seen["headers"]["connection"] == "close"
        got = client.get(
            f"{base}/google_calendar/mcp", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert got.status_code == 200 and "authorization" not in got.json()["headers"]
        for url, headers in ((f"{base}/emails/mcp", {}),
                             (f"{base}/{'c' * 48}/emails/mcp", {}),
                             (f"{base}/emails/mcp", {"Authorization": "Bearer wrong"}),
                             (f"{base}/{TOKEN}/status", {})):  # fmt: skip
            refused = client.post(url, headers=headers, content=b"{}")
            assert refused.status_code in (401, 404), (url, refused.text)
            assert "path" not in refused.json()  # answered by the proxy, not the socket
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as raw:
        raw.sendall(
            b"GET /emails/mcp HTTP/1.1\r\nHost: x\r\n\r\n"
            + f"GET /{TOKEN}/emails/mcp HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        )
        answer = b""
        while chunk := raw.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 401") and b'"path"' not in answer  # no smuggling
    assert (proxy.forwarded, proxy.refused) == (2, 5)


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.filterwarnings("error::ResourceWarning")
def earlier_garbage_collected() -> None:
    """Collects what earlier tests of this worker left for the garbage collector (a Docker
    client's socket, say) without reporting it: only this test's sockets must be closed."""
    hook = sys.unraisablehook
    sys.unraisablehook = lambda _: None
    try:
        gc.collect()
    finally:
        sys.unraisablehook = hook


def test_closing_the_proxy_ends_connections_in_flight(tmp_path: Path) -> None:
    earlier_garbage_collected()
    sock = tmp_path / "s.sock"
    server = echo_server(sock)
    proxy = TokenProxy(str(sock), TOKEN, PATHS).start()
    waiting = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
    waiting.sendall(b"POST /" + TOKEN.encode() + b"/emails/mcp HTTP/1.1\r\nHost: x\r\n")  # no end
    idle = [socket.create_connection(("127.0.0.1", proxy.port), timeout=10) for _ in range(5)]
    time.sleep(0.3)  # all six accepted and waiting for their request heads
    proxy.close()  # each connection closed under its handler; nothing left pending
    try:
        with contextlib.suppress(ConnectionResetError):  # (closed with its head unread)
            assert waiting.recv(100) == b""  # closed by the proxy, never forwarded
        assert [s.recv(10) for s in idle] == [b""] * 5 and proxy.forwarded == 0
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", proxy.port), timeout=2).close()
    finally:
        for s in [waiting, *idle]:
            s.close()
        server.shutdown()
        server.server_close()
