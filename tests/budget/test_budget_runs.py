"""Campaign budgets through real pytest runs of the selftest benchmark.

These are the issue's end-to-end figures: concurrent runs sharing one campaign file never
cross the ceiling, meter faults stop a run with exit 3, and custody survives a SIGKILL.
"""

from __future__ import annotations

import glob
import json
import os
import random
import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.suite import Run, Suite, finish, pytest_result, run_cli, wait_for

PROCESSES = 8
INSTANCES = 50


def test_eight_concurrent_runs_never_cross_the_ceiling(tmp_path: Path) -> None:
    rng = random.Random(7)
    campaign = tmp_path / "campaign.json"
    ceiling = 120.0
    procs = []
    suites = []
    for p in range(PROCESSES):
        (tmp_path / f"proc{p}").mkdir()
        suite = Suite(tmp_path / f"proc{p}")
        tasks = [{"id": f"p{p}-t{i:02d}", "work": "succeed",
                  "cost": rng.randint(1, 64) / 32} for i in range(INSTANCES)]
        suite.tasks(tasks)
        # Eight processes reserving on one campaign file at once. (The xdist variant, two
        # workers a run, costs twice the time on two cores and adds no kind of writer: a
        # worker reserves exactly as a single process does; tests/budget/test_budget_stress.py
        # races worker-style writers in processes of their own.)
        proc, root = suite.start("--campaign-file", str(campaign),
                                 "--campaign-budget-usd", str(ceiling),
                                 "--per-task-reserve-usd", "2.0", "--no-report",
                                 "--unknown-cost-allowance-usd", "2.0",
                                 "--harness-progress", "off")
        procs.append((proc, root))
        suites.append(suite)
    outs = [finish(proc, timeout=600) for proc, _ in procs]
    state = json.loads(campaign.read_text())
    settled = 0.0
    total_rows = 0
    for (proc, root), out in zip(procs, outs, strict=True):
        assert proc.returncode in (0, 3), out
        rows = Run.of(root).rows
        ids = [r["instance_id"] for r in rows]
        assert len(ids) == len(set(ids)) == INSTANCES, out  # exactly one row each
        total_rows += len(rows)
        settled += sum(r["cost_usd"] or 0.0 for r in rows if r["status"] == "completed")
        blocked = [r for r in rows if r["status"] == "blocked"]
        assert all(r["reason_code"] == "campaign_budget" for r in blocked)
    assert total_rows == PROCESSES * INSTANCES
    assert settled <= ceiling
    assert abs(state["spent_usd"] - settled) < 1e-9
    assert state["active_runs"] == {}
    assert settled > ceiling - 2.0 * 2 * PROCESSES, "the ceiling must bind"
    assert any(p.returncode == 3 for p, _ in procs), "some run must have been stopped"


def fault_run(suite: Suite, tmp_path: Path, meter_file: Path, *extra: str):
    suite.tasks([{"id": "m", "work": "sleep", "seconds": 1.0, "cost": 0.1, "count": 20}])
    return suite.start("--campaign-file", str(tmp_path / "c.json"),
                       "--campaign-budget-usd", "100", "--per-task-reserve-usd", "1",
                       "--meter", f"fake-file:{meter_file}", "--meter-poll-sec", "0.2",
                       "--meter-read-timeout-sec", "0.2", "--meter-blindness-sec", "0.8",
                       "--no-report", *extra)


def check_stopped(root: Path, out: str, reason: str, code: int) -> None:
    assert code == 3, out
    manifest = json.loads((root / "run_manifest.json").read_text())
    assert manifest["outcome"] == "stopped" and manifest["exit_code"] == 3
    assert manifest["stop_reason"] == reason
    monitor = json.loads((root / "monitor.json").read_text())
    assert monitor["finished"] is True and monitor["stop_reason"] == reason
    progress = monitor["progress"]  # issue 43 (7): the budget's monitor shows progress too
    assert progress["selected"] == 20 and progress["done"] + progress["running"] + progress[
        "left"] == 20, progress
    rows = Run.of(root).rows
    assert len({r["instance_id"] for r in rows}) == 20


@pytest.mark.parametrize("fault", ["goes_down", "nan", "silent"])
def test_meter_faults_stop_the_run(tmp_path: Path, fault: str) -> None:
    meter = tmp_path / "usage.json"
    meter.write_text(json.dumps({"usage": 10.0}))
    (tmp_path / "s").mkdir()
    suite = Suite(tmp_path / "s")
    proc, root = fault_run(suite, tmp_path, meter)
    wait_for(lambda: (root / "selftest_executions.log").exists())
    if fault == "goes_down":
        meter.write_text(json.dumps({"usage": 5.0}))
    elif fault == "nan":
        meter.write_text('{"usage": NaN}')
    else:
        meter.unlink()  # every read now fails: no accepted reading renews the window
    out = finish(proc)
    check_stopped(root, out, "budget_meter_unavailable", proc.returncode)


def test_failing_campaign_save_stops_the_run(tmp_path: Path) -> None:
    meter = tmp_path / "usage.json"
    meter.write_text(json.dumps({"usage": 10.0}))
    (tmp_path / "s").mkdir()
    suite = Suite(tmp_path / "s")
    proc, root = fault_run(suite, tmp_path, meter)
    wait_for(lambda: (root / "selftest_executions.log").exists())
    campaign = tmp_path / "c.json"
    subprocess.run(["chattr", "+i", str(campaign)], check=True)  # even root cannot replace it
    try:
        meter.write_text(json.dumps({"usage": 11.0}))  # a new reading must be saved
        out = finish(proc)
    finally:
        subprocess.run(["chattr", "-i", str(campaign)], check=True)
    assert proc.returncode == 3, out
    manifest = json.loads((root / "run_manifest.json").read_text())
    assert manifest["stop_reason"] == "campaign_persistence_failed"
    monitor = json.loads((root / "monitor.json").read_text())
    assert monitor["stop_reason"] == "campaign_persistence_failed"


@pytest.mark.docker
def test_sigkilled_run_keeps_custody_until_reconciled(tmp_path: Path) -> None:
    campaign = tmp_path / "c.json"
    (tmp_path / "s").mkdir()
    suite = Suite(tmp_path / "s")
    suite.tasks([{"id": "k", "work": "sleep", "seconds": 30, "cost": 1, "count": 2}])
    args = ("--campaign-file", str(campaign), "--campaign-budget-usd", "50",
            "--per-task-reserve-usd", "1", "--unknown-cost-allowance-usd", "1", "--no-report")
    proc, root = suite.start(*args)
    wait_for(lambda: (root / "selftest_executions.log").exists())
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    suite.tasks([{"id": "k", "work": "succeed", "cost": 1, "count": 2}])
    refused = suite.run(*args)
    assert refused.rc == 2, refused.out
    assert refused.manifest["refusal"]["reason"] == "campaign_stale_run"
    assert Run.of(root).manifest["run_id"] in refused.manifest["refusal"]["message"]
    reconcile = run_cli("campaign", "reconcile", str(campaign), "--run", str(root),
                        "--reading", "0")
    assert reconcile.returncode == 0, reconcile.stdout + reconcile.stderr
    proceeds = suite.run(*args)
    assert proceeds.rc == 0, proceeds.out
    assert {r["status"] for r in proceeds.rows} == {"completed"}


def test_issue23_item2_the_resume_of_a_killed_run_is_admitted_and_charges_once(
    tmp_path: Path,
) -> None:
    """Before: every run after the SIGKILL, the resume included, was refused
    (``campaign_stale_run``) until a reconcile. The resume of that very run takes its
    custody over. The selftest agent cannot reattach, so the dead attempt of the instance
    in flight is charged as unknown cost (its hold: $3) besides the new attempts' reported
    costs (before, its hold was folded into the new reservation and its spend was lost)."""
    campaign = tmp_path / "c.json"
    (tmp_path / "s").mkdir()
    suite = Suite(tmp_path / "s")
    suite.tasks([{"id": "k", "work": "sleep", "seconds": 30, "cost": 1, "count": 2}])
    args = ("--campaign-file", str(campaign), "--campaign-budget-usd", "50",
            "--per-task-reserve-usd", "3", "--unknown-cost-allowance-usd", "3", "--no-report")
    proc, root = suite.start(*args)
    wait_for(lambda: (root / "selftest_executions.log").exists())
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    killed_id = Run.of(root).manifest["run_id"]
    killed = json.loads(campaign.read_text())["active_runs"][killed_id]
    in_flight = len(killed["reservations"])
    assert in_flight >= 1 and not killed["settled"]
    suite.tasks([{"id": "k", "work": "succeed", "cost": 1, "count": 2}])
    resumed = suite.run(*args, "--resume-from", str(root))
    assert resumed.rc == 0, resumed.out
    state = json.loads(campaign.read_text())
    assert state["active_runs"] == {}
    taken = next(r for r in state["runs"] if r["run_id"] == killed_id)
    assert taken["outcome"] == "taken_over"
    assert taken["taken_over_by"] == resumed.manifest["run_id"]
    # the two new attempts ($1 each) and each dead one, at its hold ($3)
    assert state["spent_usd"] == 2.0 + 3.0 * in_flight and state["outstanding_usd"] == 0.0
    earlier = {r["instance_id"]: r["details"].get("budget", {}).get("earlier_attempts_usd")
               for r in resumed.rows}
    assert sorted(v for v in earlier.values() if v) == [3.0] * in_flight, earlier


def test_a_zero_unknown_cost_allowance_without_a_meter_refuses_the_run(tmp_path: Path) -> None:
    """``--unknown-cost-allowance-usd 0`` would charge an unknown cost $0: exit 2, one line
    naming the option and the fix, nothing run."""
    (tmp_path / "s").mkdir()
    suite = Suite(tmp_path / "s")
    suite.tasks([{"id": "z", "work": "succeed", "cost": 1}])
    refused = suite.run("--budget-usd", "10", "--unknown-cost-allowance-usd", "0", "--no-report")
    assert refused.rc == 2, refused.out
    refusal = refused.manifest["refusal"]
    assert refusal["reason"] == "campaign_unmetered" and "\n" not in refusal["message"]
    assert "--unknown-cost-allowance-usd 0" in refusal["message"]
    refused.result.stdout.fnmatch_lines(["*" + glob.escape(refusal["message"])])
    assert refused.rows == []


def test_dry_run_never_creates_or_changes_a_campaign(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    suite = Suite(tmp_path / "s")
    suite.tasks([{"id": "d", "work": "succeed", "cost": 1, "count": 2}])
    campaign = tmp_path / "campaign.json"
    budget = ("--campaign-file", str(campaign), "--campaign-budget-usd", "50",
              "--budget-usd", "10", "--budget-reserve-usd", "5",
              "--unknown-cost-allowance-usd", "1", "--no-report")
    dry = suite.run("--dry-run", *budget)
    assert dry.rc == 0, dry.out
    assert not campaign.exists() and not Path(f"{campaign}.lock").exists()
    paid = suite.run(*budget)
    assert paid.rc == 0, paid.out
    before = campaign.read_bytes()
    again = suite.run("--dry-run", *budget)
    assert again.rc == 0, again.out
    assert campaign.read_bytes() == before
    assert not (again.root / "monitor.json").exists()


def test_failed_ledger_writes_do_not_stop_valid_work(tmp_path: Path) -> None:
    """The run-root ledger cannot be appended to (immutable): every row is reported as
    ``diagnostic_write_failed`` and kept in memory, and every instance still runs."""
    (tmp_path / "s").mkdir()
    suite = Suite(tmp_path / "s")
    # The first instance leaves time to make the ledger immutable before its row is due.
    suite.tasks([{"id": "a", "work": "sleep", "seconds": 1.0, "cost": 0.1},
                 {"id": "b", "work": "sleep", "seconds": 0.1, "cost": 0.1, "count": 2}])
    proc, root = suite.start("--campaign-file", str(tmp_path / "c.json"),
                             "--campaign-budget-usd", "10", "--no-report",
                             "--unknown-cost-allowance-usd", "1")
    ledger = root / "result_index.jsonl"
    wait_for(ledger.exists)
    subprocess.run(["chattr", "+i", str(ledger)], check=True)
    try:
        out = finish(proc)
    finally:
        subprocess.run(["chattr", "-i", str(ledger)], check=True)
    pytest_result(proc.returncode, out).stdout.fnmatch_lines(["harness: diagnostic_write_failed: *"])
    assert len(Run.of(root).executions()) == 3, out
    manifest = json.loads((root / "run_manifest.json").read_text())
    assert manifest["counts"] == {"completed": 3}, out
    assert manifest["extra"]["diagnostic_write_failed"]["ledger_rows_unwritten"] == 3
    assert ledger.read_text() == ""
