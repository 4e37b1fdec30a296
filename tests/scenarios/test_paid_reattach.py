"""Scenario (issue 23 item 2): a paid campaign, a gateway agent, a SIGKILL mid-task, and the
resume that reattaches.

The agent is the reference agent server (``harness agent-server``, real HTTP on loopback)
working the ProgramBench fixture task in the run's sandbox; its one paid step costs $0.50.
The billing meter is the FAKE file meter (:mod:`harness.testing.fake_meter`): a thread of
this test plays the provider, adding to the key's usage what the task reports it spent.

The controller is SIGKILLed while the task works. Then:

* another run on the campaign is refused (``campaign_stale_run``) and names the resume;
* ``harness campaign reconcile`` refuses, naming the kept sandbox and what each way out costs;
* the resume of that very run is admitted, takes the custody over, adopts the same sandbox and
  reattaches to the same task (one submission, no cancel); the official eval scores it;
* custody settles and money is exact: the campaign's spent equals the meter's total for the
  task, charged once (the killed run's hold became the resume's, merged because it reattached
  to that very task, never a second charge), and
  ``harness campaign show`` says the same.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import docker
import pytest

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench.fixture import ensure_fixture
from tests.agents.agents_support import RefServer, start_server
from tests.support.suite import REPO_ROOT, Run, run_env, run_pytest, wait_for

# slow tier: a minute or more each on this engine (CI runs it after the default tier)
pytestmark = [pytest.mark.docker, pytest.mark.slow]

REFUSAL = re.compile(r"harness campaign reconcile: refused \(([a-z_]+)\): (.+)")


def refusal_line(stderr: str) -> tuple[str, str]:
    """The reason code and message of reconcile's refusal: its one stderr line."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    found = REFUSAL.fullmatch(lines[0])
    assert found is not None, stderr
    return found.group(1), found.group(2)

TARGET = "benchmarks/programbench"
BASELINE = 100.0  # the key's usage before the campaign (other spend of the key)
TASK_COST = 0.5


def plan(delay_s: float) -> dict[str, Any]:
    """One paid step that works ``delay_s`` (the controller is killed meanwhile), then the
    fixture's correct solution."""
    files = ensure_fixture().oracle_contents()
    steps: list[dict[str, Any]] = [{"run": "true", "sleep_s": delay_s, "cost_usd": TASK_COST,
                                    "prompt_tokens": 1000, "completion_tokens": 100}]
    steps += [{"write": {"path": rel, "content": data.decode(),
                         "mode": 0o755 if rel.endswith(".sh") else 0o644}}
              for rel, data in sorted(files.items())]
    return {"steps": steps}


class FakeProvider:
    """Plays the provider's billing for the FAKE meter: the key's usage is the baseline plus
    what every task on the agent server reports spent."""

    def __init__(self, server: RefServer, meter: Path) -> None:
        self.server = server
        self.meter = meter
        self.halt = threading.Event()
        self.total = 0.0
        meter.write_text(json.dumps({"usage": BASELINE}))
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self) -> None:
        while not self.halt.wait(0.1):
            try:
                tasks = self.server.state()["tasks"]
                total = sum(self.server.task(t).get("accounted_upper_bound_usd") or 0.0
                            for t in tasks)
            except Exception:  # the server is stopping
                continue
            if total != self.total:
                self.total = total
                tmp = self.meter.with_suffix(".tmp")
                tmp.write_text(json.dumps({"usage": BASELINE + total}))
                os.replace(tmp, self.meter)

    def stop(self) -> None:
        self.halt.set()
        self.thread.join()


def containers(run_root: Path) -> list[str]:
    found = docker.from_env().containers.list(
        all=True, filters={"label": f"harness.run_root={run_root.absolute()}"})
    return [c.name for c in found]


def harness_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)


def test_paid_reattach_after_sigkill_is_admitted_and_charges_the_task_once(
        tmp_path: Path) -> None:
    campaign = tmp_path / "campaign.json"
    meter = tmp_path / "fake_meter_usage.json"
    server = start_server(tmp_path / "server", {"default_plan": plan(10.0),
                                                "docker_user": "agent"})
    provider = FakeProvider(server, meter)
    options = ["--pb-fixtures", "-k", "calculator", "--agent", "gateway",
               "--gateway-url", server.url, "--gateway-poll-sec", "0.2",
               "--campaign-file", str(campaign), "--campaign-budget-usd", "5",
               "--per-task-reserve-usd", "1",
               "-p", "harness.testing.fake_meter", "--meter", f"fake-file:{meter}",
               "--meter-poll-sec", "0.5", "--meter-read-timeout-sec", "1",
               "--meter-blindness-sec", "30"]
    first = tmp_path / "r1"
    try:
        # 1. the paid run, SIGKILLed once its task is submitted
        env = run_env()
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", TARGET,
             "--run-root", str(first), *options],
            cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        checkpoint = first / "programbench" / FIXTURE_ID / "task_checkpoint.json"
        try:
            wait_for(checkpoint.is_file, timeout=240, interval=0.1)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        killed_id = Run.of(first).manifest["run_id"]
        kept = containers(first)
        assert len(kept) == 1, kept  # the paid task still works in it
        held = json.loads(campaign.read_text())["active_runs"][killed_id]["reservations"]
        assert [h["amount_usd"] for h in held.values()] == [1.0]

        # 2. any other run is refused, and the refusal names the way out
        other = run_pytest(TARGET, tmp_path / "other", *options)
        assert other.rc == 2, other.out
        refusal = other.manifest["refusal"]
        assert refusal["reason"] == "campaign_stale_run"
        assert f"--resume-from {first.resolve()}" in refusal["message"]

        # 3. reconcile names the kept sandbox and what each way out costs
        rec = harness_cli("campaign", "reconcile", str(campaign), "--run", str(first))
        assert rec.returncode == 2, rec.stdout + rec.stderr
        reason, message = refusal_line(rec.stderr)
        assert reason == "sandboxes_kept", rec.stderr
        assert kept[0] in message and f"--resume-from {first.resolve()}" in message
        assert "the paid task continues" in message
        assert "spend so far is lost" in message and "TTL ends" in message

        # 4. the resume of that very run: admitted, same sandbox, same task
        resumed = run_pytest(TARGET, tmp_path / "r2", *options, "--resume-from", str(first))
        after = server.state()
    finally:
        provider.stop()
        server.stop()
    assert resumed.rc == 0, resumed.out
    row = resumed.latest[FIXTURE_ID]
    assert row["score"] == 1.0 and row["resolved"] is True, row  # the official eval's score
    assert row["details"]["agent"]["reattach"]["adopted"] is True
    assert row["details"]["engine"]["container"] == kept[0] == row["details"]["agent"]["reattach"]["sandbox"]
    assert after["submissions"] == 1 and after["cancels"] == []  # one paid task, not two
    assert row["cost_usd"] == TASK_COST

    # 5. custody settled, money exact: spent = the meter's total for the task, once
    state = json.loads(campaign.read_text())
    resumed_id = resumed.manifest["run_id"]
    assert state["active_runs"] == {}
    runs = {r["run_id"]: r for r in state["runs"]}
    assert runs[killed_id]["outcome"] == "taken_over"
    assert runs[killed_id]["taken_over_by"] == resumed_id
    assert runs[resumed_id]["took_over"] == [killed_id]
    metered = json.loads(meter.read_text())["usage"] - BASELINE
    assert metered == pytest.approx(TASK_COST)
    assert state["spent_usd"] == pytest.approx(metered)
    assert state["settled_usd"] == pytest.approx(TASK_COST)  # charged once
    assert state["outstanding_usd"] == 0.0
    show = harness_cli("campaign", "show", str(campaign))
    assert show.returncode == 0, show.stderr
    assert "spent        $0.5000" in show.stdout and "0 active" in show.stdout
    assert containers(first) == [] and containers(tmp_path / "r2") == []
