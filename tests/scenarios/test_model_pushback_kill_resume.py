"""Scenario (issue 45 meets issues 23 and 41): a paid run whose provider pushes back is
SIGKILLed while its agent's call waits out a 429, then resumed with the provider healthy.

Real Docker and the real ProgramBench eval; an SDK agent in the sandbox behind the model
gateway (paced: ``--model-rpm``, ``--model-concurrency``); the FAKE scripted model server
upstream; a file campaign with a ceiling. Asserted:

* the kill lands while the gateway waits (the provider answered once, then said 429 with a
  Retry-After of two minutes); the killed run is never finalized;
* the resume (same upstream URL, now answering) takes the killed run's custody over, runs
  the instance again and scores it;
* money exact: the killed attempt is charged its hold (its gateway's meter died with it),
  the resume's answered calls at their price, nothing outstanding, the killed run recorded
  as taken over;
* nothing of either run is left on the engine.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import docker
import pytest

from benchmarks.programbench import FIXTURE_ID
from harness.testing.fake_model_server import start_fake_model_server
from tests.agents.model_scripts import solve_script, step
from tests.security.model_gateway_support import (
    AGENT_COMMAND,
    PER_CALL_USD,
    SdkInjector,
    fake_model_prices,
)
from tests.support.suite import (
    FORK_SERVER,
    QUIET_PLUGINS,
    REPO_ROOT,
    Run,
    run_env,
    run_pytest,
    wait_for,
)

# slow tier: a minute or more each on this engine (CI runs it after the default tier)
pytestmark = [pytest.mark.docker, pytest.mark.slow]
KEY = "sk-pushback-scenario-0123456789"
HOLD = 1.0
PER_CALL = PER_CALL_USD


def arguments(tmp_path: Path, upstream_url: str) -> list[str]:
    prices = fake_model_prices(tmp_path)
    return ["--pb-fixtures", "-k", "calculator", "--agent", "command", "--agent-command",
            AGENT_COMMAND, "--model-upstream", upstream_url, "--model-prices", str(prices),
            "--model-rpm", "600", "--model-concurrency", "2",
            "--campaign-file", str(tmp_path / "campaign.json"), "--campaign-budget-usd", "5",
            "--per-task-reserve-usd", str(HOLD), "--unknown-cost-allowance-usd", str(HOLD),
            "--no-report"]


def test_a_run_killed_while_its_provider_pushes_back_is_resumed_and_charged_once(
        tmp_path: Path) -> None:
    params = {"key_parts": [KEY], "model": "fake-model", "stream": False, "max_steps": 20}
    pushing = start_fake_model_server(
        {"responses": [step("ls"), {"status": 429, "retry_after": "120"}], "loop": True})
    host, port = pushing.server.server_address[:2]
    first = tmp_path / "first"
    env = run_env() | {"HARNESS_MODEL_API_KEY": KEY}
    try:
        with SdkInjector(first, params):
            proc = FORK_SERVER.spawn(
                "pytest", [*QUIET_PLUGINS, "-q", "benchmarks/programbench", "--run-root",
                           str(first), *arguments(tmp_path, pushing.base_url)],
                REPO_ROOT, env, tmp_path / "first.out")
            wait_for(lambda: pushing.requests >= 2, timeout=300)  # the 429 came: waiting
            time.sleep(0.5)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    finally:
        pushing.stop()
    killed = Run.of(first)
    assert killed.manifest["exit_code"] is None  # never finalized

    solve = solve_script()["responses"]
    healthy = start_fake_model_server({"responses": solve}, host=str(host), port=int(port))
    try:
        with SdkInjector(tmp_path / "resumed", params):
            again = run_pytest("benchmarks/programbench", tmp_path / "resumed",
                               *arguments(tmp_path, healthy.base_url),
                               "--resume-from", str(first), env={"HARNESS_MODEL_API_KEY": KEY})
    finally:
        healthy.stop()
    assert again.rc == 0, again.out[-3000:]
    row = again.latest[FIXTURE_ID]
    assert row["score"] == 1.0 and row["outcome"] == "scored", row
    assert row["details"]["budget"]["earlier_attempts_usd"] == pytest.approx(HOLD)
    assert row["cost_usd"] == pytest.approx(len(solve) * PER_CALL, abs=1e-12)
    state = json.loads((tmp_path / "campaign.json").read_text())
    assert state["outstanding_usd"] == pytest.approx(0.0, abs=1e-12)
    assert state["spent_usd"] == pytest.approx(HOLD + len(solve) * PER_CALL, abs=1e-9)
    runs = {r["run_id"]: r for r in state["runs"]}
    assert runs[killed.manifest["run_id"]]["outcome"] == "taken_over"
    client = docker.from_env()
    for run_id in (killed.manifest["run_id"], again.manifest["run_id"]):
        assert client.containers.list(all=True, filters={"label": f"harness.run={run_id}"}) == []
