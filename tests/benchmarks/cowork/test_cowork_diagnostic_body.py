"""Residual diagnostic (audit only) and the gateway task body."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from benchmarks.cowork_bench.classify import classify_instance
from benchmarks.cowork_bench.diagnostic import run_diagnostic
from benchmarks.cowork_bench.eval_once import evaluate_once
from benchmarks.cowork_bench.instance import InstanceResult
from benchmarks.cowork_bench.phases import WORKSPACE
from benchmarks.cowork_bench.steps import STATE, CoworkSteps, Life
from benchmarks.cowork_bench.task_body import description, disabled_tools, gateway_timeout
from benchmarks.cowork_bench.tasks import read_docs
from harness.agents.base import AgentRequest
from harness.agents.gateway.agent import GatewayAgent
from tests.benchmarks.cowork.cowork_helpers import (
    FIXTURE,
    CountingChecker,
    write_agent_phase,
    write_events,
)
from tests.support.stand_ins import answers_id

IID = "excel-sales-summary"
USAGE = {"type": "llm_usage", "prompt_tokens": 10, "completion_tokens": 5}


def truncated(inst: Path, reason: str = "deadline_local", activity: bool = True) -> None:
    write_agent_phase(inst, status="max_turns_reached", reason=reason)
    if activity:
        write_events(inst, [USAGE])
    evaluate_once(inst, FIXTURE, IID, CountingChecker())  # declined by the status gate


def test_diagnostic_is_off_by_default(tmp_path: Path) -> None:
    truncated(tmp_path)
    checker = CountingChecker()
    assert run_diagnostic(tmp_path, FIXTURE, IID, checker, enabled=False) is None
    assert checker.calls == []


def test_diagnostic_runs_once_after_a_truncation_decline(tmp_path: Path) -> None:
    truncated(tmp_path)
    verdict = classify_instance(tmp_path).model_dump()
    checker = CountingChecker(exit_code=0)
    rec = run_diagnostic(tmp_path, FIXTURE, IID, checker, enabled=True)
    assert rec is not None and rec.outcome == "checks_passed" and len(checker.calls) == 1
    assert checker.calls[0].scratch_dir.endswith("diagnostic")
    again = run_diagnostic(tmp_path, FIXTURE, IID, checker, enabled=True)
    assert again == rec and len(checker.calls) == 1
    assert classify_instance(tmp_path).model_dump() == verdict  # still agent_failed
    assert verdict["status"] == "agent_failed"


def test_diagnostic_ineligible_cases(tmp_path: Path) -> None:
    cases = {
        "not_truncation:model_gave_up": dict(reason="model_gave_up"),
        "no_model_activity": dict(activity=False),
    }
    for expected, kwargs in cases.items():
        inst = tmp_path / expected.replace(":", "_")
        truncated(inst, **kwargs)  # type: ignore[arg-type]
        checker = CountingChecker()
        rec = run_diagnostic(inst, FIXTURE, IID, checker, enabled=True)
        assert rec is not None and (rec.outcome, rec.reason) == ("ineligible", expected)
        assert checker.calls == []
    passed = tmp_path / "passed"
    write_agent_phase(passed)
    evaluate_once(passed, FIXTURE, IID, CountingChecker())
    rec = run_diagnostic(passed, FIXTURE, IID, CountingChecker(), enabled=True)
    assert rec is not None and rec.reason == "official_not_declined:completed"


def cowork_task(max_steps: int | None = None, subagents: bool = False) -> dict[str, Any]:
    """What the gateway agent submits for a Cowork task 40 s into its set-up, in the agent
    container as Cowork hands it over (the task's network, the workspace in the container)."""

    class Steps(CoworkSteps):
        options = SimpleNamespace(task_timeout_sec=1800,  # type: ignore[assignment]
                                  max_steps=max_steps)

    docs = read_docs(FIXTURE, "gcal-standup-week")
    trial = SimpleNamespace(ctx=SimpleNamespace(dry_run=False),
                            state={STATE: Life(docs, time.monotonic() - 39.5,
                                               InstanceResult(IID, None, None, None))})
    terms = Steps().agent_terms(trial)  # type: ignore[arg-type]
    box = SimpleNamespace(name="cw-agent", id="0" * 64, user="agent", exec=answers_id(),
                          spec=SimpleNamespace(workdir="/", network="cw-net", binds=()))
    request = AgentRequest(
        instance_id="gcal-standup-week", instance_dir=Path("."),
        instruction=description(FIXTURE, "gcal-standup-week", WORKSPACE, docs),
        sandbox=box, timeout_sec=1800, adapter="cowork_bench", terms=terms)  # type: ignore[arg-type]
    return GatewayAgent.task_preview(request).body()


def test_the_gateway_task_follows_the_reference_adapter() -> None:
    body = cowork_task()
    assert "!!<<<<" not in body["description"]
    assert body["description"].startswith(
        "Рабочий каталог (workspace): /workspace/dumps/workspace")
    assert "Daily standup" in body["description"]  # the task text follows the prompt
    assert body["workspace_mode"] == "external" and body["memory_mode"] == "empty"
    assert body["actor_id"] == body["source"] == "cowork-bench"
    assert body["metadata"] == {"delegation_role": "root"}
    assert body["timeout_sec"] == 1800 - 40 + 0.5 - 105 - 0.5  # set-up spent, the margin
    assert set(body["disabled_tools"]) == {
        "web_search", "browse_page", "browser_action", "youtube_transcript",
        "analyze_screenshot", "vlm_query", "claude_code_edit", "schedule_subagent",
    }  # fmt: skip
    # the agent container is on the task's network: no "no network" claim, no host folder
    assert body["executor_ref"] == {
        "type": "docker_exec", "id": "cw-agent", "container_name": "cw-agent",
        "workspace_backend_path": WORKSPACE, "path_mappings": [], "user": "agent"}
    assert body["allowed_resources"] == {} and "workspace_root" not in body
    assert cowork_task(max_steps=7)["metadata"] == {"delegation_role": "root", "max_steps": 7}
    assert "schedule_subagent" not in disabled_tools(subagents=True)
    assert gateway_timeout(100, 30) == 60  # floor
