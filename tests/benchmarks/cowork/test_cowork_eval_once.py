"""Eval phase at most once: claim, receipt, replay, unfinished claim, binding mismatch."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from benchmarks.cowork_bench import models as m
from benchmarks.cowork_bench.eval_once import (
    CheckerRequest,
    CheckerRun,
    evaluate_once,
    publish_exclusive,
    read_claim,
)
from tests.benchmarks.cowork.cowork_helpers import FIXTURE, CountingChecker, write_agent_phase

IID = "excel-sales-summary"


def test_first_entry_claims_runs_once_and_writes_receipt(tmp_path: Path) -> None:
    write_agent_phase(tmp_path)
    checker = CountingChecker(exit_code=0)
    out = evaluate_once(tmp_path, FIXTURE, IID, checker)
    assert out.kind == "evaluated" and out.passed is True
    assert len(checker.calls) == 1
    req = checker.calls[0]
    assert req.launch_time == "2026-03-01 10:00:00"  # weekday stripped like upstream
    assert req.module == f"tasks.finalpool.{IID}.evaluation.main"
    claim = read_claim(tmp_path)
    assert claim is not None and claim.attempt_id == out.attempt_id and len(claim.attempt_id) == 32
    assert set(claim.bindings) == {
        "traj_log",
        "task_config",
        "evaluator",
        "groundtruth",
        "workspace",
    }
    assert claim.bindings["evaluator"].kind == "tree" and claim.bindings["evaluator"].sha256
    receipt = json.loads((tmp_path / m.receipt_name(claim.attempt_id)).read_text())
    assert receipt["pass"] is True and receipt["exit_code"] == 0 and receipt["checker_ran"]
    assert json.loads((tmp_path / m.EVAL_RES).read_text())["pass"] is True
    # the checker's --res_log_file went to a scratch file: traj_log.json is intact
    assert m.TrajLog.model_validate_json((tmp_path / m.TRAJ_LOG).read_text()).status == "success"


def test_reentry_replays_the_receipt_without_calling_the_checker(tmp_path: Path) -> None:
    write_agent_phase(tmp_path)
    checker = CountingChecker(exit_code=1, stdout="  [FAIL] totals\n")
    first = evaluate_once(tmp_path, FIXTURE, IID, checker)
    again = evaluate_once(tmp_path, FIXTURE, IID, checker)
    assert first.kind == "evaluated" and first.passed is False
    assert again.kind == "replayed" and again.passed is False
    assert again.attempt_id == first.attempt_id
    assert len(checker.calls) == 1


def test_claim_without_receipt_is_unfinished_and_never_reruns(tmp_path: Path) -> None:
    write_agent_phase(tmp_path)

    class Crash(BaseException):
        pass

    def dies(req: CheckerRequest) -> CheckerRun:
        raise Crash  # the process "dies" mid-checker: no receipt is written

    with contextlib.suppress(Crash):
        evaluate_once(tmp_path, FIXTURE, IID, dies)
    checker = CountingChecker()
    out = evaluate_once(tmp_path, FIXTURE, IID, checker)
    assert out.kind == "unfinished_claim" and out.receipt is None
    assert checker.calls == []


def test_changed_inputs_are_a_binding_mismatch(tmp_path: Path) -> None:
    write_agent_phase(tmp_path)
    checker = CountingChecker()
    evaluate_once(tmp_path, FIXTURE, IID, checker)
    (tmp_path / m.WORKSPACE_DIR / "out.txt").write_text("tampered")
    out = evaluate_once(tmp_path, FIXTURE, IID, checker)
    assert out.kind == "binding_mismatch" and out.mismatched == ["workspace"]
    assert len(checker.calls) == 1


def test_status_gate_declines_without_running_the_checker(tmp_path: Path) -> None:
    write_agent_phase(tmp_path, status="max_turns_reached", reason="round_limit")
    checker = CountingChecker()
    out = evaluate_once(tmp_path, FIXTURE, IID, checker)
    assert out.kind == "declined" and out.passed is None and checker.calls == []
    text = "Task status: max_turns_reached, only SUCCESS counts as pass; pass is null"
    assert out.receipt is not None and out.receipt.details == text
    assert json.loads((tmp_path / m.EVAL_RES).read_text()) == {"pass": None, "details": text}


def test_runner_failure_is_recorded_and_spends_the_attempt(tmp_path: Path) -> None:
    write_agent_phase(tmp_path)

    def broken(req: CheckerRequest) -> CheckerRun:
        raise RuntimeError("eval container did not start")

    out = evaluate_once(tmp_path, FIXTURE, IID, broken)
    assert out.kind == "error" and out.receipt is not None
    assert "eval container did not start" in (out.receipt.raised or "")
    checker = CountingChecker()
    assert evaluate_once(tmp_path, FIXTURE, IID, checker).kind == "replayed"
    assert checker.calls == []


def test_prior_eval_result_without_claim_is_kept_and_not_run(tmp_path: Path) -> None:
    write_agent_phase(tmp_path)
    (tmp_path / m.EVAL_RES).write_text('{"pass": true}')
    checker = CountingChecker()
    out = evaluate_once(tmp_path, FIXTURE, IID, checker)
    assert out.kind == "unclaimed_prior_result" and checker.calls == []
    assert (tmp_path / m.EVAL_RES).read_text() == '{"pass": true}'


def test_concurrent_entries_run_the_checker_once(tmp_path: Path) -> None:
    write_agent_phase(tmp_path)
    gate = threading.Barrier(4)
    checker = CountingChecker()
    kinds: list[str] = []

    def enter() -> None:
        gate.wait()
        kinds.append(evaluate_once(tmp_path, FIXTURE, IID, checker).kind)

    threads = [threading.Thread(target=enter) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(checker.calls) == 1
    assert kinds.count("evaluated") == 1
    assert set(kinds) <= {"evaluated", "unfinished_claim", "replayed"}


def test_publish_exclusive_never_overwrites(tmp_path: Path) -> None:
    write_agent_phase(tmp_path)
    evaluate_once(tmp_path, FIXTURE, IID, CountingChecker())
    claim = read_claim(tmp_path)
    assert claim is not None
    before = (tmp_path / m.EVAL_CLAIM).read_bytes()
    assert publish_exclusive(tmp_path / m.EVAL_CLAIM, claim.model_copy(update={"pid": 1})) is False
    assert (tmp_path / m.EVAL_CLAIM).read_bytes() == before
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def host_checker(req: CheckerRequest) -> CheckerRun:
    """The real fixture checker, run on the host from the fixture root (no database)."""
    res_log = Path(req.scratch_dir) / "res_log.json"
    gt = FIXTURE / "tasks" / "finalpool" / req.instance_id / "groundtruth_workspace"
    proc = subprocess.run(
        [sys.executable, "-m", req.module, "--res_log_file", str(res_log),
         "--agent_workspace", req.workspace, "--groundtruth_workspace", str(gt),
         "--launch_time", req.launch_time],
        cwd=FIXTURE, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "TZ": "UTC"},
    )  # fmt: skip
    return CheckerRun(exit_code=proc.returncode, stdout=proc.stdout, stderr=proc.stderr,
                      res_log_path=str(res_log) if res_log.exists() else None)  # fmt: skip


def test_real_checker_overwrites_only_the_scratch_res_log(tmp_path: Path) -> None:
    write_agent_phase(tmp_path, workspace={})
    gt = FIXTURE / "tasks" / "finalpool" / IID / "groundtruth_workspace" / "Sales_Summary.xlsx"
    (tmp_path / m.WORKSPACE_DIR / "Sales_Summary.xlsx").write_bytes(gt.read_bytes())
    traj_before = (tmp_path / m.TRAJ_LOG).read_bytes()
    out = evaluate_once(tmp_path, FIXTURE, IID, host_checker)
    assert out.kind == "evaluated" and out.passed is True, out.receipt
    assert (tmp_path / m.TRAJ_LOG).read_bytes() == traj_before
    assert out.receipt is not None and out.receipt.res_log is not None
    res_log = json.loads(Path(out.receipt.res_log.path).read_text())
    assert res_log == {"total_passed": 6, "total_checks": 6, "accuracy": 100.0}
