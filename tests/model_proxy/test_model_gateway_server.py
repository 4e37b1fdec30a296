"""The gateway's proxy (no Docker): both APIs, streamed and not, metered per call; unknown
prices stay unknown; the key replaces whatever the client sent; the limit refuses."""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from harness.model_proxy.prices import ModelPrices
from harness.model_proxy.server import GatewayServer
from harness.model_proxy.usage import InstanceMeter
from harness.testing.fake_model_server import FakeModelServer, start_fake_model_server
from tests.agents.model_scripts import step
from tests.model_proxy.support import client

KEY = "sk-gateway-unit-0123456789"
PRICES = ModelPrices.model_validate({"models": {"priced": {"input_per_mtok": 1.0,
                                                           "output_per_mtok": 4.0}}})


def gateway(upstream: FakeModelServer, limit: float | None = None) -> GatewayServer:
    return GatewayServer(upstream.base_url, KEY, InstanceMeter(PRICES, limit)).start()


def test_openai_calls_streamed_or_not_are_metered_with_prices(
        upstream: FakeModelServer, tmp_path: Path) -> None:
    gw = gateway(upstream)
    try:
        with client(gw) as c:
            plain = c.post("/chat/completions", json={"model": "priced", "messages": []})
            assert plain.status_code == 200
            assert plain.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] \
                == "bash"
            with c.stream("POST", "/chat/completions", json={
                    "model": "priced", "messages": [], "stream": True}) as resp:
                events = [json.loads(line[6:]) for line in resp.iter_lines()
                          if line.startswith("data: {")]
            assert events and all(e["choices"] for e in events)  # usage chunk not shown
            with c.stream("POST", "/chat/completions", json={
                    "model": "priced", "messages": [], "stream": True,
                    "stream_options": {"include_usage": True}}) as resp:
                asked = [json.loads(line[6:]) for line in resp.iter_lines()
                         if line.startswith("data: {")]
            assert asked[-1]["choices"] == [] and asked[-1]["usage"]["prompt_tokens"] == 300
    finally:
        gw.close()
    s = gw.meter.snapshot()
    assert (s.calls, s.prompt_tokens, s.completion_tokens) == (3, 900, 60)
    assert s.cost_known and s.cost_usd == pytest.approx(3 * (300 * 1.0 + 20 * 4.0) / 1e6)
    seen = [json.loads(x) for x in (tmp_path / "up.jsonl").read_text().splitlines()]
    assert {r["auth_sha256"] for r in seen} == {hashlib.sha256(f"Bearer {KEY}".encode())
                                                .hexdigest()}
    assert not gw.socket_path.exists()


def test_anthropic_messages_streamed_or_not_are_metered(upstream: FakeModelServer) -> None:
    gw = gateway(upstream)
    try:
        with client(gw) as c:
            plain = c.post("/messages", json={"model": "priced", "messages": [],
                                              "max_tokens": 10})
            assert plain.json()["content"][-1]["type"] == "tool_use"
            with c.stream("POST", "/messages", json={"model": "priced", "messages": [],
                                                     "max_tokens": 10, "stream": True}) as r:
                names = [line[7:] for line in r.iter_lines() if line.startswith("event: ")]
            assert names[0] == "message_start" and names[-1] == "message_stop"
    finally:
        gw.close()
    s = gw.meter.snapshot()
    assert (s.calls, s.prompt_tokens, s.completion_tokens) == (2, 600, 40)
    assert s.cost_known


def test_unpriced_model_leaves_cost_unknown_and_the_limit_then_refuses(
        upstream: FakeModelServer) -> None:
    gw = gateway(upstream, limit=5.0)
    try:
        with client(gw) as c:
            first = c.post("/chat/completions", json={"model": "mystery", "messages": []})
            assert first.status_code == 200
            refused = c.post("/chat/completions", json={"model": "priced", "messages": []})
            assert refused.status_code == 402
            assert refused.json()["error"]["type"] == "per_task_limit_reached"
            other = c.post("/files", json={})
            assert other.status_code == 404
    finally:
        gw.close()
    s = gw.meter.snapshot()
    assert s.unpriced_calls == 1 and not s.cost_known and s.limit_reason == "cost_unknown"
    assert upstream.requests == 1


def test_malformed_bodies_from_the_agent_get_an_http_error_not_a_dropped_connection(
        upstream: FakeModelServer) -> None:
    """The agent writes these requests: a bad Content-Length or a chunked body is answered
    (400, 411), the gateway keeps serving, and nothing reaches the provider."""
    import socket

    gw = gateway(upstream)
    try:
        for head, code in ((b"Content-Length: nope\r\n", b" 400 "),
                           (b"Transfer-Encoding: chunked\r\n", b" 411 ")):
            with socket.socket(socket.AF_UNIX) as sock:
                sock.connect(str(gw.socket_path))
                sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\n" + head
                             + b"\r\n2\r\n{}\r\n0\r\n\r\n")
                status = sock.recv(4096).split(b"\r\n", 1)[0]
            assert code in status, status
        with client(gw) as c:  # still serving
            ok = c.post("/chat/completions", json={"model": "priced", "messages": []})
            assert ok.status_code == 200
    finally:
        gw.close()
    assert gw.meter.snapshot().calls == 1


def test_concurrent_calls_overshoot_the_per_task_limit_by_one_call_at_most(
        tmp_path: Path) -> None:
    """Six calls at once against a limit two calls cross: each call is admitted knowing the
    cost of those before it, so two go out (the second crosses the limit) and four are
    refused, where admitting them together let all six spend."""
    slow = step("ls", prompt=300, completion=20)  # $0.00038 a call at PRICES
    slow["delay_s"] = 0.3
    upstream = start_fake_model_server({"responses": [slow], "loop": True},
                                       log=tmp_path / "up.jsonl")
    gw = gateway(upstream, limit=0.0005)
    try:
        def call(_: int) -> int:
            with client(gw) as c:
                return c.post("/chat/completions", json={"model": "priced", "messages": []},
                              timeout=30).status_code

        with ThreadPoolExecutor(6) as pool:
            codes = sorted(pool.map(call, range(6)))
        state = gw.meter.snapshot()
    finally:
        gw.close()
        upstream.stop()
    assert codes == [200, 200, 402, 402, 402, 402]
    assert upstream.requests == 2 and state.refused == 4
    assert state.cost_usd == pytest.approx(2 * 0.00038)


def test_a_loopback_gateway_serves_only_the_bearer_of_its_token(
        upstream: FakeModelServer) -> None:
    """A host agent's gateway (a TCP port any local process can reach): no token, a wrong
    one, or one with non-ASCII characters gets 401 and reaches nothing."""
    token = "harness-gw-0123456789abcdef"
    gw = GatewayServer(upstream.base_url, KEY, InstanceMeter(PRICES, None), token=token).start()
    assert gw.base_url is not None
    body = {"model": "priced", "messages": []}
    try:
        with httpx.Client(base_url=f"{gw.base_url}/v1") as c:
            tries: list[dict[bytes, bytes]] = [
                {}, {b"Authorization": b"Bearer harness-gw-wrong"},
                {b"Authorization": "Bearer harness-gw-\u00e9t\u00e9".encode("latin-1")},
                {b"x-api-key": token[:-1].encode()}]
            for headers in tries:
                refused = c.post("/chat/completions", json=body, headers=headers)
                assert refused.status_code == 401, headers
                assert refused.json()["error"]["code"] == "invalid_api_key"
                # the gateway closes the connection (the body is unread) and says so: the
                # client's next request goes on a new one, never on the closed one
                assert refused.headers.get("connection") == "close", refused.headers
            assert upstream.requests == 0
            ok = c.post("/chat/completions", json=body,
                        headers={"Authorization": f"Bearer {token}"})
            assert ok.status_code == 200
            lost = c.post("/no/such/route", json=body, headers={"x-api-key": token})
            assert lost.status_code == 404 and lost.headers.get("connection") == "close"
            assert c.post("/chat/completions", json=body,
                          headers={"x-api-key": token}).status_code == 200
    finally:
        gw.close()
    assert upstream.requests == 2
