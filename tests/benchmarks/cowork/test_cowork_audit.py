"""``harness cowork audit``: classification of the selection, manual-review flags, cost."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.cowork_bench.audit import audit_command, build_report
from benchmarks.cowork_bench.eval_once import evaluate_once
from harness.core.fsutil import atomic_write_json
from tests.benchmarks.cowork.cowork_helpers import (
    FIXTURE,
    CountingChecker,
    ledger_row,
    run_manifest,
    write_agent_phase,
    write_events,
)

row = ledger_row


def make_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    ids = ["excel-sales-summary", "gcal-standup-week", "sklad-reorder-excel", "email-reply-invoice"]
    atomic_write_json(run / "run_manifest.json", run_manifest(run, "r1", ids))
    base = run / "cowork_bench"
    # passed, with a clean agent log and complete cost
    sales = base / "excel-sales-summary"
    write_agent_phase(sales)
    evaluate_once(sales, FIXTURE, "excel-sales-summary", CountingChecker(0))
    write_events(sales, [{"type": "llm_usage", "model": "m1", "prompt_tokens": 100,
                          "completion_tokens": 20, "cost_usd": 0.25}])  # fmt: skip
    write_events(sales, [{"type": "tool_call", "tool": "excel_write", "arguments": {"path": "a"}}],
                 name="tools.jsonl")  # fmt: skip
    # failed, and its agent peeked at the answers and ran psql
    gcal = base / "gcal-standup-week"
    write_agent_phase(gcal, iid="gcal-standup-week")
    evaluate_once(gcal, FIXTURE, "gcal-standup-week", CountingChecker(1))
    write_events(gcal, [
        {"type": "tool_call", "tool": "terminal", "arguments": {"cmd": "ls"}},
        {"type": "tool_call", "tool": "filesystem_read",
         "arguments": {"path": "/workspace/tasks/finalpool/x/groundtruth_workspace/a.xlsx"}},
        {"type": "tool_call", "tool": "terminal",
         "arguments": {"cmd": "psql -c 'insert into gcal.events ...'"}},
        {"type": "llm_usage", "model": "m1", "prompt_tokens": 50},  # no cost: incomplete
    ], name="tools.jsonl")  # fmt: skip
    # infra: pg_fail row; no instance folder for the last selected task
    (run / "result_index.jsonl").write_text(
        "\n".join([
            row("excel-sales-summary", "infra_failed", "pg_fail"),  # superseded below
            row("excel-sales-summary", "passed", "passed"),
            row("gcal-standup-week", "failed", "verifier_failed"),
            row("sklad-reorder-excel", "infra_failed", "pg_fail"),
        ]) + '\n{"benchmark": "cowork_bench", "instance_id": "email-rep'  # torn last line
    )  # fmt: skip
    return run


def test_report_classifies_the_selection_and_flags_for_review(tmp_path: Path) -> None:
    report = build_report(make_run(tmp_path))
    assert report.task_count == 4
    assert report.classifications == {"passed": 1, "genuine_failure": 1, "infrastructure": 1,
                                      "not_attempted": 0, "unknown": 1}  # fmt: skip
    tasks = {t.instance_id: t for t in report.tasks}
    assert tasks["excel-sales-summary"].ledger_status == "passed"  # last row wins
    assert tasks["email-reply-invoice"].ledger_status is None  # torn line skipped
    assert "no_ledger_row" in tasks["email-reply-invoice"].gaps
    assert report.manual_review_tasks == ["gcal-standup-week"]
    flags = [(f.source, f.line, f.reason) for f in tasks["gcal-standup-week"].manual_review]
    assert flags == [
        ("agent/tools.jsonl", 2, "answer_source_or_evaluator_reference"),
        ("agent/tools.jsonl", 3, "possible_direct_postgres_access"),
    ]
    # findings carry coordinates only, never the matched text
    dumped = report.model_dump_json()
    assert "a.xlsx" not in dumped and "insert into" not in dumped
    sales = tasks["excel-sales-summary"]
    assert sales.official_pass is True and sales.official_receipt.available
    assert sales.cost.complete and sales.cost.total_usd == 0.25 and sales.models == ["m1"]
    assert (
        sales.model_activity_observed
        and sales.eval_attempt["official"]["projection"] == "evaluated"
    )
    assert tasks["gcal-standup-week"].cost.complete is False
    assert report.cost == {"known_usd": 0.25, "total_usd": None, "complete": False}


def test_audit_command_writes_once_and_never_overwrites(tmp_path: Path, capsys) -> None:
    run = make_run(tmp_path)
    out = tmp_path / "audit.json"
    assert audit_command([str(run), "--output", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["schema"] == "harness.cowork.audit.v1" and data["task_count"] == 4
    assert "1 for manual review" in capsys.readouterr().out
    before = out.read_bytes()
    assert audit_command([str(run), "--output", str(out)]) == 2
    assert "exists" in capsys.readouterr().err
    assert out.read_bytes() == before


def test_audit_never_changes_the_verdict_files(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    files = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    build_report(run)
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == files


def test_audit_refuses_a_directory_without_manifest(tmp_path: Path, capsys) -> None:
    assert audit_command([str(tmp_path), "--output", str(tmp_path / "a.json")]) == 2
    assert "run_manifest.json" in capsys.readouterr().err


def test_audit_refuses_a_corrupt_ledger_or_manifest_in_one_line(tmp_path: Path, capsys) -> None:
    run = make_run(tmp_path)
    ledger = run / "result_index.jsonl"
    ledger.write_text("not json\n" + ledger.read_text())
    assert audit_command([str(run), "--output", str(tmp_path / "a.json")]) == 2
    err = capsys.readouterr().err
    assert "line 1 is corrupt" in err and len(err.strip().splitlines()) == 1
    (run / "run_manifest.json").write_text('{"run_id": "r1"}')
    assert audit_command([str(run), "--output", str(tmp_path / "a.json")]) == 2
    err = capsys.readouterr().err
    assert "run_manifest.json is corrupt" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "a.json").exists()


def test_a_carried_row_is_audited_from_the_ancestor_folder(tmp_path: Path) -> None:
    ancestor = make_run(tmp_path)
    resumed = tmp_path / "resumed"
    iid = "excel-sales-summary"
    resume = {"ancestors": [str(ancestor)], "ancestor_run_ids": ["r1"], "generation": 1}
    atomic_write_json(resumed / "run_manifest.json",
                      run_manifest(resumed, "r2", [iid], resume=resume))  # fmt: skip
    (resumed / "result_index.jsonl").write_text(
        ledger_row(iid, "skipped", "carried", "r2", carried_from="r1",
                   details={"carried_status": "passed"}) + "\n"
    )  # fmt: skip
    report = build_report(resumed)
    (task,) = report.tasks
    assert (task.carried_from, task.ledger_status) == ("r1", "passed")
    assert task.classification == "passed"
    assert task.evidence_dir == str(ancestor / "cowork_bench" / iid) and report.gaps == []
