"""Every runner feature on the Harbor format without a line of its own (issue 42): the
gateway agent through the reference server under a budget, attempts, shards and their merge,
the report, a SIGKILL and a resume that raises K."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from tests.agents.agents_support import start_server
from tests.benchmarks.harbor.harbor_support import (
    no_containers,
    rows,
    run_harbor,
    start_harbor,
)
from tests.support.suite import Run, run_cli

pytestmark = pytest.mark.docker
TWO = ("-k", "write-greeting or sum-numbers")


def test_the_gateway_agent_through_the_reference_server_under_a_budget(tmp_path) -> None:
    steps = [{"run": "cd /data && touch a.txt b.txt", "cost_usd": 0.25,
              "prompt_tokens": 100, "completion_tokens": 10},
             {"run": "cd /data && touch c.txt d.txt", "cost_usd": 0.25,
              "prompt_tokens": 100, "completion_tokens": 10}]
    server = start_server(tmp_path / "server", {"default_plan": {"steps": steps}})
    try:
        run = run_harbor(tmp_path / "gw", "--agent", "gateway", "--gateway-url", server.url,
                         "--gateway-poll-sec", "0.2", "-k", "partial-credit",
                         "--budget-usd", "5", "--unknown-cost-allowance-usd", "1")
    finally:
        server.stop()
    assert run.rc == 0, run.out
    row = rows(run)["partial-credit"]
    assert (row["score"], row["resolved"]) == (1.0, True)
    assert row["cost_usd"] == 0.5 and row["cost_known"] is True
    assert row["tokens"]["prompt"] == 200
    # the gateway agent built its own task from the neutral request: the task's workdir, its
    # metadata, never its tests
    body = json.loads((run.root / row["output_paths"]["task_body"]).read_text())
    assert body["executor_ref"]["workspace_backend_path"] == "/data"
    assert body["metadata"] == {"harbor_task": "partial-credit"}
    assert body["description"].startswith((run.root / row["output_paths"]["instruction"])
                                          .read_text()[:40])


def test_shards_with_attempts_merge_into_the_unsharded_run(tmp_path) -> None:
    one = run_harbor(tmp_path / "s1", "--agent", "oracle", "--attempts", "2", *TWO,
                     "--shard", "1/2")
    two = run_harbor(tmp_path / "s2", "--agent", "oracle", "--attempts", "2", *TWO,
                     "--shard", "2/2")
    assert one.rc == 0 and two.rc == 0, (one.out, two.out)
    merged = tmp_path / "merged"
    done = run_cli("merge", str(one.root), str(two.root), "--output", str(merged),
                   timeout=300)
    assert done.returncode == 0, done.stderr
    got = {k: (r["score"], r["outcome"]) for k, r in Run(0, "", merged).latest.items()}
    assert got == {"write-greeting@1": (1.0, "scored"), "write-greeting@2": (1.0, "scored"),
                   "sum-numbers@1": (0.0, "scored"), "sum-numbers@2": (0.0, "scored")}
    report = run_cli("report", str(merged), "--output", str(tmp_path / "report"), timeout=300)
    assert report.returncode == 0, report.stderr
    assert (tmp_path / "report" / "report.html").is_file()


def test_a_killed_run_resumed_with_more_attempts_pays_no_unit_twice(tmp_path) -> None:
    root = tmp_path / "killed"
    proc = start_harbor(root, "--agent", "command", "--agent-command",
                        "sleep 2; echo 'hello, harbor' > /app/greeting.txt", *TWO)
    index = root / "result_index.jsonl"
    deadline = time.monotonic() + 300
    while not (index.is_file() and index.read_text().strip()):  # one unit settled
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(60)
    first = {r["instance_id"]: r for r in Run(0, "", root).rows
             if r["outcome"] in ("scored", "agent_failed")}
    assert len(first) == 1, first
    resumed = run_harbor(tmp_path / "resumed", "--resume-from", str(root), "--attempts", "2",
                         "--agent", "command", "--agent-command",
                         "sleep 2; echo 'hello, harbor' > /app/greeting.txt")
    assert resumed.rc == 0, resumed.out
    latest = rows(resumed)
    assert sorted(latest) == ["sum-numbers@1", "sum-numbers@2", "write-greeting@1",
                              "write-greeting@2"]
    [(settled, row)] = first.items()
    carried = latest[settled if "@" in settled else f"{settled}@1"]
    assert carried["outcome"] == "carried_forward" and carried["score"] == row["score"]
    ran = [r["instance_id"] for r in resumed.rows if r["outcome"] in ("scored", "agent_failed")]
    assert len(ran) == len(set(ran)) == 3  # every other unit ran once, the settled one never
    assert latest["write-greeting@2"]["score"] == 1.0
    no_containers(resumed.manifest["run_id"])
