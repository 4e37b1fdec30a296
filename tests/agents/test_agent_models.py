"""The row's ``models`` from the agent side (issue 24): a gateway server's ``llm_usage``
events per model (source ``gateway_server``, ``allowed`` per ``--solve-model`` and
``--allow-model``), and mini-swe-agent's calls per model litellm called (source
``mini_swe``), from the trajectory's messages. The gateway agent runs against the real
reference server on 127.0.0.1; the mini-swe-agent accounting is pure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.agents.base import AgentOptions, AgentRequest, make_agent
from harness.agents.gateway.agent import GatewayAgent
from harness.agents.gateway.events import (
    MAX_MODEL_ENTRIES,
    OTHER_MODELS,
    UNNAMED,
    add_usage,
    models_called,
)
from harness.agents.mini_swe import account
from harness.agents.mini_swe import models_called as mini_models
from harness.core.models import ModelCalls
from harness.model_proxy.pinning import ModelPin
from harness.model_proxy.prices import ModelPrices
from tests.agents.agents_support import FAST, task_body


def tally(events: list[Any]) -> dict[str, ModelCalls]:
    models: dict[str, ModelCalls] = {}
    for event in events:
        add_usage(models, event)
    return models


def test_usage_events_are_counted_per_model_with_unknown_costs_kept_unknown() -> None:
    models = tally([
        {"type": "llm_usage", "model": "openai/fake-model", "prompt_tokens": 100,
         "completion_tokens": 10, "cost_usd": 0.25},
        {"llm_usage": {"model": "openai/fake-model", "input_tokens": 50, "output_tokens": 5,
                       "cost": 0.5}},
        {"kind": "llm_usage", "usage": {"model": "helper-mini", "prompt_tokens": 7}},
        {"type": "llm_usage", "data": {"model": "gpt-4o-mini", "prompt_tokens": 3,
                                       "cost_usd": 0.01}},
        {"type": "llm_usage", "prompt_tokens": 9, "cost_usd": 0.02},  # names no model
        {"type": "step", "model": "not-a-usage-record", "prompt_tokens": 1000},
        {"type": "llm_usage", "model": "gpt-4o-mini", "cost_usd": float("nan")},
        "llm_usage",
    ])
    pin = ModelPin("openrouter/openai/fake-model", ["helper-mini"])
    rows = {m.model: m for m in models_called(models, pin) or []}
    assert set(rows) == {"openai/fake-model", "helper-mini", "gpt-4o-mini", UNNAMED}
    fake = rows["openai/fake-model"]
    assert (fake.calls, fake.prompt_tokens, fake.completion_tokens, fake.cost_usd,
            fake.allowed, fake.source) == (2, 150, 15, 0.75, True, "gateway_server")
    assert rows["helper-mini"].cost_usd is None and rows["helper-mini"].allowed is True
    other = rows["gpt-4o-mini"]
    assert other.allowed is False and other.calls == 2 and other.cost_usd is None
    assert rows[UNNAMED].allowed is True and rows[UNNAMED].cost_usd == pytest.approx(0.02)
    # without a declared model nothing is judged
    assert all(m.allowed for m in models_called(models, None) or [])
    assert models_called({}, pin) is None


def test_a_server_naming_endless_models_cannot_grow_the_row() -> None:
    models = tally([{"type": "llm_usage", "model": f"m{i}\u202e" + "x" * 300,
                     "prompt_tokens": 1} for i in range(3 * MAX_MODEL_ENTRIES)])
    rows = models_called(models, ModelPin("fake-model")) or []
    assert len(rows) == MAX_MODEL_ENTRIES + 1
    assert rows[-1].model == OTHER_MODELS and rows[-1].calls == 2 * MAX_MODEL_ENTRIES
    assert all(not m.allowed for m in rows)
    assert all(len(m.model) <= 123 and "\u202e" not in m.model for m in rows)


def test_gateway_agent_row_lists_the_models_its_server_reported(
        ref_server: Any, tmp_path: Path) -> None:
    server = ref_server({})
    agent = make_agent("gateway", AgentOptions(gateway_url=server.url, solve_model="fake-model",
                                               allow_models=["helper-mini"]))
    assert isinstance(agent, GatewayAgent)
    agent.policy = FAST
    plan = {"steps": [{"run": "true", "prompt_tokens": 100, "completion_tokens": 10,
                       "cost_usd": 0.25},
                      {"run": "true", "prompt_tokens": 50, "completion_tokens": 5,
                       "cost_usd": 0.5},
                      {"run": "true"}]}
    outcome = agent.run(AgentRequest(
        instance_id="t", instance_dir=tmp_path / "inst", instruction="x",
        task_body=task_body(tmp_path / "ws", plan, timeout_sec=60), timeout_sec=30,
        extra={"keep_sandbox": True}))
    assert outcome.completed, outcome
    # the reference server's usage records name no model: counted, not judged
    assert [m.model_dump() for m in outcome.models or []] == [{
        "model": UNNAMED, "source": "gateway_server", "calls": 2, "refused": 0,
        "prompt_tokens": 150, "completion_tokens": 15, "cost_usd": 0.75, "allowed": True}]


def test_gateway_agent_without_usage_records_has_no_models(
        ref_server: Any, tmp_path: Path) -> None:
    server = ref_server({})
    agent = GatewayAgent(server.url, policy=FAST)
    outcome = agent.run(AgentRequest(
        instance_id="t", instance_dir=tmp_path / "inst", instruction="x",
        task_body=task_body(tmp_path / "ws", {"steps": [{"run": "true"}]}, timeout_sec=60),
        timeout_sec=30, extra={"keep_sandbox": True}))
    assert outcome.completed and outcome.models is None


def _message(model: str | None, prompt: int, completion: int, cost: float = 0.0) -> dict[str, Any]:
    response: dict[str, Any] = {"usage": {"prompt_tokens": prompt,
                                          "completion_tokens": completion}}
    if model is not None:
        response["model"] = model
    return {"role": "assistant", "content": "x",
            "extra": {"response": response, "cost": cost}}


def test_mini_swe_models_are_the_models_litellm_called() -> None:
    prices = ModelPrices.model_validate({"models": {"fake-model": {
        "input_per_mtok": 2.0, "output_per_mtok": 10.0}}})
    messages = [
        {"role": "system", "content": "s"},
        _message("fake-model", 1000, 100),
        {"role": "user", "content": "observation"},
        _message("fake-model-2025-01-01", 1000, 100, cost=0.5),  # what the provider served
        _message(None, 10, 1),  # no model in the response: the configured one
        {"role": "exit", "content": "", "extra": {"exit_status": "Submitted"}},
    ]
    rows = {m.model: m for m in mini_models(messages, "openai/fake-model", prices)}
    assert set(rows) == {"fake-model", "fake-model-2025-01-01", "openai/fake-model"}
    assert rows["fake-model"].cost_usd == pytest.approx((1000 * 2.0 + 100 * 10.0) / 1e6)
    assert rows["fake-model-2025-01-01"].cost_usd == 0.5
    assert all(m.source == "mini_swe" and m.allowed and m.calls == 1 for m in rows.values())
    # the same calls as the row's totals
    tokens, cost, _, _ = account(messages, "openai/fake-model", prices)
    assert sum(m.prompt_tokens or 0 for m in rows.values()) == tokens.prompt == 2010
    assert cost is not None
    assert sum(m.cost_usd or 0 for m in rows.values()) == pytest.approx(cost)
    # an unpriced call leaves that model's cost unknown, never 0
    unpriced = mini_models(messages, "openai/fake-model", ModelPrices())
    assert {m.model: m.cost_usd for m in unpriced} == {
        "fake-model": None, "fake-model-2025-01-01": 0.5, "openai/fake-model": None}
