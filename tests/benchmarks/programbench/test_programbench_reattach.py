"""Issue 14 point 1: no paid work thrown away. A run killed while its gateway task still
works leaves that task's sandbox running (labelled, ended by its TTL); the resume takes the
same sandbox over and reattaches to the same task (one submission on the server, no
cancel), and the work the task finished after the crash is scored by the official CLI.
When the kept sandbox is gone, the resume cancels the old task before submitting anew."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench.fixture import ensure_fixture
from tests.agents.agents_support import RefServer, start_server
from tests.support.suite import REPO_ROOT, Run, run_pytest, wait_for

TARGET = "benchmarks/programbench"


def oracle_plan(delay_s: float) -> dict[str, Any]:
    """Waits ``delay_s`` (the harness is killed meanwhile), then writes the oracle."""
    files = ensure_fixture().oracle_contents()
    steps: list[dict[str, Any]] = [{"run": "true", "sleep_s": delay_s, "cost_usd": 0.5}]
    steps += [{"write": {"path": rel, "content": data.decode(),
                         "mode": 0o755 if rel.endswith(".sh") else 0o644}}
              for rel, data in sorted(files.items())]
    return {"steps": steps}


def state(server: RefServer) -> dict[str, Any]:
    data: dict[str, Any] = httpx.get(f"{server.url}/api/state", timeout=5,
                                     trust_env=False).json()
    return data


def containers(run_root: Path) -> list[str]:
    found = docker.from_env().containers.list(
        all=True, filters={"label": f"harness.run_root={run_root.absolute()}"})
    return [c.name for c in found]


def killed_run(root: Path, server: RefServer) -> None:
    """Start the gateway run, SIGKILL it once its task is submitted."""
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", TARGET,
           "--run-root", str(root), "--pb-fixtures", "-k", "calculator", "--agent", "gateway",
           "--gateway-url", server.url, "--gateway-poll-sec", "0.2"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_XDIST_WORKER",
                                                            "PYTEST_ADDOPTS")}
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    checkpoint = root / "programbench" / FIXTURE_ID / "task_checkpoint.json"
    try:
        wait_for(checkpoint.is_file, timeout=240, interval=0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def resume(root: Path, parent: Path, server: RefServer) -> Run:
    return run_pytest(TARGET, root, "--pb-fixtures", "-k", "calculator", "--agent", "gateway",
                      "--gateway-url", server.url, "--gateway-poll-sec", "0.2",
                      "--resume-from", str(parent))


@pytest.mark.docker
def test_resume_reattaches_to_the_killed_runs_task_in_its_kept_sandbox(tmp_path: Path) -> None:
    server = start_server(tmp_path / "server", {"default_plan": oracle_plan(8.0),
                                                "docker_user": "agent"})
    try:
        killed_run(tmp_path / "r1", server)
        kept = containers(tmp_path / "r1")
        assert len(kept) == 1, kept  # the task still works in it
        run = resume(tmp_path / "r2", tmp_path / "r1", server)
        after = state(server)
    finally:
        server.stop()
    assert run.rc == 0, run.out
    row = run.latest[FIXTURE_ID]
    assert row["score"] == 1.0 and row["resolved"] is True, row
    assert row["details"]["agent"]["reattach"]["adopted"] is True
    assert row["details"]["engine"]["container"] == kept[0] == row["details"]["agent"]["reattach"]["sandbox"]
    assert row["details"]["agent"]["details"]["reattached"] is True
    assert after["submissions"] == 1 and after["cancels"] == []  # one paid task, not two
    assert row["cost_usd"] == 0.5  # the task's whole cost, paid once
    assert containers(tmp_path / "r1") == [] and containers(tmp_path / "r2") == []


@pytest.mark.docker
def test_resume_without_the_kept_sandbox_cancels_the_old_task_first(tmp_path: Path) -> None:
    # the first task is still running when the resume looks; the fresh one works at once
    server = start_server(tmp_path / "server", {"plans": [oracle_plan(15.0)],
                                                "default_plan": oracle_plan(0.0),
                                                "docker_user": "agent"})
    try:
        killed_run(tmp_path / "r1", server)
        # the operator removes the run's resources by hand
        run_id = docker.from_env().containers.list(filters={
            "label": f"harness.run_root={(tmp_path / 'r1').absolute()}"})[0].labels["harness.run"]
        swept = subprocess.run([sys.executable, "-m", "harness.cli", "sweep", "--run", run_id],
                               cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
        assert swept.returncode == 0, swept.stdout + swept.stderr
        assert containers(tmp_path / "r1") == []
        first_task = next(iter(state(server)["tasks"]))
        run = resume(tmp_path / "r2", tmp_path / "r1", server)
        after = state(server)
    finally:
        server.stop()
    assert run.rc == 0, run.out
    row = run.latest[FIXTURE_ID]
    assert row["score"] == 1.0, row  # the fresh task's work
    assert row["details"]["agent"]["reattach"] == {
        "from": str((tmp_path / "r1" / "programbench" / FIXTURE_ID).resolve()),
        "task_id": first_task, "task_status": "running", "adopted": False,
        "reason": "sandbox_gone", "error": row["details"]["agent"]["reattach"]["error"]}
    orphans = row["details"]["agent"]["details"]["orphan_tasks"]
    assert [(o["task_id"], o["action"]) for o in orphans] == [(first_task, "cancelled")]
    assert after["cancels"] == [first_task] and after["submissions"] == 2
    assert after["tasks"][first_task] == "cancelled"


@pytest.mark.docker
def test_redo_existing_clears_the_checkpoint_cancels_the_old_task_and_solves_anew(
        tmp_path: Path) -> None:
    """Issue 43 (5): ``--pb-redo-existing`` clears the task checkpoint as the specification
    says: no reattach to the kept sandbox, the old task is cancelled, a fresh one solves, and
    the kept sandbox is removed; the ancestor's files stay as they were."""
    server = start_server(tmp_path / "server", {"plans": [oracle_plan(15.0)],
                                                "default_plan": oracle_plan(0.0),
                                                "docker_user": "agent"})
    try:
        killed_run(tmp_path / "r1", server)
        kept = containers(tmp_path / "r1")
        assert len(kept) == 1, kept
        checkpoint = tmp_path / "r1" / "programbench" / FIXTURE_ID / "task_checkpoint.json"
        before = checkpoint.read_bytes()
        first_task = next(iter(state(server)["tasks"]))
        run = run_pytest(TARGET, tmp_path / "r2", "--pb-fixtures", "-k", "calculator",
                         "--agent", "gateway", "--gateway-url", server.url,
                         "--gateway-poll-sec", "0.2", "--resume-from", str(tmp_path / "r1"),
                         "--pb-redo-existing")
        after = state(server)
    finally:
        server.stop()
    assert run.rc == 0, run.out
    row = run.latest[FIXTURE_ID]
    assert row["score"] == 1.0 and "reattach" not in row["details"].get("agent", {}), row
    assert row["details"]["agent"]["redo_existing"] == {"cleared_checkpoints": [str(checkpoint.resolve())],
                                               "kept_sandboxes_removed": kept}
    orphans = row["details"]["agent"]["details"]["orphan_tasks"]
    assert [(o["task_id"], o["action"]) for o in orphans] == [(first_task, "cancelled")]
    assert after["cancels"] == [first_task] and after["submissions"] == 2
    assert checkpoint.read_bytes() == before  # the ancestor's history is kept
    assert containers(tmp_path / "r1") == [] and containers(tmp_path / "r2") == []


# slow tier: end-to-end Docker runs of a minute or more together (CI runs the tier after
# the default one, which stays under its 10 minutes)
pytestmark = pytest.mark.slow
