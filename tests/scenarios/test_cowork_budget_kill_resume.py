"""Scenario (issue 42): a paid Cowork gateway run under a campaign, SIGKILLed mid-task, then
resumed: the twin of ``test_harbor_budget_kill_resume.py`` for the benchmark whose task is a
network of containers (agent, PostgreSQL sidecar, MCP servers).

The agent server is the reference agent server (a real HTTP server on 127.0.0.1), its task
priced by its plan (``cost_usd`` per step); a file campaign with a ceiling and a hold per
task. The first run is SIGKILLed (its whole process group) while its task thinks, after the
task's spend reached ``runner_agent/``. Asserted:

* the resume is admitted and takes the custody over: the campaign's record of the killed run
  says ``taken_over`` by the resume, nothing is left active or outstanding;
* the orphan task is cancelled before the resume's own is submitted, and the resumed task's
  work is scored by the real checker (passed);
* money exact: the resumed task's reported cost once, plus the dead attempt at its hold
  (``details.budget.earlier_attempts_usd``), which covers what the orphan reported;
* no container of either run is left on the engine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import docker
import pytest

from harness.sandbox.cleanup import sweep
from tests.agents.agents_support import RefServer, start_server
from tests.benchmarks.cowork.cowork_helpers import FIXTURE
from tests.scenarios.test_cowork_orphan import (
    IID,
    TARGET,
    THINK_S,
    USAGE,
    WRITE,
    plan,
    run_id_of,
    same_harness_commit,
)
from tests.scenarios.test_cowork_orphan import killed_run as kill_when_spent
from tests.support.suite import run_pytest

# slow tier: a minute or more on this engine (CI runs it after the default tier)
pytestmark = [pytest.mark.docker, pytest.mark.slow]

HOLD = 0.5  # --per-task-reserve-usd: what a dead attempt is charged
ALLOWANCE = 0.2  # --unknown-cost-allowance-usd: below the hold, so the hold is what counts


def args(tmp_path: Path, root: Path, server: RefServer) -> list[str]:
    return ["--run-root", str(root), "--cowork-root", str(FIXTURE),
            "--cowork-allow-dirty-bench", "--instance", IID, "--agent", "gateway",
            "--gateway-url", server.url, "--gateway-poll-sec", "0.2",
            "--campaign-file", str(tmp_path / "campaign.json"), "--campaign-budget-usd", "10",
            "--per-task-reserve-usd", str(HOLD), "--unknown-cost-allowance-usd",
            str(ALLOWANCE), "--no-report"]


def killed_run(tmp_path: Path, server: RefServer) -> str:
    """The paid run, SIGKILLed once the task's spend was copied and the campaign holds its
    reservation; the killed run's id."""
    root = tmp_path / "r1"
    kill_when_spent(root, server, args(tmp_path, root, server), also=lambda: bool(held(tmp_path)))
    run_id = run_id_of(root)
    assert run_id is not None
    return run_id


def held(tmp_path: Path) -> dict[str, Any]:
    """The reservations the campaign holds for the active run (empty before it has one)."""
    try:
        state = json.loads((tmp_path / "campaign.json").read_text())
    except (OSError, ValueError):
        return {}
    runs = list(state.get("active_runs", {}).values())
    return dict(runs[0]["reservations"]) if len(runs) == 1 else {}


def leftover(run_id: str) -> list[str]:
    client = docker.from_env()
    return [c.name for c in client.containers.list(
        all=True, filters={"label": f"harness.run={run_id}"})]


def test_a_paid_cowork_run_killed_mid_task_resumes_with_exact_money(tmp_path: Path) -> None:
    server = start_server(tmp_path / "server", {"plans": [plan(THINK_S), plan(0.0)]})
    killed_id = resumed_id = None
    try:
        killed_id = killed_run(tmp_path, server)
        assert list(held(tmp_path)) == [f"cowork_bench/{IID}"]  # in flight when killed
        same_harness_commit(tmp_path / "r1")
        run = run_pytest(TARGET, tmp_path / "r2", *args(tmp_path, tmp_path / "r2", server)[2:],
                         "--resume-from", str(tmp_path / "r1"), timeout=600)
        resumed_id = run_id_of(tmp_path / "r2")
        state = server.state()
    finally:
        server.stop()
        for run_id in (killed_id, resumed_id):  # the killed run's containers
            if run_id:
                sweep(run_id)
    assert run.rc == 0, run.out[-3000:]
    row = run.latest[IID]

    # the orphan cancelled, the resume's own task completed and judged by the real checker
    first, second = list(state["tasks"])
    assert state["cancels"] == [first] and state["tasks"][second] == "completed"
    assert (row["status"], row["resolved"], row["official_eval_status"]) == (
        "passed", True, "completed")

    # the custody taken over, nothing left active or outstanding
    campaign = json.loads((tmp_path / "campaign.json").read_text())
    assert campaign["active_runs"] == {}
    runs = {r["run_id"]: r for r in campaign["runs"]}
    assert runs[killed_id]["outcome"] == "taken_over"
    assert runs[killed_id]["taken_over_by"] == resumed_id
    assert runs[resumed_id]["took_over"] == [killed_id]

    # money exact: the resumed task's cost once, the dead attempt at its hold (which covers
    # the orphan's reported spend), each counted once
    own = USAGE["cost_usd"] + WRITE["cost_usd"]
    assert row["cost_known"] is True and row["cost_usd"] == pytest.approx(own)
    assert row["details"]["budget"]["earlier_attempts_usd"] == pytest.approx(HOLD)
    assert USAGE["cost_usd"] <= HOLD  # the hold covers what the orphan reported
    assert campaign["settled_usd"] == pytest.approx(own + HOLD, abs=1e-9)
    assert campaign["outstanding_usd"] == pytest.approx(0.0, abs=1e-12)
    assert runs[killed_id]["settled_usd"] == pytest.approx(0.0, abs=1e-12)
    assert runs[resumed_id]["settled_usd"] == pytest.approx(own + HOLD, abs=1e-9)

    # nothing of either run left on the engine
    assert leftover(killed_id) == [] and leftover(str(resumed_id)) == []

