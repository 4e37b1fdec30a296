"""Residual diagnostic (audit only) and the gateway task body."""

from __future__ import annotations

from pathlib import Path

from benchmarks.cowork_bench.classify import classify_instance
from benchmarks.cowork_bench.diagnostic import run_diagnostic
from benchmarks.cowork_bench.eval_once import evaluate_once
from benchmarks.cowork_bench.task_body import build_task_body, gateway_timeout
from tests.benchmarks.cowork.cowork_helpers import (
    FIXTURE,
    CountingChecker,
    write_agent_phase,
    write_events,
)

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


def test_task_body_follows_the_reference_adapter() -> None:
    body = build_task_body(FIXTURE, "gcal-standup-week", workspace_root="/workspace/dumps/workspace",
                           task_timeout_sec=1800, setup_overhead_sec=40)  # fmt: skip
    assert "!!<<<<" not in body.description
    assert body.description.startswith("Рабочий каталог (workspace): /workspace/dumps/workspace")
    assert "Daily standup" in body.description  # the task text follows the prompt
    assert body.workspace_mode == "external" and body.memory_mode == "empty"
    assert body.actor_id == body.source == "cowork-bench"
    assert body.metadata == {"delegation_role": "root"}
    assert body.timeout_sec == 1800 - 40 - 105
    assert set(body.disabled_tools) == {
        "web_search", "browse_page", "browser_action", "youtube_transcript",
        "analyze_screenshot", "vlm_query", "claude_code_edit", "schedule_subagent",
    }  # fmt: skip
    with_sub = build_task_body(FIXTURE, IID, workspace_root="/w", subagents=True)
    assert "schedule_subagent" not in with_sub.disabled_tools
    assert gateway_timeout(100, 30) == 60  # floor
