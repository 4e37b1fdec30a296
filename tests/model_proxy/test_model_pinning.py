"""Model pinning in the model gateway (no Docker): the canonical comparison, the ambiguous
bodies refused, every forwarded route refusing another model with 403 ``model_not_allowed``
before anything reaches the upstream, the declared spelling forwarded, and the meter's
calls per model (refused ones under the model asked, ``allowed: false``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.agents.base import AgentOptions, make_agent
from harness.agents.command_proxy import GatewayCommandAgent, gateway_pin, is_loopback_url
from harness.model_proxy.pinning import (
    ModelPin,
    canonical,
    label,
    load_json_object,
    pin_for,
    spellings,
)
from harness.model_proxy.prices import ModelPrices
from harness.model_proxy.server import GatewayServer
from harness.model_proxy.usage import MAX_MODEL_ENTRIES, OTHER_MODELS, InstanceMeter
from harness.testing.fake_model_server import FakeModelServer
from tests.model_proxy.support import client

KEY = "sk-pinning-unit-0123456789"
DECLARED = "openai/fake-model"
HELPER = "helper-mini"
OTHER = "gpt-4o-mini"
PRICES = ModelPrices.model_validate({"models": {
    "fake-model": {"input_per_mtok": 1.0, "output_per_mtok": 4.0},
    "helper-mini": {"input_per_mtok": 0.5, "output_per_mtok": 1.0}}})
MSGS = [{"role": "user", "content": "hi"}]


# -- the comparison -------------------------------------------------------------------


def test_canonical_form_and_spellings_of_a_declared_name() -> None:
    assert canonical(" GPT-4o\n") == canonical("gpt-4o") == canonical("\uff47\uff50\uff54-4o")
    assert canonical("gpt-4o\u200b") != canonical("gpt-4o")  # invisible: another name
    assert spellings("openrouter/openai/gpt-4o") == ["openrouter/openai/gpt-4o",
                                                     "openai/gpt-4o", "gpt-4o"]
    assert spellings("acme/gpt-4o") == ["acme/gpt-4o"]  # not a routing prefix: kept
    assert spellings("anthropic/claude-sonnet-4.5") == ["anthropic/claude-sonnet-4.5",
                                                        "claude-sonnet-4.5"]


@pytest.mark.parametrize(("asked", "forwarded"), [
    ("openrouter/anthropic/claude-sonnet-4.5", "openrouter/anthropic/claude-sonnet-4.5"),
    ("anthropic/claude-sonnet-4.5", "anthropic/claude-sonnet-4.5"),
    ("claude-sonnet-4.5", "claude-sonnet-4.5"),
    ("  Claude-Sonnet-4.5\n", "claude-sonnet-4.5"),  # case and spaces: the declared spelling
    ("ANTHROPIC/CLAUDE-SONNET-4.5", "anthropic/claude-sonnet-4.5"),
    ("gpt-4o-mini", "gpt-4o-mini"),  # the helper, declared as openai/gpt-4o-mini
    ("openai/gpt-4o-mini", "openai/gpt-4o-mini"),
    # other models, however spelt
    ("claude-opus-4", None),
    ("acme/claude-sonnet-4.5", None),  # a prefix the operator did not write routes elsewhere
    ("openai/claude-sonnet-4.5", None),
    ("openrouter/openai/gpt-4o-mini", None),
    ("claude-sonnet-4.5\u200b", None),
    ("claude-sonnet-4.5-thinking", None),
    ("", None),
    ("   ", None),
])
def test_match_forwards_the_declared_spelling_or_nothing(asked: str,
                                                         forwarded: str | None) -> None:
    pin = ModelPin("openrouter/anthropic/claude-sonnet-4.5", ["openai/gpt-4o-mini"])
    assert pin.match(asked) == forwarded
    assert pin.match(None) is None and pin.match(["gpt-4o-mini"]) is None


def test_labels_are_bounded_and_show_invisible_characters() -> None:
    assert label("gpt-4o\u200b") == "gpt-4o\\u200b"
    assert label("a\nb") == "a\\u000ab"
    assert label("x" * 500) == "x" * 120 + "..."
    assert label(None) == "(none)" and label(["a"]) == "(list)"


def test_pin_needs_a_declared_name() -> None:
    assert pin_for(None, [HELPER]) is None
    with pytest.raises(ValueError, match="give a model name"):
        ModelPin("fake-model", ["  "])


# -- ambiguous bodies -------------------------------------------------------------------


def test_repeated_top_level_keys_are_found_with_every_value() -> None:
    body, dups = load_json_object(b'{"model": "fake-model", "x": {"k": 1, "k": 2}, '
                                  b'"model": "gpt-4o-mini"}')
    assert body == {"model": "gpt-4o-mini", "x": {"k": 2}}
    assert dups == [("model", "fake-model"), ("model", "gpt-4o-mini")]  # nested ones: no
    assert load_json_object(b"") == ({}, [])
    with pytest.raises(ValueError):
        load_json_object(b"{not json")


def _check(raw: bytes, query: str = "",
           headers: tuple[tuple[str, str], ...] = ()) -> tuple[dict[str, Any], Any]:
    pin = ModelPin(DECLARED, [HELPER])
    body, dups = load_json_object(raw)
    return pin.check(body, dups, query, headers)


@pytest.mark.parametrize(("raw", "query", "headers", "recorded", "why"), [
    (b'{"model": "fake-model", "model": "gpt-4o-mini"}', "", (), "gpt-4o-mini",
     "names 'model' more than once"),
    (b'{"model": "gpt-4o-mini", "model": "fake-model"}', "", (), "gpt-4o-mini",
     "more than once"),
    (b'{"model": "fake-model", "model": "fake-model"}', "", (), "fake-model (ambiguous)",
     "more than once"),
    (b'{"model": "fake-model", "Model": "gpt-4o-mini"}', "", (), "gpt-4o-mini",
     "is not 'model'"),
    (b'{"model": "fake-model", " MODEL ": "gpt-4o-mini"}', "", (), "gpt-4o-mini",
     "is not 'model'"),
    (b'{"model": "fake-model", "\\uff4d\\uff4f\\uff44\\uff45\\uff4c": "gpt-4o-mini"}', "", (),
     "gpt-4o-mini", "is not 'model'"),  # fullwidth letters: NFKC makes them "model"
    (b'{"model": "fake-model", "Models": ["gpt-4o-mini"]}', "", (), "gpt-4o-mini",
     "is not 'models'"),
    (b'{"model": "fake-model"}', "model=gpt-4o-mini", (), "gpt-4o-mini",
     "the query string names a model"),
    (b'{"model": "fake-model"}', "beta=true&Model=fake-model", (), "fake-model (ambiguous)",
     "the query string"),
    (b'{"model": "fake-model"}', "", (("X-Model", "gpt-4o-mini"),), "gpt-4o-mini",
     "the header 'X-Model'"),
    (b'{"messages": []}', "", (), "(none)", "names no model"),
    (b'{"model": null}', "", (), "(none)", "names no model"),
    (b'{"model": ["fake-model", "gpt-4o-mini"]}', "", (), "(list)", "must be one name"),
    (b'{"model": "fake-model", "models": ["helper-mini", "GPT-4o-Mini"]}', "", (),
     "gpt-4o-mini", "(in 'models') is not allowed"),
    (b'{"model": "fake-model", "fallbacks": ["gpt-4o-mini"]}', "", (), "gpt-4o-mini",
     "(in 'fallbacks') is not allowed"),
    (b'{"model": "fake-model", "models": "gpt-4o-mini"}', "", (), "fake-model",
     "must be a list of model names"),
    (b'{"model": " GPT-4o-Mini\\t"}', "", (), "gpt-4o-mini", "is not allowed"),
])
def test_ambiguous_or_other_models_are_refused(raw: bytes, query: str,
                                               headers: tuple[tuple[str, str], ...],
                                               recorded: str, why: str) -> None:
    _, refused = _check(raw, query, headers)
    assert refused is not None
    assert refused.asked == recorded
    assert why in refused.message
    assert refused.message.startswith("model_not_allowed: ")
    assert "allowed 'openai/fake-model', 'helper-mini'" in refused.message


def test_an_allowed_body_is_forwarded_with_the_declared_spellings() -> None:
    body, refused = _check(b'{"model": " Fake-Model ", "models": ["HELPER-mini"], '
                           b'"messages": [{"role": "user", "content": "{\\"model\\": 1}"}]}',
                           query="beta=true", headers=(("anthropic-beta", "x"),))
    assert refused is None
    assert body["model"] == "fake-model" and body["models"] == ["helper-mini"]
    assert body["messages"][0]["content"] == '{"model": 1}'


# -- the gateway ------------------------------------------------------------------------


def pinned_gateway(upstream: FakeModelServer, limit: float | None = None) -> GatewayServer:
    pin = ModelPin(DECLARED, [HELPER])
    meter = InstanceMeter(PRICES, limit, pinned=pin.allowed)
    return GatewayServer(upstream.base_url, KEY, meter, pin=pin).start()


ROUTE_BODIES: list[tuple[str, dict[str, Any]]] = [
    ("/chat/completions", {"model": OTHER, "messages": MSGS}),
    ("/chat/completions", {"model": OTHER, "messages": MSGS, "stream": True}),
    ("/chat/completions", {"model": OTHER, "messages": MSGS, "stream": True,
                           "stream_options": {"include_usage": True}}),
    ("/completions", {"model": OTHER, "prompt": "hi"}),
    ("/completions", {"model": OTHER, "prompt": "hi", "stream": True}),
    ("/responses", {"model": OTHER, "input": "hi"}),
    ("/responses", {"model": OTHER, "input": "hi", "stream": True}),
    ("/embeddings", {"model": "text-embedding-3-large", "input": "hi"}),
    ("/messages", {"model": "claude-opus-4", "max_tokens": 10, "messages": MSGS}),
    ("/messages", {"model": "claude-opus-4", "max_tokens": 10, "messages": MSGS,
                   "stream": True}),
]


def test_every_route_refuses_another_model_and_nothing_reaches_the_upstream(
        upstream: FakeModelServer, tmp_path: Path) -> None:
    gw = pinned_gateway(upstream)
    try:
        with client(gw) as c:
            for path, body in ROUTE_BODIES:
                resp = c.post(path, json=body)
                assert resp.status_code == 403, (path, body, resp.text)
                error = resp.json()["error"]
                asked = body["model"]
                assert f"model {asked!r} is not allowed" in error["message"], error
                assert "allowed 'openai/fake-model', 'helper-mini'" in error["message"]
                if path == "/messages":  # the Anthropic SDK's error shape
                    assert resp.json()["type"] == "error"
                    assert error["type"] == "model_not_allowed"
                else:
                    assert error["code"] == "model_not_allowed" and error["param"] == "model"
            # the SDKs' own way: the OpenAI SDK raises PermissionDeniedError with the code
            import openai

            sdk = openai.OpenAI(api_key="placeholder", base_url="http://model-gateway/v1",
                                http_client=httpx.Client(transport=httpx.HTTPTransport(
                                    uds=str(gw.socket_path))),  # type: ignore[arg-type]
                                max_retries=0)
            with pytest.raises(openai.PermissionDeniedError) as info:
                sdk.chat.completions.create(model=OTHER, messages=MSGS)  # type: ignore[arg-type]
            assert info.value.code == "model_not_allowed"
    finally:
        gw.close()
    assert upstream.requests == 0
    assert not (tmp_path / "up.jsonl").exists()
    s = gw.meter.snapshot()
    assert s.model_not_allowed == len(ROUTE_BODIES) + 1 and s.calls == 0
    assert s.refused == 0  # the per-task limit's count is another matter
    models = {(m.model, m.allowed): m for m in gw.meter.models_called()}
    assert set(models) == {(OTHER, False), ("text-embedding-3-large", False),
                           ("claude-opus-4", False)}
    assert models[(OTHER, False)].refused == 8 and models[(OTHER, False)].calls == 0
    assert models[("claude-opus-4", False)].refused == 2
    assert all(m.source == "model_proxy" and m.cost_usd == 0.0 for m in models.values())


def test_disguised_models_are_refused_on_the_wire(upstream: FakeModelServer) -> None:
    """What an agent in the sandbox can send: raw bytes, a query string, a header."""
    gw = pinned_gateway(upstream)
    attempts: list[tuple[str, bytes, dict[str, str]]] = [
        ("/chat/completions", b'{"model": "fake-model", "messages": [], '
                              b'"model": "gpt-4o-mini"}', {}),
        ("/chat/completions", b'{"model": "fake-model", "MODEL": "gpt-4o-mini", '
                              b'"messages": []}', {}),
        ("/chat/completions?model=gpt-4o-mini", b'{"model": "fake-model", "messages": []}',
         {}),
        ("/messages?beta=true&model=claude-opus-4",
         b'{"model": "fake-model", "max_tokens": 5, "messages": []}', {}),
        ("/chat/completions", b'{"model": "fake-model", "messages": []}',
         {"X-Model-Override": "gpt-4o-mini"}),
        ("/chat/completions", b'{"model": "fake-model", "models": ["gpt-4o-mini"], '
                              b'"route": "fallback", "messages": []}', {}),
        ("/chat/completions", b'{"model": "OpenAI/GPT-4o-Mini", "messages": []}', {}),
        ("/chat/completions", b'{"model": "acme/fake-model", "messages": []}', {}),
        ("/chat/completions", b'{"model": "fake-model\\u200b", "messages": []}', {}),
        ("/chat/completions", b'{"messages": []}', {}),
    ]
    try:
        with client(gw) as c:
            for path, raw, headers in attempts:
                resp = c.post(path, content=raw,
                              headers={"Content-Type": "application/json", **headers})
                assert resp.status_code == 403, (path, raw, resp.text)
                assert "model_not_allowed" in resp.text
    finally:
        gw.close()
    assert upstream.requests == 0
    s = gw.meter.snapshot()
    assert s.model_not_allowed == len(attempts)
    asked = {m.model: m.refused for m in gw.meter.models_called()}
    assert asked == {"gpt-4o-mini": 5, "claude-opus-4": 1, "openai/gpt-4o-mini": 1,
                     "acme/fake-model": 1, "fake-model\\u200b": 1, "(none)": 1}
    assert all(not m.allowed for m in gw.meter.models_called())


def test_allowed_models_pass_with_the_declared_spelling_and_are_metered(
        upstream: FakeModelServer, tmp_path: Path) -> None:
    gw = pinned_gateway(upstream)
    try:
        with client(gw) as c:
            assert c.post("/chat/completions", json={"model": " Fake-Model ",
                                                     "messages": MSGS}).status_code == 200
            with c.stream("POST", "/chat/completions", json={
                    "model": "openai/fake-model", "messages": MSGS, "stream": True}) as r:
                assert r.status_code == 200
                r.read()
            assert c.post("/messages", json={"model": HELPER, "max_tokens": 5,
                                             "messages": MSGS}).status_code == 200
            assert c.post("/chat/completions", json={"model": OTHER,
                                                     "messages": MSGS}).status_code == 403
    finally:
        gw.close()
    seen = [json.loads(x)["model"] for x in (tmp_path / "up.jsonl").read_text().splitlines()]
    assert seen == ["fake-model", "openai/fake-model", "helper-mini"]
    s = gw.meter.snapshot()
    assert s.pinned_models == [DECLARED, HELPER]
    assert (s.calls, s.model_not_allowed, s.prompt_tokens) == (3, 1, 900)
    by = {(m.model, m.allowed): m for m in gw.meter.models_called()}
    fake, full, helper = by[("fake-model", True)], by[("openai/fake-model", True)], \
        by[("helper-mini", True)]
    assert (fake.calls, fake.prompt_tokens, fake.completion_tokens) == (1, 300, 20)
    assert fake.cost_usd == pytest.approx((300 * 1.0 + 20 * 4.0) / 1e6)
    assert full.calls == 1 and full.cost_usd == pytest.approx((300 * 1.0 + 20 * 4.0) / 1e6)
    assert helper.cost_usd == pytest.approx((300 * 0.5 + 20 * 1.0) / 1e6)
    assert by[(OTHER, False)].refused == 1 and by[(OTHER, False)].prompt_tokens == 0
    assert sum(m.cost_usd or 0 for m in by.values()) == pytest.approx(s.cost_usd)


def test_a_refused_model_never_counts_against_the_per_task_limit(
        upstream: FakeModelServer) -> None:
    gw = pinned_gateway(upstream, limit=1.0)
    try:
        with client(gw) as c:
            for _ in range(3):
                assert c.post("/chat/completions", json={"model": "mystery",
                                                         "messages": MSGS}).status_code == 403
            assert c.post("/chat/completions", json={"model": "fake-model",
                                                     "messages": MSGS}).status_code == 200
    finally:
        gw.close()
    s = gw.meter.snapshot()
    assert (s.refused, s.limit_reached, s.model_not_allowed, s.calls) == (0, False, 3, 1)


def test_unknown_cost_of_a_model_stays_unknown_in_its_record(
        upstream: FakeModelServer) -> None:
    pin = ModelPin("fake-model", ["unpriced-helper"])
    gw = GatewayServer(upstream.base_url, KEY, InstanceMeter(PRICES, None, pinned=pin.allowed),
                       pin=pin).start()
    try:
        with client(gw) as c:
            for model in ("fake-model", "unpriced-helper"):
                assert c.post("/chat/completions", json={"model": model,
                                                         "messages": MSGS}).status_code == 200
    finally:
        gw.close()
    by = {m.model: m for m in gw.meter.models_called()}
    assert by["fake-model"].cost_usd is not None and by["fake-model"].cost_usd > 0
    assert by["unpriced-helper"].cost_usd is None and by["unpriced-helper"].prompt_tokens == 300
    assert not gw.meter.snapshot().cost_known


def test_endless_model_names_cannot_grow_the_record() -> None:
    meter = InstanceMeter(PRICES, None, pinned=("fake-model",))
    for i in range(3 * MAX_MODEL_ENTRIES):
        meter.refuse_model(f"m{i}")
    models = meter.models_called()
    assert len(models) == MAX_MODEL_ENTRIES + 1
    assert models[-1].model == OTHER_MODELS and models[-1].refused == 2 * MAX_MODEL_ENTRIES
    assert meter.snapshot().model_not_allowed == 3 * MAX_MODEL_ENTRIES


def test_unpinned_gateway_forwards_every_model_and_records_them(
        upstream: FakeModelServer) -> None:
    gw = GatewayServer(upstream.base_url, KEY, InstanceMeter(PRICES, None)).start()
    try:
        with client(gw) as c:
            for model in ("fake-model", "anything"):
                assert c.post("/chat/completions", json={"model": model,
                                                         "messages": MSGS}).status_code == 200
    finally:
        gw.close()
    assert upstream.requests == 2
    s = gw.meter.snapshot()
    assert s.pinned_models is None and s.model_not_allowed == 0
    assert [(m.model, m.calls, m.allowed) for m in gw.meter.models_called()] == [
        ("fake-model", 1, True), ("anything", 1, True)]


# -- startup: which agents are pinned ------------------------------------------------


def test_a_paid_upstream_without_a_declared_model_is_refused_at_startup() -> None:
    env = {"HARNESS_MODEL_API_KEY": "sk-x"}
    paid = "https://openrouter.ai/api/v1"
    for kind in ("command", "host-command"):
        opts = AgentOptions(command="true", model_upstream=paid)
        with pytest.raises(ValueError) as info:
            if kind == "command":
                GatewayCommandAgent.from_options(opts, env)
            else:
                from harness.agents.host_command import HostCommandAgent

                HostCommandAgent.from_options(opts, env)
        assert str(info.value) == (
            "--model-upstream https://openrouter.ai/api/v1: name the model under test with "
            "--solve-model MODEL (the gateway forwards only it and each --allow-model NAME)")
    with pytest.raises(ValueError, match="--allow-model names a helper"):
        gateway_pin(AgentOptions(model_upstream=paid, allow_models=[HELPER]))
    pin = gateway_pin(AgentOptions(model_upstream=paid, solve_model=DECLARED,
                                   allow_models=[HELPER, HELPER]))
    assert pin is not None and pin.allowed == (DECLARED, HELPER)
    # a model server on this machine: nothing pinned, every model recorded
    assert gateway_pin(AgentOptions(model_upstream="http://127.0.0.1:9/v1")) is None
    for url, local in (("http://localhost:8000/v1", True), ("http://[::1]:8000/v1", True),
                       ("http://127.8.0.1/v1", True), ("https://10.0.0.1/v1", False),
                       ("https://api.openai.com/v1", False),
                       ("http://localhost.evil.com", False)):
        assert is_loopback_url(url) is local, url


def test_make_agent_reports_the_missing_model_in_one_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_MODEL_API_KEY", "sk-x")
    with pytest.raises(ValueError) as info:
        make_agent("command", {"command": "true", "model_upstream": "https://api.example/v1"})
    assert "\n" not in str(info.value) and "--solve-model MODEL" in str(info.value)
    agent = make_agent("command", {"command": "true", "solve_model": "fake-model",
                                   "model_upstream": "https://api.example/v1",
                                   "allow_models": [HELPER]})
    assert isinstance(agent, GatewayCommandAgent)
    assert agent.pin is not None and agent.pin.allowed == ("fake-model", HELPER)
