"""Scenario (issue 42): a paid Harbor run under a campaign, SIGKILLed mid-task, then resumed.

Real Docker; the four Harbor task folders of ``tests/data/harbor/tasks``, two attempts each
(eight units) on two xdist workers; the command agent behind the model gateway, its model
the FAKE scripted model server (one answer, whatever it is asked: a bash call that solves
the task the agent stands in) priced by a price table, so every unit's cost is known; a
file campaign with a ceiling and per-task holds. The agent in the sandbox is a few lines
of Python (urllib): one model call, its tool calls run, done.

The run is SIGKILLed (controller and workers) once a unit has settled and another holds
its reservation; then resumed with ``--resume-from``. Asserted:

* the resume is admitted and takes the custody over: the campaign's record of the killed
  run says ``taken_over`` by the resume, nothing is left active;
* every unit has exactly one final row; the units settled before the kill are carried
  (``carried_forward``, their score kept) and never run again: the model server answered
  the resume once per unit it ran, no more;
* the scores are the Harbor verifier's: write-greeting and sum-numbers solved (1.0),
  partial-credit 0.75 (three of its four files, as its verifier counts them),
  slow-verifier the agent's failure ``verifier_timeout``;
* money exact: the campaign's settled is each finished unit's cost once plus each dead
  attempt at its hold (not the smaller unknown-cost allowance), nothing outstanding;
* no container of either run is left on the engine.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
from pathlib import Path
from typing import Any

import docker
import pytest

from harness.testing.fake_model_server import start_fake_model_server
from tests.agents.model_scripts import step
from tests.benchmarks.harbor.harbor_support import TARGET, TASKS, map_args
from tests.security.model_gateway_support import FAKE_MODEL, PER_CALL_USD, fake_model_prices
from tests.support.suite import (
    FORK_SERVER,
    QUIET_PLUGINS,
    REPO_ROOT,
    Run,
    private_basetemp,
    run_env,
    run_pytest,
    wait_for,
)

# slow tier: a minute or so on this engine (CI runs it after the default tier)
pytestmark = [pytest.mark.docker, pytest.mark.slow]

KEY = "sk-harbor-scenario-0123456789"
HOLD = 0.5  # --per-task-reserve-usd: what a dead attempt is charged
ALLOWANCE = 0.2  # --unknown-cost-allowance-usd: below the hold, so the hold is what counts
TASK_NAMES = ("partial-credit", "slow-verifier", "sum-numbers", "write-greeting")
UNITS = sorted(f"{t}@{k}" for t in TASK_NAMES for k in (1, 2))
FINAL = ("scored", "agent_failed", "infra_failed", "carried_forward")

# What the scripted model answers every call: the bash that solves the task it runs in,
# told apart by the task's working directory and files.
SOLVE = ("case \"$PWD\" in "
         "/data) touch a.txt b.txt c.txt ;; "
         "*) if [ -f numbers.txt ]; then awk '{s += $1} END {print s}' numbers.txt > sum.txt; "
         "else echo 'hello, harbor' > greeting.txt; touch done; fi ;; "
         "esac")

# The in-sandbox agent: one call to the gateway (OpenAI chat completions), its bash run.
AGENT = """
import json, os, subprocess, urllib.request
tool = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object",
        "properties": {"command": {"type": "string"}}, "required": ["command"]}}}
body = {"model": MODEL, "tools": [tool], "messages": [{"role": "user",
        "content": open(os.environ["HARNESS_INSTRUCTION_FILE"]).read()}]}
request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps(body).encode(), headers={"Content-Type": "application/json",
    "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
message = json.load(urllib.request.urlopen(request, timeout=60))["choices"][0]["message"]
for call in message.get("tool_calls") or []:
    subprocess.run(["bash", "-c", json.loads(call["function"]["arguments"])["command"]],
                   check=True)
""".replace("MODEL", repr(FAKE_MODEL))
AGENT_COMMAND = f"python3 -c {shlex.quote(AGENT)}"


def options(tmp_path: Path, upstream: str) -> list[str]:
    return ["--harbor-tasks", str(TASKS), *map_args(), "--attempts", "2", "-n", "2",
            "--agent", "command", "--agent-command", AGENT_COMMAND,
            "--model-upstream", upstream, "--model-prices", str(fake_model_prices(tmp_path)),
            "--campaign-file", str(tmp_path / "campaign.json"), "--campaign-budget-usd", "10",
            "--per-task-reserve-usd", str(HOLD), "--unknown-cost-allowance-usd",
            str(ALLOWANCE), "--no-report"]


def campaign_state(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):  # not made yet
        return {}


def unit_of(key: str) -> str:
    """The unit (``task@attempt``) of a campaign key (``harbor/task@attempt``)."""
    return key.rsplit("/", 1)[-1]


def leftover(run_id: str) -> list[str]:
    """The names of the run's containers (the engine's list: no inspect of each, which a
    container removed meanwhile would fail)."""
    found = docker.from_env().api.containers(all=True, filters={"label": f"harness.run={run_id}"})
    return [str(c["Names"][0]).lstrip("/") for c in found]


def test_a_paid_harbor_run_killed_mid_task_is_resumed_and_charged_once(
        tmp_path: Path) -> None:
    campaign = tmp_path / "campaign.json"
    first = tmp_path / "first"
    env = run_env() | {"HARNESS_MODEL_API_KEY": KEY}
    model = start_fake_model_server({"responses": [step(SOLVE)], "loop": True})
    try:
        # 1. the paid run, SIGKILLed once a unit settled (its row written) and another holds
        proc = FORK_SERVER.spawn(
            "pytest", [*QUIET_PLUGINS, "-q", TARGET, "--run-root", str(first),
                       *private_basetemp(tmp_path), *options(tmp_path, model.base_url)],
            REPO_ROOT, env, tmp_path / "first.out")

        def settled_one_and_another_in_flight() -> bool:
            """A unit settled with its row written, none settled without one, and another
            unit holding its reservation with its sandbox up."""
            assert proc.poll() is None, (tmp_path / "first.out").read_text()[-3000:]
            runs = list(campaign_state(campaign).get("active_runs", {}).values())
            if len(runs) != 1 or not runs[0]["reservations"] or not runs[0]["settled"]:
                return False
            rows = {r["instance_id"] for r in Run.of(first).rows if r["outcome"] in FINAL}
            return ({unit_of(k) for k in runs[0]["settled"]} == rows
                    and bool(leftover(runs[0]["run_id"])))

        try:
            wait_for(settled_one_and_another_in_flight, timeout=240, interval=0.05)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        requests_before = model.requests
        killed = Run.of(first)
        killed_id = killed.manifest["run_id"]
        assert killed.manifest["exit_code"] is None  # never finalized
        held = campaign_state(campaign)["active_runs"][killed_id]
        settled_before = {unit_of(k): v for k, v in held["settled"].items()}
        dead = sorted(unit_of(k) for k in held["reservations"])
        assert dead and settled_before, held  # a unit in flight, one settled
        assert all(v == pytest.approx(PER_CALL_USD) for v in settled_before.values())
        assert [r["amount_usd"] for r in held["reservations"].values()] == [HOLD] * len(dead)
        done_before = {r["instance_id"]: r for r in killed.rows if r["outcome"] in FINAL}
        assert sorted(done_before) == sorted(settled_before)  # each settled unit has its row
        assert requests_before >= len(settled_before)
        assert leftover(killed_id), "no sandbox of the unit in flight"  # the kill's leftover

        # 2. the resume: admitted, the custody taken over, the rest run once
        resumed = run_pytest(TARGET, tmp_path / "resumed",
                             *options(tmp_path, model.base_url), "--resume-from", str(first),
                             env={"HARNESS_MODEL_API_KEY": KEY}, timeout=300)
        resume_requests = model.requests - requests_before
    finally:
        model.stop()
    assert resumed.rc == 0, resumed.out[-3000:]
    resumed_id = resumed.manifest["run_id"]
    state = json.loads(campaign.read_text())
    assert state["active_runs"] == {}
    runs = {r["run_id"]: r for r in state["runs"]}
    assert runs[killed_id]["outcome"] == "taken_over"
    assert runs[killed_id]["taken_over_by"] == resumed_id
    assert runs[resumed_id]["took_over"] == [killed_id]
    assert runs[resumed_id]["abandoned_count"] == 0

    # every unit exactly one final row; the settled ones carried, never run again
    latest = resumed.latest
    assert sorted(latest) == UNITS
    finals = [r["instance_id"] for r in resumed.rows if r["outcome"] in FINAL]
    assert sorted(finals) == UNITS, finals
    for unit, row in done_before.items():
        carried = latest[unit]
        assert carried["outcome"] == "carried_forward", carried
        assert carried["score"] == row["score"]
    ran = sorted(u for u, r in latest.items() if r["outcome"] != "carried_forward")
    assert ran == sorted(set(UNITS) - set(done_before))
    assert resume_requests == len(ran)  # one model call per unit run, none for a carried one

    # the Harbor verifier's scores, for every unit (carried or run in the resume)
    scores = {u: (r["score"], r["outcome"], r["reason_code"]) for u, r in latest.items()}
    origin = {u: done_before.get(u, latest[u]) for u in UNITS}  # a carried unit: its run
    for k in (1, 2):
        for name, want in (("write-greeting", (1.0, "scored")), ("sum-numbers", (1.0, "scored")),
                           ("partial-credit", (0.75, "scored"))):
            row = origin[f"{name}@{k}"]
            assert (row["score"], row["outcome"]) == want, scores
        part = origin[f"partial-credit@{k}"]
        assert part["details"]["harbor"]["rewards"] == {"reward": 0.75, "files": 3.0}
        slow = origin[f"slow-verifier@{k}"]
        assert (slow["outcome"], slow["reason_code"]) == ("agent_failed", "verifier_timeout")

    # money exact: each finished unit's cost once, each dead attempt at its hold
    for unit in ran:
        row = latest[unit]
        assert row["cost_usd"] == pytest.approx(PER_CALL_USD, abs=1e-12), row
        assert row["cost_known"] is True
        earlier = row["details"].get("budget", {}).get("earlier_attempts_usd")
        assert earlier == (pytest.approx(HOLD) if unit in dead else None), (unit, earlier)
    expected = (len(settled_before) + len(ran)) * PER_CALL_USD + len(dead) * HOLD
    assert len(settled_before) + len(ran) == len(UNITS)
    assert state["settled_usd"] == pytest.approx(expected, abs=1e-9)
    assert state["spent_usd"] == pytest.approx(expected, abs=1e-9)
    assert state["outstanding_usd"] == pytest.approx(0.0, abs=1e-12)
    assert runs[killed_id]["settled_usd"] == pytest.approx(len(settled_before) * PER_CALL_USD)
    assert runs[resumed_id]["settled_count"] == len(ran)
    assert runs[resumed_id]["settled_usd"] == pytest.approx(
        len(ran) * PER_CALL_USD + len(dead) * HOLD, abs=1e-9)

    # nothing of either run left on the engine
    assert leftover(killed_id) == [] and leftover(resumed_id) == []
