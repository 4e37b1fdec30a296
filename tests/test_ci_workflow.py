"""The example CI workflow (``.github/workflows/benchmark.yml``) run locally, job by job.

Each job's ``run`` steps are executed with bash as a GitHub runner executes them, after the
workflow's ``${{ }}`` expressions are replaced from the inputs, the matrix, the plan job's
outputs and named secrets (the expressions the workflow may use are exactly the ones this
file evaluates: any other fails the test). The shard jobs run as dry runs and must be
accepted; their selections must partition the benchmark; the merge job must merge them; a
paid run without the campaign secret is refused before pytest starts; the key never lands
in a run root.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.cowork_bench import PINNED_COMMIT
from tests.support.ci_workflow import (
    FAKE_KEY,
    ROOT,
    agent_checkout,
    base_ctx,
    commit_all,
    evaluate,
    load,
    no_key_in,
    plan,
    render,
    run_job,
    selected,
    workspace,
)

__all__ = ["load"]


@pytest.mark.slow
def test_shard_jobs_partition_the_benchmark_and_merge(tmp_path: Path) -> None:
    workflow, ctx = base_ctx(agent="command", agent_command="my-agent --go",
                             model_upstream="https://openrouter.ai/api/v1",
                             solve_model="openrouter/acme/model-1", task_timeout_min="5",
                             shards="auto", dry_run=True)
    plan(workflow, ctx)
    shards = evaluate("fromJSON(needs.plan.outputs.shards)", ctx)
    # 5 min + 15 of eval: 16 rounds of 4 workers in the job, 64 units a shard; 200 need 4
    assert shards == [1, 2, 3, 4]
    assert render(workflow["jobs"]["shard"]["strategy"]["matrix"]["shard"], ctx) == \
        "[1, 2, 3, 4]"
    runs = tmp_path / "runs"
    picked: dict[int, list[str]] = {}
    for shard in shards:
        ctx["matrix"] = {"shard": shard}
        root = runs / f"run-shard-{shard}"  # where the merge job's download puts it
        results = run_job(workflow, "shard", ctx, cwd=ROOT, env_override={
            "RUN_ROOT": str(root), **agent_checkout(tmp_path), **workspace(tmp_path)})
        assert results and results[-1].returncode == 0, results[-1].stdout[-3000:] + \
            results[-1].stderr[-3000:]
        picked[shard] = selected(root)
        assert picked[shard], f"shard {shard} selected nothing"
        no_key_in(root)
    every = [iid for ids in picked.values() for iid in ids]
    assert len(every) == len(set(every)), "two shards selected the same instance"
    # the whole benchmark, as a plain dry run without shards selects it
    whole = tmp_path / "whole"
    proc = subprocess.run([sys.executable, "-m", "pytest", "benchmarks/programbench",
                           "--dry-run", "--agent", "nop", "--run-root", str(whole), "-q",
                           "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert sorted(every) == sorted(selected(whole))
    assert len(every) == 200

    results = run_job(workflow, "merge", ctx, cwd=ROOT, env_override={
        **workspace(tmp_path), "SHARDS_DIR": str(runs), "OUT": str(tmp_path / "merged")})
    assert all(r.returncode == 0 for r in results), [r.stderr[-2000:] for r in results]
    assert "merged 4 shards of 4: 200 units" in results[-1].stdout
    assert (tmp_path / "merged" / "report" / "report.html").is_file()
    assert "no gate" in (tmp_path / "merged" / "gate.txt").read_text()


@pytest.mark.parametrize("agent", ["mini-swe-agent", "command"])
def test_a_paid_shard_without_the_campaign_secret_is_refused(tmp_path: Path, agent: str) -> None:
    workflow, ctx = base_ctx(agent=agent, agent_command="my-agent",
                             model_upstream="https://openrouter.ai/api/v1", dry_run=False)
    ctx["needs"] = {"plan": {"count": "2", "shards": "[1, 2]"}}
    ctx["matrix"] = {"shard": 1}
    root = tmp_path / "shard-1"
    proc = run_job(workflow, "shard", ctx, cwd=ROOT, env_override={
            "RUN_ROOT": str(root), **agent_checkout(tmp_path), **workspace(tmp_path)})[-1]
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert "add the HARNESS_CAMPAIGN_URL secret" in line
    assert not root.exists()  # refused before pytest ran


def test_a_paid_command_agent_without_its_model_gateway_is_refused(tmp_path: Path) -> None:
    workflow, ctx = base_ctx(agent="command", agent_command="my-agent", dry_run=False)
    ctx["needs"] = {"plan": {"count": "1", "shards": "[1]"}}
    ctx["matrix"] = {"shard": 1}
    ctx["secrets"]["HARNESS_CAMPAIGN_URL"] = "postgresql://nobody@127.0.0.1:9/x?campaign=c"
    proc = run_job(workflow, "shard", ctx, cwd=ROOT,
                   env_override={"RUN_ROOT": str(tmp_path / "r"),
                                 **workspace(tmp_path)})[-1]
    assert proc.returncode == 2
    assert "give model_upstream" in proc.stderr  # else no per-task limit could hold


@pytest.mark.parametrize(("shards", "timeout", "says"), [
    ("four", "60", "shards 'four' is not auto or a number >= 1"),
    ("2", "60", "shards 2 does not fit: 200 units at 16 per shard need 16 shards"),
    ("auto", "400", "does not fit a job of 350 min"),
])
def test_a_plan_that_cannot_fit_the_job_is_refused(shards: str, timeout: str, says: str,
                                                   tmp_path: Path) -> None:
    workflow, ctx = base_ctx(shards=shards, task_timeout_min=timeout)
    [proc] = run_job(workflow, "plan", ctx, cwd=ROOT, env_override={"RUNNER_TEMP": str(tmp_path)})
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert says in line


def test_cowork_job_dry_run_on_the_fixture_checkout(tmp_path: Path) -> None:
    workflow, ctx = base_ctx()
    job = workflow["jobs"]["cowork"]
    checkout = next(s for s in job["steps"] if s.get("with", {}).get("path"))
    assert render(checkout["with"]["ref"], ctx) == PINNED_COMMIT  # the runner's pinned commit
    # The fixture stands in for the checkout: a clean git checkout whose commit is given as
    # the workflow's cowork_commit input (the pinned one's tree is not on this machine).
    fixture = tmp_path / "cowork_bench_checkout"
    shutil.copytree(ROOT / "tests" / "fixtures" / "cowork_mini", fixture)
    head = commit_all(fixture, "fixture")
    workflow, ctx = base_ctx(agent="command", agent_command="my-agent", cowork=True,
                             dry_run=True, cowork_commit=head)
    assert evaluate(job["if"], ctx) is True  # `if:` is an expression without ${{ }}
    root = tmp_path / "cowork"
    results = run_job(workflow, "cowork", ctx, cwd=ROOT,
                      env_override={"RUN_ROOT": str(root), "COWORK_ROOT": str(fixture),
                                    **agent_checkout(tmp_path), **workspace(tmp_path)})
    assert results and results[-1].returncode == 0, results[-1].stdout[-3000:] + \
        results[-1].stderr[-3000:]
    assert selected(root), "the Cowork job selected nothing"
    no_key_in(root)


@pytest.mark.parametrize("agent", ["mini-swe-agent"])
def test_other_agent_kinds_are_accepted(tmp_path: Path, agent: str) -> None:
    workflow, ctx = base_ctx(agent=agent, solve_model="openrouter/acme/model-1",
                             key_env="OPENROUTER_API_KEY", dry_run=True,
                             select="calculator or cheat")
    plan(workflow, ctx)
    ctx["matrix"] = {"shard": 1}
    root = tmp_path / "shard-1"
    results = run_job(workflow, "shard", ctx, cwd=ROOT, env_override={
            "RUN_ROOT": str(root), **agent_checkout(tmp_path), **workspace(tmp_path)})
    assert results[-1].returncode in (0, 5), results[-1].stdout[-3000:]  # 5: shard had none
    no_key_in(root)


SERVER = """
import http.server, json, os, sys
with open(sys.argv[1], "w") as f:
    json.dump({"pid": os.getpid(), "env": sorted(os.environ)}, f)
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"{}")
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[2])), Health).serve_forever()
"""


def test_the_gateway_agents_server_gets_no_campaign_url_and_ends_with_the_shard(
        tmp_path: Path) -> None:
    """The shard starts the gateway agent's server on the runner: it never sees the
    campaign's database URL, and nothing it started outlives the shard."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "server.py").write_text(SERVER)
    seen = tmp_path / "server.json"
    env = {**os.environ, **workspace(tmp_path), **agent_checkout(tmp_path),
           "SHARD": "1/1", "RUN_ROOT": str(tmp_path / "runs" / "shard-1"), "AGENT": "gateway",
           "BENCHMARK": "no_such_benchmark", "GATEWAY_URL": f"http://127.0.0.1:{port}",
           # a grandchild too: the whole group must end with the shard
           "AGENT_COMMAND": f"{sys.executable} {tmp_path / 'server.py'} {seen} {port} & wait",
           "HARNESS_CAMPAIGN_URL": "postgresql://u:pw@db.invalid/x?campaign=c",
           "AGENT_KEY": FAKE_KEY, "KEY_ENV": "OPENROUTER_API_KEY"}
    done = subprocess.run(["bash", "scripts/ci/shard.sh"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0  # no such benchmark: the run itself fails
    record = json.loads(seen.read_text())
    assert "HARNESS_CAMPAIGN_URL" not in record["env"]
    assert "OPENROUTER_API_KEY" in record["env"]  # the agent's own key, as designed
    for _ in range(50):
        try:
            os.kill(record["pid"], 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the agent server outlived the shard")
