"""Issue 14 point 3: the gateway client copies the task's events, scrubbed, before every
status request, so an aborted instance keeps its evidence and proves its spend (real HTTP
against the reference server on 127.0.0.1)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from harness.agents.base import AgentRequest
from harness.agents.gateway.agent import GatewayAgent
from harness.agents.gateway.checkpoint import read_checkpoint
from harness.agents.gateway.client import GatewayClient
from harness.agents.gateway.events import EVENTS_NAME, EventLog, read_events, usage_with_tokens
from tests.agents.agents_support import FAST, task_body

SECRET = "sk-live-4f1c9a7be2d04c6b9e5a"


def secret_step() -> dict[str, Any]:
    return {"run": f"echo using {SECRET}", "cost_usd": 0.25, "prompt_tokens": 100,
            "completion_tokens": 10}


def run_agent(server_url: str, tmp_path: Path, plan: dict[str, Any], timeout: float = 30.0,
              grace: float = 2.0) -> Any:
    """The client waits ``timeout`` + ``grace``; the server's own deadline is 60 s."""
    agent = GatewayAgent(server_url, policy=FAST.model_copy(update={"client_grace_s": grace}))
    return agent.run(AgentRequest(
        instance_id="t", instance_dir=tmp_path / "inst", instruction="x",
        task_body=task_body(tmp_path / "ws", plan, timeout_sec=60), timeout_sec=timeout,
        env_allowlist=("HARNESS_TEST_KEY",), extra={"keep_sandbox": True}))


def test_events_are_copied_scrubbed_before_every_status_request(
        ref_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_TEST_KEY", SECRET)
    server = ref_server({})
    outcome = run_agent(server.url, tmp_path, {"steps": [secret_step(), {"run": "true"}]})
    assert outcome.completed, outcome
    path = tmp_path / "inst" / EVENTS_NAME
    text = path.read_text()
    assert SECRET not in text  # the step's output carried the key: redacted on the way in
    events = read_events(path)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "status" and "llm_usage" in kinds and kinds.count("step") == 2
    assert [e["seq"] for e in events] == list(range(len(events)))  # each copied once, in order
    assert events[-1] == {**events[-1], "type": "status", "status": "completed"}
    assert outcome.details["events"]["usage_observed"] is True
    assert outcome.output_paths["gateway_events"] == str(path)
    # every status request of the task came right after an events request
    requests = [line for line in server.log_path.read_text().splitlines()
                if f"/api/tasks/{outcome.task_id}" in line and "GET" in line]
    polls = [i for i, line in enumerate(requests)
             if re.search(rf"/api/tasks/{re.escape(outcome.task_id)}(\s|$|\?)", line)
             and "/events" not in line]
    assert polls and all(i > 0 and "/events" in requests[i - 1] for i in polls)


def test_an_aborted_wait_keeps_the_events_that_prove_the_spend(
        ref_server: Any, tmp_path: Path) -> None:
    server = ref_server({})
    plan = {"steps": [secret_step(), {"run": "true", "sleep_s": 30}]}
    outcome = run_agent(server.url, tmp_path, plan, timeout=1.0, grace=0.0)
    assert outcome.infra and outcome.reason_code == "client_poll_timeout_reattachable"
    events = read_events(tmp_path / "inst" / EVENTS_NAME)
    assert any(usage_with_tokens(e) for e in events)
    checkpoint = read_checkpoint(tmp_path / "inst" / "task_checkpoint.json")
    assert checkpoint is not None and checkpoint.events is not None
    assert checkpoint.events["usage_observed"] is True
    assert checkpoint.events["copied"] == len(events)


def test_a_server_without_the_events_endpoint_is_asked_once(ref_server: Any,
                                                             tmp_path: Path) -> None:
    server = ref_server({"faults": [{"kind": "error", "match": "GET /api/tasks/*/events*",
                                     "status": 404}]})
    outcome = run_agent(server.url, tmp_path, {"steps": [{"run": "true", "sleep_s": 0.5}]})
    assert outcome.completed
    assert outcome.details["events"]["state"] == "unsupported"
    assert not (tmp_path / "inst" / EVENTS_NAME).exists()
    asked = [line for line in server.log_path.read_text().splitlines() if "/events" in line]
    assert len(asked) == 1


def test_events_file_is_bounded_and_credential_fields_are_replaced(
        ref_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import harness.agents.gateway.events as ge

    class Page:  # a server answering with whatever these events are
        def __init__(self, events: list[Any]) -> None:
            self.events = events

        def task_events(self, task_id: str, cursor: Any) -> Any:
            return {"events": self.events, "next_cursor": "abc"}

    big = [{"type": "step", "api_key": "x" * 10, "authorization": "Bearer y",
            "prompt_tokens": 3, "output_tail": "z" * 1000} for _ in range(50)]
    monkeypatch.setattr(ge, "MAX_EVENTS_BYTES", 10_000)
    log = EventLog(Page(big), "t", tmp_path)  # type: ignore[arg-type]
    state = log.copy()
    assert state.state == "full" and state.cursor == "abc" and 0 < state.bytes <= 10_000
    first = json.loads((tmp_path / EVENTS_NAME).read_text().splitlines()[0])
    assert first["api_key"] == first["authorization"] == "[redacted]"
    assert first["prompt_tokens"] == 3  # counts are not credentials
    assert log.copy().copied == state.copied  # full: not asked again


def test_usage_with_tokens_reads_the_common_shapes() -> None:
    assert usage_with_tokens({"type": "llm_usage", "prompt_tokens": 5})
    assert usage_with_tokens({"llm_usage": {"completion_tokens": 1}})
    assert usage_with_tokens({"kind": "llm_usage", "usage": {"total_tokens": 9}})
    assert not usage_with_tokens({"type": "llm_usage", "prompt_tokens": 0})
    assert not usage_with_tokens({"type": "step", "prompt_tokens": 5})
    assert not usage_with_tokens("llm_usage")


def test_events_of_a_task_the_server_does_not_know_are_none(ref_server: Any) -> None:
    server = ref_server({})
    with GatewayClient(server.url, policy=FAST) as client:
        assert client.task_events("no-such-task", 0) is None  # 404: nothing to copy
