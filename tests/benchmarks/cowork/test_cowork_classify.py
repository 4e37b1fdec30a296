"""Ledger classification from the evidence in an instance folder."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.cowork_bench import models as m
from benchmarks.cowork_bench.classify import classify_instance, receipt_state
from benchmarks.cowork_bench.eval_once import evaluate_once, read_claim
from harness.core.fsutil import atomic_write_json
from harness.core.models import Outcome
from tests.benchmarks.cowork.cowork_helpers import (
    FIXTURE,
    CountingChecker,
    write_agent_phase,
    write_events,
)

IID = "excel-sales-summary"


def evaluated(inst: Path, exit_code: int) -> None:
    write_agent_phase(inst)
    evaluate_once(inst, FIXTURE, IID, CountingChecker(exit_code=exit_code))


def test_receipt_pass_true_is_passed(tmp_path: Path) -> None:
    evaluated(tmp_path, 0)
    c = classify_instance(tmp_path)
    assert (c.status, c.reason_code) == ("passed", "passed")
    fields = c.row_fields()
    assert fields["resolved"] is True and fields["score"] == 1.0 and fields["infra"] is False
    assert fields["official_eval_status"] == "completed"
    assert c.outcome is Outcome.SCORED


def test_receipt_pass_false_is_failed_verifier(tmp_path: Path) -> None:
    evaluated(tmp_path, 1)
    c = classify_instance(tmp_path)
    assert (c.status, c.reason_code) == ("failed", "verifier_failed")
    assert c.details["eval"] == {"pass": False, "exit_code": 1}


def test_infra_record_wins_pg_fail(tmp_path: Path) -> None:
    tmp_path.mkdir(exist_ok=True)
    atomic_write_json(tmp_path / m.INFRA_RECORD, m.InfraRecord(
        instance_id=IID, reason_code="pg_fail", stage="instance", message="not ready", at="now"))  # fmt: skip
    c = classify_instance(tmp_path)
    assert (c.status, c.reason_code) == ("infra_failed", "pg_fail")
    assert c.row_fields()["infra"] is True


def test_empty_folder_is_not_attempted(tmp_path: Path) -> None:
    c = classify_instance(tmp_path / "never-started")
    assert (c.status, c.reason_code) == ("not_attempted", "missing_result")
    assert c.outcome is Outcome.NOT_ATTEMPTED


def test_started_without_summary_is_interrupted_or_provisional(tmp_path: Path) -> None:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / m.PREPROCESS_LOG).write_text("started\n")
    done = classify_instance(tmp_path, interruption_cause="signal_15")
    assert (done.status, done.reason_code) == ("infra_failed", "interrupted:signal_15")
    assert done.details["start_evidence"] == [m.PREPROCESS_LOG]
    live = classify_instance(tmp_path, run_live=True)
    assert (live.reason_code, live.details["provisional"]) == ("missing_adapter_summary", True)


def test_agent_not_successful_is_agent_failed_with_stop_code(tmp_path: Path) -> None:
    write_agent_phase(tmp_path, status="max_turns_reached", reason="deadline_local")
    evaluate_once(tmp_path, FIXTURE, IID, CountingChecker())
    c = classify_instance(tmp_path)
    assert (c.status, c.reason_code) == ("agent_failed", "deadline_local")
    assert c.details["official_receipt"]["state"] == "declined"
    assert c.outcome is Outcome.AGENT_FAILED


def test_adapter_infra_failure_is_infra(tmp_path: Path) -> None:
    write_agent_phase(tmp_path, status="failed", infra_reason="preprocess_failed")
    c = classify_instance(tmp_path)
    assert (c.status, c.reason_code) == ("infra_failed", "preprocess_failed")


def test_success_without_eval_is_infra_not_run(tmp_path: Path) -> None:
    write_agent_phase(tmp_path)
    assert classify_instance(tmp_path).reason_code == "official_eval_not_run"


def test_claim_without_receipt_is_missing_eval_result(tmp_path: Path) -> None:
    evaluated(tmp_path, 0)
    claim = read_claim(tmp_path)
    assert claim is not None
    (tmp_path / m.receipt_name(claim.attempt_id)).unlink()
    c = classify_instance(tmp_path)
    assert (c.status, c.reason_code) == ("infra_failed", "missing_eval_result")
    assert c.details["official_receipt"]["state"] == "unreported"


def test_unreadable_receipts_never_score(tmp_path: Path) -> None:
    evaluated(tmp_path, 0)
    claim = read_claim(tmp_path)
    assert claim is not None
    rpath = tmp_path / m.receipt_name(claim.attempt_id)
    good = json.loads(rpath.read_text())
    cases = {
        "unreadable": rpath.read_text().replace('"pass": true', '"pass": true, "pass": false'),
        "unreadable ": rpath.read_text().replace('"exit_code": 0', '"exit_code": NaN'),
        "invalid": json.dumps({**good, "attempt_id": "0" * 32}),
    }
    for state, text in cases.items():
        rpath.write_text(text)
        assert receipt_state(tmp_path).state == state.strip(), state
        assert classify_instance(tmp_path).status == "infra_failed"


def test_decline_must_match_a_non_success_traj_log(tmp_path: Path) -> None:
    write_agent_phase(tmp_path, status="failed")
    evaluate_once(tmp_path, FIXTURE, IID, CountingChecker())
    assert receipt_state(tmp_path).state == "declined"
    # The traj log now claims success: the recorded decline is no longer proven.
    traj = json.loads((tmp_path / m.TRAJ_LOG).read_text())
    (tmp_path / m.TRAJ_LOG).write_text(json.dumps({**traj, "status": "success"}))
    view = receipt_state(tmp_path)
    assert (view.state, view.reason) == ("invalid", "decline_not_proven")


def test_paid_activity_needs_a_usage_record_with_tokens(tmp_path: Path) -> None:
    evaluated(tmp_path, 0)
    write_events(tmp_path, [{"type": "llm_usage", "prompt_tokens": 0, "completion_tokens": 0}])
    assert classify_instance(tmp_path).details["paid_activity"] == "unknown"
    write_events(tmp_path, [{"type": "llm_usage", "usage": {"prompt_tokens": 12}}])
    assert classify_instance(tmp_path).details["paid_activity"] == "observed"
