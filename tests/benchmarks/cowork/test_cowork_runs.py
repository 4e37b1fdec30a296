"""Cowork Bench through the runner: real ``pytest benchmarks/cowork_bench`` sessions in
subprocesses, on the real Docker engine and the real checkers of ``cowork_mini``.

* oracle (copies the groundtruth) under ``-n 2``: the file-only tasks pass, the database
  tasks fail because the checker finds the rows missing; one Postgres sidecar per instance;
  nothing labelled with the run is left; ``harness cowork audit`` reads the run (the
  session's one oracle run: the ``oracle_run`` fixture of ``conftest.py``);
* gateway: the reference agent server replays a scripted plan in the agent container
  (``docker exec``) that writes the rows: the database tasks pass;
* resume after a lost row: the finished eval of the earlier attempt is replayed, the checker
  is never called again (counted by a wrapper plugin around the real checker runner);
* no Docker: option errors, the provenance gate (refusal on disk) and the dry run.
"""

from __future__ import annotations

import gzip
import json
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import docker
import pytest

from benchmarks.cowork_bench import PINNED_COMMIT
from benchmarks.cowork_bench.eval_once import evaluate_once
from harness.sandbox.cleanup import sweep
from tests.benchmarks.cowork.cowork_agent_scripts import SCRIPTS
from tests.benchmarks.cowork.cowork_helpers import FIXTURE, CountingChecker
from tests.benchmarks.cowork.cowork_run_support import (
    DB_TASKS,
    FILE_TASKS,
    TARGET,
    counter_env,
    cowork,
    invocations,
    labelled,
)
from tests.support.suite import REPO_ROOT, run_pytest

STEP_COST = 0.02


# --------------------------------------------------------------------------- Docker


@pytest.mark.docker
def test_oracle_passes_file_tasks_and_fails_db_tasks_for_missing_rows(oracle_run) -> None:  # type: ignore[no-untyped-def]
    run, calls, elapsed = oracle_run
    assert run.rc == 0, run.out  # scored failures are settled, not infrastructure
    rows = run.latest
    assert run.statuses() == {**dict.fromkeys(FILE_TASKS, "passed"),
                              **dict.fromkeys(DB_TASKS, "failed")}  # fmt: skip
    for iid in DB_TASKS:
        row = rows[iid]
        assert row["reason_code"] == "verifier_failed" and row["score"] == 0.0
        assert row["official_eval_status"] == "completed" and row["infra"] is False
        assert "rows missing" in row["details"]["eval"]["checker_output_tail"], row["details"]
        run.result.stdout.fnmatch_lines([f"*checker output of {iid}*"])  # pytest's failure report
    for iid in FILE_TASKS:
        assert rows[iid]["resolved"] is True and rows[iid]["details"]["eval"]["pass"] is True
    run.result.assert_outcomes(passed=2, failed=3)
    assert sorted(calls) == sorted(FILE_TASKS + DB_TASKS)  # one checker run per instance
    # one sidecar and one network per instance, spread over both workers, all removed
    assert {r["worker"] for r in rows.values()} == {"gw0", "gw1"}
    networks = [n for r in rows.values()
                for n in r["details"]["engine"]["cleanup"]["removed_networks"]]
    assert len(set(networks)) == 5
    for iid, row in rows.items():
        cleanup = row["details"]["engine"]["cleanup"]
        assert cleanup["remaining"] == [] and len(cleanup["removed_networks"]) == 1
        assert [c for c in cleanup["removed_containers"] if iid in c], cleanup  # its sidecar
        assert row["details"]["eval"]["timings"]["sidecar_total_s"] > 0
    assert labelled(run.manifest["run_id"]) == []
    cowork = run.manifest["extra"]["cowork"]
    assert cowork["bench"]["kind"] == "embedded" and cowork["bench_gate"]["ok"] is True
    per_instance = sorted(r["duration_s"] for r in rows.values())
    print(f"\noracle -n 2: {elapsed:.1f}s for 5 instances; per instance {per_instance}")


@pytest.mark.docker
def test_audit_cli_reads_the_run(oracle_run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run = oracle_run[0]
    out = tmp_path / "audit.json"
    cmd = [sys.executable, "-m", "harness.cli", "cowork", "audit", str(run.root), "--output"]
    proc = subprocess.run([*cmd, str(out)], capture_output=True, text=True, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "audited 5 task(s): 2 passed, 3 genuine failure(s)" in proc.stdout
    report = json.loads(out.read_text())
    assert report["classifications"]["passed"] == 2
    assert report["classifications"]["genuine_failure"] == 3
    assert report["gaps"] == [] and report["eval_attempts"]["official_projection"] == {
        "evaluated": 5
    }
    again = subprocess.run([*cmd, str(out)], capture_output=True, text=True, cwd=REPO_ROOT)
    assert again.returncode == 2 and "exists" in again.stderr  # never overwritten


@pytest.mark.docker
def test_resume_replays_a_finished_eval_without_calling_the_checker(  # type: ignore[no-untyped-def]
    oracle_run, tmp_path: Path
) -> None:
    first, first_calls, _ = oracle_run
    assert len(first_calls) == 5
    # Re-running the eval phase over the finished run's folders: every claim replays.
    checker = CountingChecker()
    for iid, row in first.latest.items():
        again = evaluate_once(first.root / "cowork_bench" / iid, FIXTURE, iid, checker)
        assert again.kind == "replayed" and again.passed is (row["status"] == "passed")
    assert checker.calls == []
    # A run whose rows of two scored instances were lost after scoring (worker died):
    # the controller wrote infra rows for them, so a resume runs them again.
    ancestor = tmp_path / "ancestor"
    shutil.copytree(first.root, ancestor)
    same_harness_commit(ancestor)  # the shared run may predate a commit made meanwhile
    lost = {"excel-sales-summary": "passed", "email-weekly-report": "failed"}
    with open(ancestor / "result_index.jsonl", "a") as fh:
        for iid in lost:
            row = dict(first.latest[iid], status="infra_failed", outcome="infra_failed",
                       reason_code="worker_crashed", infra=True, score=None, resolved=None,
                       details={}, ts_unix=time.time())  # fmt: skip
            fh.write(json.dumps(row) + "\n")
    log = tmp_path / "checker_calls.log"
    run = run_pytest(TARGET, tmp_path / "resumed", "--cowork-root", str(FIXTURE),
                     "--cowork-allow-dirty-bench", "--agent", "oracle", "-n", "2",
                     "--resume-from", str(ancestor), "-p", "cowork_checker_counter",
                     env=counter_env(tmp_path, log), timeout=600)  # fmt: skip
    assert run.rc == 0, run.out
    assert invocations(log) == []  # the checker never ran again
    rows = run.latest
    for iid, status in lost.items():
        row = rows[iid]
        assert row["status"] == status and row["outcome"] == "scored", row
        recovered = row["details"]["cowork_bench"]["recovered"]
        assert recovered["from_run_root"] == str(ancestor.resolve())
        assert "cleanup" not in row["details"].get("engine", {})  # no container started for it
        old = first.latest[iid]["details"]["cowork_bench"]["official_receipt"]["attempt_id"]
        assert recovered["eval_attempt_id"] == old
    for iid in set(rows) - set(lost):
        assert rows[iid]["status"] == "skipped" and rows[iid]["outcome"] == "carried_forward"
        assert rows[iid]["details"]["run"]["carried_status"] == first.latest[iid]["status"]
    assert labelled(run.manifest["run_id"]) == []
    # the audit of the resumed run covers the whole selection (carried rows from the ancestor)
    out = tmp_path / "audit.json"
    subprocess.run([sys.executable, "-m", "harness.cli", "cowork", "audit", str(run.root),
                    "--output", str(out)], check=True, cwd=REPO_ROOT, capture_output=True)  # fmt: skip
    report = json.loads(out.read_text())
    assert report["classifications"]["passed"] == 2 and report["gaps"] == []
    assert report["classifications"]["genuine_failure"] == 3


def same_harness_commit(root: Path) -> None:
    """Name this checkout's commit in ``root``'s manifest: a resume on another harness
    commit is refused (tests/benchmarks/cowork/test_cowork_resume_compat.py), and a run shared by the
    session's tests may be older than a commit made since."""
    head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    path = root / "run_manifest.json"
    data = json.loads(path.read_text())
    data["source"]["head"] = head
    path.write_text(json.dumps(data))


def start_reference_server(
    tmp: Path, config: dict[str, Any]
) -> tuple[subprocess.Popen[bytes], str]:
    (tmp / "server.json").write_text(json.dumps(config))
    port_file = tmp / "server.port"
    log = open(tmp / "server.log", "wb")  # noqa: SIM115 - the server owns it while it runs
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.agents.reference_server.server", "--port", "0",
         "--config", str(tmp / "server.json"), "--port-file", str(port_file)],
        stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT,
    )  # fmt: skip
    deadline = time.monotonic() + 20
    while not (port_file.exists() and port_file.read_text().strip()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError((tmp / "server.log").read_text())
        time.sleep(0.05)
    return proc, f"http://127.0.0.1:{port_file.read_text().strip()}"


@pytest.mark.docker
def test_gateway_plan_writing_the_rows_passes_the_db_tasks(tmp_path: Path) -> None:
    # One plan for every task: each step acts only in its own task's agent container.
    steps = [
        {"run": f"[ -d /workspace/tasks/finalpool/{iid} ] || exit 0; "
                f"python3 -c {shlex.quote(script)}",
         "cost_usd": STEP_COST, "prompt_tokens": 500, "completion_tokens": 50}
        for iid, script in sorted(SCRIPTS.items())
    ]  # fmt: skip
    proc, url = start_reference_server(tmp_path, {"default_plan": {"steps": steps}})
    try:
        run = cowork(tmp_path / "gw", "-m", "server('emails')", "--agent", "gateway",
                     "--gateway-url", url, "--gateway-poll-sec", "0.2", "-n", "2")  # fmt: skip
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    assert run.rc == 0, run.out
    assert run.statuses() == dict.fromkeys(DB_TASKS, "passed")  # the DB tasks: server emails
    for iid, row in run.latest.items():
        assert row["official_eval_status"] == "completed" and row["resolved"] is True
        assert row["cost_known"] is True and row["cost_usd"] == pytest.approx(
            STEP_COST * len(SCRIPTS)
        )
        assert row["tokens"]["prompt"] == 500 * len(SCRIPTS)
        assert row["details"]["cowork_bench"]["paid_activity"] == "observed"
        body = json.loads((run.root / row["output_paths"]["task_body"]).read_text())
        ref = body["executor_ref"]
        assert ref["type"] == "docker_exec" and ref["workspace_backend_path"].startswith("/")
        assert iid in ref["container_name"]  # the instance's own agent container
        assert body["source"] == "cowork-bench" and "schedule_subagent" in body["disabled_tools"]
    assert run.manifest["extra"]["runtime_attestation"]["ok"] is True
    assert labelled(run.manifest["run_id"]) == []


def gcal_step() -> dict[str, Any]:
    return {"run": f"python3 -c {shlex.quote(SCRIPTS['gcal-standup-week'])}",
            "cost_usd": STEP_COST, "prompt_tokens": 500, "completion_tokens": 50}  # fmt: skip


@pytest.mark.docker
def test_truncated_agent_is_agent_failed_and_the_diagnostic_stays_in_the_audit(
    tmp_path: Path,
) -> None:
    plan = {"steps": [gcal_step()], "status": "completed", "reason_code": "round_limit"}
    proc, url = start_reference_server(tmp_path, {"default_plan": plan})
    try:
        run = cowork(tmp_path / "trunc", "--instance", "gcal-standup-week", "--agent",
                     "gateway", "--gateway-url", url, "--gateway-poll-sec", "0.2",
                     "--cowork-diagnostic-eval-on-truncation")  # fmt: skip
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    assert run.rc == 0, run.out  # an agent failure is settled, not infrastructure
    row = run.latest["gcal-standup-week"]
    assert (row["status"], row["reason_code"]) == ("agent_failed", "round_limit")
    assert row["official_eval_status"] == "declined" and row["score"] is None
    # the rows were written before the stop: the residual check passes, the verdict stays
    assert row["details"]["cowork_bench"]["diagnostic"]["outcome"] == "checks_passed"
    out = tmp_path / "audit.json"
    subprocess.run([sys.executable, "-m", "harness.cli", "cowork", "audit", str(run.root),
                    "--output", str(out)], check=True, cwd=REPO_ROOT, capture_output=True)  # fmt: skip
    task = json.loads(out.read_text())["tasks"][0]
    assert task["classification"] == "genuine_failure"
    assert task["eval_attempt"]["residual_diagnostic"]["outcome"] == "checks_passed"


@pytest.mark.docker
def test_command_agent_runs_in_the_agent_container(tmp_path: Path) -> None:
    command = f"python3 -c {shlex.quote(SCRIPTS['gcal-standup-week'])}"
    run = cowork(tmp_path / "cmd", "--instance", "gcal-standup-week", "--agent", "command",
                 "--agent-command", command)  # fmt: skip
    assert run.rc == 0, run.out
    row = run.latest["gcal-standup-week"]
    assert row["status"] == "passed" and row["details"]["agent"]["kind"] == "command"
    assert "created 3 events" in (run.root / row["output_paths"]["agent_stdout"]).read_text()
    assert labelled(run.manifest["run_id"]) == []


@pytest.mark.docker
def test_keep_sandboxes_leaves_the_sidecar_until_harness_sweep(tmp_path: Path) -> None:
    iid = "excel-sales-summary"
    run = cowork(tmp_path / "keep", "--instance", iid, "--agent", "oracle", "--keep-sandboxes")
    run_id = run.manifest["run_id"]
    try:
        assert run.rc == 0, run.out
        row = run.latest[iid]
        assert row["status"] == "passed" and row["details"]["engine"]["cleanup"] == {"kept": True}
        run.result.stdout.fnmatch_lines([
            f"*--keep-sandboxes: remove this run's sandboxes with: harness sweep --run {run_id}"])
        kept = labelled(run_id)  # the sidecar and the network (agent and eval containers go)
        flt = {"label": [f"harness.run={run_id}", "harness.cowork.role=pg"]}
        pg = docker.from_env().containers.list(all=True, filters=flt)
        assert len(kept) == 2 and [c.name for c in pg] == [kept[0]], kept
        later = cowork(tmp_path / "later", "--dry-run")  # its start-up sweep leaves it alone
        assert later.rc == 0, later.out
        assert labelled(run_id) == kept
        proc = subprocess.run([sys.executable, "-m", "harness.cli", "sweep", "--run", run_id],
                              capture_output=True, text=True, cwd=REPO_ROOT)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert labelled(run_id) == []
    finally:
        sweep(run_id)  # whatever an assertion above left


def bench_checkout(tmp: Path, seed: bytes | None = None) -> Path:
    """A standalone git checkout of the fixture (not at the upstream pin), optionally with
    another seed dump."""
    root = tmp / "bench"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns(".ruff_cache", "__pycache__"))
    if seed is not None:
        (root / "db" / "init.sql.gz").write_bytes(gzip.compress(seed))
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "bench"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    return root


@pytest.mark.docker
def test_a_broken_seed_is_infra_failed_never_scored(tmp_path: Path) -> None:
    root = bench_checkout(tmp_path, seed=b"CREATE TABLE broken (;\n")
    # One attempt: the runner's in-run retry of an infrastructure failure (default 1) would
    # seed the same broken dump in a second sidecar for nothing this test reads (the retry
    # itself is tests/runner/test_retry_infra.py's).
    run = run_pytest(TARGET, tmp_path / "pgfail", "--cowork-root", str(root),
                     "--cowork-allow-bench-commit-mismatch", "--instance", "excel-sales-summary",
                     "--retry-infra", "0", "--agent", "oracle")  # fmt: skip
    assert run.rc == 1, run.out  # an infrastructure failure: the run is not settled
    row = run.latest["excel-sales-summary"]
    assert (row["status"], row["reason_code"], row["infra"]) == ("infra_failed", "pg_fail", True)
    assert row["score"] is None and row["resolved"] is None
    assert "seeding init.sql.gz failed" in row["error"]
    run.result.assert_outcomes(errors=1)  # pytest reports an error, not a fail
    assert labelled(run.manifest["run_id"]) == []


# --------------------------------------------------------------------------- no Docker


def test_the_provenance_gate_refuses_on_disk(tmp_path: Path) -> None:
    root = bench_checkout(tmp_path)
    missing = run_pytest(TARGET, tmp_path / "r0", "--agent", "oracle")
    assert missing.rc == 2, missing.out
    missing.result.stdout.fnmatch_lines(["*--cowork-root PATH is required: *"])
    (root / "notes.txt").write_text("local edit\n")
    dirty = run_pytest(TARGET, tmp_path / "r1", "--cowork-root", str(root), "--agent", "oracle")
    assert dirty.rc == 2, dirty.out
    assert dirty.manifest["refusal"]["reason"] == "bench_dirty"
    dirty.result.stdout.fnmatch_lines([
        "*--cowork-root * has 1 uncommitted change(s) (first: *notes.txt); clean it"
        " (git stash / git clean) or pass --cowork-allow-dirty-bench*"])
    record = dirty.manifest["extra"]["cowork"]
    assert record["bench"]["dirty"] is True and record["bench_gate"]["ok"] is False
    (root / "notes.txt").unlink()
    other = run_pytest(TARGET, tmp_path / "r2", "--cowork-root", str(root), "--agent", "oracle")
    assert other.rc == 2 and other.manifest["refusal"]["reason"] == "bench_mismatch"
    other.result.stdout.fnmatch_lines([
        f"*--cowork-root * is at * but the pinned commit is {PINNED_COMMIT}; run `git -C *"
        f" checkout {PINNED_COMMIT}` or pass --cowork-allow-bench-commit-mismatch*"])
    allowed = run_pytest(TARGET, tmp_path / "r3", "--cowork-root", str(root),
                         "--cowork-allow-bench-commit-mismatch", "--dry-run")  # fmt: skip
    assert allowed.rc == 0, allowed.out
    gate = allowed.manifest["extra"]["cowork"]["bench_gate"]
    assert gate["ok"] is True and gate["allow_bench_commit_mismatch"] is True


def test_dry_run_writes_task_bodies_and_selects_by_server(tmp_path: Path) -> None:
    run = cowork(tmp_path / "dry", "--dry-run")
    assert run.rc == 0, run.out
    assert run.manifest["outcome"] == "dry_run" and run.manifest["selection"]["count"] == 5
    assert set(run.statuses().values()) == {"skipped"}
    body = json.loads((run.root / run.latest["gcal-standup-week"]["output_paths"]["task_body"])
                      .read_text())  # fmt: skip
    assert body["executor_ref"]["type"] == "docker_exec"
    assert body["timeout_sec"] == 1800 - 105 and body["metadata"]["max_steps"] == 100
    assert "Daily standup" in body["description"] and "!!<<<<" not in body["description"]
    assert not list(run.root.glob("cowork_bench/*/traj_log.json"))  # nothing ran
    emails = cowork(tmp_path / "emails", "--dry-run", "-m", "server('emails')")
    assert emails.rc == 0 and sorted(emails.latest) == sorted(
        ["email-reply-invoice", "email-weekly-report", "gcal-standup-week"]
    )


# slow tier: end-to-end Docker runs of a minute or more together (CI runs the tier after
# the default one, which stays under its 10 minutes)
pytestmark = pytest.mark.slow


@pytest.mark.docker
def test_a_provision_past_its_deadline_is_infrastructure_naming_the_phase(
        tmp_path: Path) -> None:
    """Issue 45: the sidecar's start (network, PostgreSQL, seed) under a deadline shorter
    than it takes on this engine: the instance is ``phase_timeout: provision``, the
    sidecar and network are removed, the deadlines are on record."""
    run = run_pytest(TARGET, tmp_path / "deadline", "--cowork-root", str(FIXTURE),
                     "--instance", "email-reply-invoice", "--agent", "oracle",
                     "--retry-infra", "0", "--phase-timeout", "provision=0.5")  # fmt: skip
    row = run.latest["email-reply-invoice"]
    assert (row["outcome"], row["reason_code"]) == ("infra_failed", "phase_timeout"), row
    assert "phase_timeout: provision (past its deadline of 0.5 s" in row["error"]
    assert run.manifest["extra"]["phase_deadlines"]["provision"] == 0.5
    assert labelled(run.manifest["run_id"]) == []


@pytest.mark.docker
def test_an_mcp_server_that_never_listens_ends_at_the_provision_deadline(
        tmp_path: Path) -> None:
    """Issue 45: a task's MCP server that starts and never answers (a real process in the
    agent container, ``sleep``) holds the provision phase until its deadline, far before
    the server's own 60 s handshake bound: ``phase_timeout: provision``, nothing left."""
    root = bench_checkout(tmp_path)
    yaml_path = root / "configs" / "mcp_servers" / "emails.yaml"
    yaml_path.write_text("type: stdio\nname: emails\nparams:\n  command: sleep\n"
                         "  args:\n    - \"3600\"\nclient_session_timeout_seconds: 60\n")
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "commit", "-qam", "a server that never listens"], check=True,
                   capture_output=True)
    started = time.monotonic()
    run = run_pytest(TARGET, tmp_path / "never", "--cowork-root", str(root),
                     "--cowork-allow-bench-commit-mismatch", "--instance", "email-reply-invoice",
                     "--agent", "oracle", "--retry-infra", "0",
                     "--phase-timeout", "provision=8")  # fmt: skip
    took = time.monotonic() - started
    row = run.latest["email-reply-invoice"]
    assert (row["outcome"], row["reason_code"]) == ("infra_failed", "phase_timeout"), row
    assert "phase_timeout: provision (past its deadline of 8 s" in row["error"]
    assert took < 60, took  # the deadline, not the server's own bound (2 x 60 s)
    assert labelled(run.manifest["run_id"]) == []
