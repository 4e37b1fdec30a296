"""Scenario (issue 23 item 3): a Cowork gateway run killed mid-task, then resumed.

The agent server is the reference agent server (``python -m harness.agents.reference_server.server``,
a real HTTP server on 127.0.0.1); its scripted plan reports model usage, then thinks for a
while (a server-side sleep), then writes the task's rows in the agent container. The first
run is SIGKILLed (its whole process group) once the task's ``llm_usage`` event was copied
into ``runner_agent/``. The resume must find that task through the ancestor's
``runner_agent/task_checkpoint.json``, cancel it and wait until it settled before it submits
its own (never two live tasks for the instance), and record what the killed task spent
(``paid_activity`` from its copied events, its settled cost). The resumed task is scored by
the real checker of ``cowork_mini``. Nothing is lost, nothing runs twice, money is exact.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.sandbox.cleanup import sweep
from tests.agents.agents_support import RefServer, start_server
from tests.benchmarks.cowork.cowork_agent_scripts import SCRIPTS
from tests.benchmarks.cowork.cowork_helpers import FIXTURE
from tests.support.suite import REPO_ROOT, run_pytest, wait_for

# slow tier: a minute or more each on this engine (CI runs it after the default tier)
pytestmark = [pytest.mark.docker, pytest.mark.slow]

TARGET = "benchmarks/cowork_bench"
IID = "gcal-standup-week"
THINK_S = 60.0  # the first task is still thinking when the resume cancels it (slow hosts too)
USAGE = {"cost_usd": 0.05, "prompt_tokens": 300, "completion_tokens": 30}
WRITE = {"cost_usd": 0.02, "prompt_tokens": 200, "completion_tokens": 20}


def plan(think_s: float) -> dict[str, Any]:
    return {"steps": [{"run": "true", **USAGE},
                      {"sleep_s": think_s, "run": f"python3 -c {shlex.quote(SCRIPTS[IID])}",
                       **WRITE}]}


def args(root: Path, server: RefServer) -> list[str]:
    return ["--run-root", str(root), "--cowork-root", str(FIXTURE), "--cowork-allow-dirty-bench",
            "--instance", IID, "--agent", "gateway", "--gateway-url", server.url,
            "--gateway-poll-sec", "0.2"]


def killed_run(root: Path, server: RefServer, argv: list[str] | None = None,
               also: Callable[[], bool] = lambda: True) -> None:
    """Start the run (``argv``: its options, default :func:`args`); SIGKILL its process
    group once the task's spend was copied (and ``also`` holds)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_XDIST_WORKER",
                                                            "PYTEST_ADDOPTS")}
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", TARGET,
           *(args(root, server) if argv is None else argv)]
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    events = root / "cowork_bench" / IID / "runner_agent" / "gateway_events.jsonl"
    try:
        wait_for(lambda: events.is_file() and "llm_usage" in events.read_text() and also(),
                 timeout=240, interval=0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def harness_head() -> str:
    done = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True)
    return done.stdout.strip()


def same_harness_commit(root: Path) -> None:
    """The killed run's manifest names this checkout's commit (a resume on another commit
    is refused: tests/benchmarks/cowork/test_cowork_resume_compat.py); a commit made in the checkout
    while the test ran must not turn this scenario into that refusal."""
    path = root / "run_manifest.json"
    data = json.loads(path.read_text())
    data["source"]["head"] = harness_head()
    path.write_text(json.dumps(data))


def run_id_of(root: Path) -> str | None:
    path = root / "run_manifest.json"
    return str(json.loads(path.read_text())["run_id"]) if path.is_file() else None


def task_events(server: RefServer, task_id: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{server.url}/api/tasks/{task_id}/events", timeout=5, trust_env=False)
    events: list[dict[str, Any]] = answer.json()["events"]
    return events


def test_a_killed_cowork_gateway_run_is_resumed_without_a_second_live_task(
        tmp_path: Path) -> None:
    # the killed run's task thinks long; the resume's own task has nothing to wait out
    server = start_server(tmp_path / "server", {"plans": [plan(THINK_S), plan(0.0)]})
    try:
        killed_run(tmp_path / "r1", server)
        (first,) = server.state()["tasks"]
        assert server.state()["tasks"][first] in {"scheduled", "running"}  # still going
        same_harness_commit(tmp_path / "r1")
        run = run_pytest(TARGET, tmp_path / "r2", *args(tmp_path / "r2", server)[2:],
                         "--resume-from", str(tmp_path / "r1"), timeout=600)
        state = server.state()
        first_events = task_events(server, first)
        second = next(t for t in state["tasks"] if t != first)
        second_events = task_events(server, second)
    finally:
        server.stop()
        for root in (tmp_path / "r1", tmp_path / "r2"):  # the killed run's containers
            run_id = run_id_of(root)
            if run_id:
                sweep(run_id)
    assert run.rc == 0, run.out
    row = run.latest[IID]

    # the orphan was cancelled, and settled before the resume's own task was submitted
    assert state["cancels"] == [first] and state["tasks"][first] == "cancelled"
    assert state["submissions"] == 2 and state["tasks"][second] == "completed"
    settled_at = max(e["ts"] for e in first_events if e["type"] == "status")
    assert settled_at <= min(e["ts"] for e in second_events)  # never two live tasks
    (orphan,) = row["details"]["agent"]["details"]["orphan_tasks"]
    assert (orphan["task_id"], orphan["action"], orphan["status"]) == (first, "cancelled",
                                                                      "cancelled")
    assert orphan["checkpoint"].endswith(f"r1/cowork_bench/{IID}/runner_agent/"
                                         "task_checkpoint.json")

    # its spend is recorded: proven by its copied events, priced by its settled result
    assert orphan["paid_activity"] == "observed"
    assert (orphan["prompt_tokens"], orphan["completion_tokens"]) == (300, 30)
    assert orphan["cost_usd"] == pytest.approx(USAGE["cost_usd"])
    usage = [json.loads(line) for line in
             (run.root / "cowork_bench" / IID / "runtime_usage.jsonl").read_text().splitlines()]
    assert [(u["source"], u["task_id"]) for u in usage] == [("orphan_task", first),
                                                           ("runtime_result", second)]
    assert row["details"]["cowork_bench"]["paid_activity"] == "observed"
    assert row["paid_activity"] is True

    # nothing lost, nothing run twice, money exact: the resumed task's work is scored by the
    # real checker; the two tasks' costs are the row's and the orphan's, each counted once
    assert (row["status"], row["resolved"], row["official_eval_status"]) == (
        "passed", True, "completed")
    assert row["cost_known"] is True
    assert row["cost_usd"] == pytest.approx(USAGE["cost_usd"] + WRITE["cost_usd"])
    assert sum(u["cost_usd"] for u in usage) == pytest.approx(
        2 * USAGE["cost_usd"] + WRITE["cost_usd"])
    ledger = tmp_path / "r1" / "result_index.jsonl"
    assert not ledger.exists() or not ledger.read_text().strip()  # killed: no row was written
