"""Cowork Bench under an adversarial agent (real Docker, the real checker of cowork_mini).

Each run is one ``pytest benchmarks/cowork_bench`` session on ``excel-sales-summary`` (a file
task the oracle passes) whose agent only cheats or attacks:

* through the gateway (the reference agent server runs the plan's step in the agent
  container with ``docker exec`` and no ``-u``): a link to the groundtruth, links leaving the
  workspace, a FIFO, agent logs linked to ``/dev/zero``, a forged ``runtime_usage.jsonl``,
  then who it runs as and what the database lets it do;
* through the command agent: the relative variant of the groundtruth link and a FIFO log.

Safe outcomes asserted: the cheat scores ``failed`` (the links are removed before the eval
container sees the workspace, and listed in the row and the instance folder); the run
finishes with bounded, recorded classification; the harness's usage record wins; the agent
is uid 1000 with no capabilities and ``no_new_privileges``; ``COPY ... TO PROGRAM``,
``ALTER ROLE ... SUPERUSER`` and logging in as the checker's role all fail.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.untrusted import read_untrusted_text
from tests.agents.agents_support import start_server
from tests.security.runtime_support import security_runtime, security_runtime_args
from tests.support.suite import REPO_ROOT, Run, run_pytest

pytestmark = pytest.mark.docker

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "cowork_mini"
IID = "excel-sales-summary"
GT = f"/workspace/tasks/finalpool/{IID}/groundtruth_workspace"

ATTACK = rf"""
set -u
ws=/workspace/dumps/workspace; logs=/workspace/dumps/agent
cd "$ws"
ln -s {GT}/Sales_Summary.xlsx Sales_Summary.xlsx
ln -s ../../tasks/finalpool/{IID}/groundtruth_workspace gt
ln -s /etc/passwd passwd.txt
echo mine > mine.txt && ln -s mine.txt alias.txt
mkfifo pipe
ln -s /dev/zero "$logs/events.jsonl"
ln -s /dev/zero "$logs/agent.log"
mkfifo "$logs/tools.jsonl"
printf '%s\n' '{{"type":"llm_usage","prompt_tokens":99999999,"completion_tokens":1}}' \
  > "$logs/runtime_usage.jsonl"
{{
  echo "uid=$(id -u) pguser=$PGUSER"
  grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs):' /proc/self/status
  psql -X -v ON_ERROR_STOP=1 -c "COPY (SELECT 1) TO PROGRAM 'touch /tmp/pwned'" 2>&1
  echo "copy_rc=$?"
  psql -X -v ON_ERROR_STOP=1 -c "ALTER ROLE $PGUSER SUPERUSER" 2>&1
  echo "alter_rc=$?"
  PGUSER=eigent PGPASSWORD=camel psql -X -c "SELECT 1" 2>&1
  echo "eigent_rc=$?"
  psql -X -tA -c "SELECT 'super=' || rolsuper FROM pg_roles WHERE rolname = current_user" 2>&1
  psql -X -tA -c "SELECT 'rows=' || count(*) FROM gcal.events" 2>&1
}} > probe.txt
"""


# Every attack runs under the daemon's default runtime and under gVisor (runsc, registered
# by scripts/setup.sh); HARNESS_TEST_RUNTIME picks one runtime for the default case.
RUNTIMES = [pytest.param(None, id="default"), pytest.param("runsc", id="gvisor", marks=pytest.mark.slow)]


def cowork(root: Path, *args: str, runtime: str | None = None) -> Run:
    extra = ["--runtime", runtime] if runtime else security_runtime_args()
    return run_pytest("benchmarks/cowork_bench", root, "--cowork-root", str(FIXTURE),
                      "--cowork-allow-dirty-bench", "--instance", IID, *args,
                      *extra, timeout=600)  # fmt: skip


def probe(inst: Path) -> dict[str, str]:
    text = read_untrusted_text(inst / "workspace" / "probe.txt", 1 << 20)
    out: dict[str, str] = {"text": text}
    for token in text.split():
        key, sep, value = token.partition("=")
        if sep:
            out[key] = value
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key in ("CapEff", "CapPrm", "CapBnd", "NoNewPrivs"):
            out[key] = value.strip()
    return out


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_gateway_agent_cheats_and_attacks_and_gets_nothing(
    tmp_path: Path, runtime: str | None
) -> None:
    step = {"run": f"bash -c {shlex.quote(ATTACK)}", "cost_usd": 0.01, "prompt_tokens": 500,
            "completion_tokens": 50}  # fmt: skip
    server = start_server(tmp_path / "server", {"default_plan": {"steps": [step]}})
    try:
        run = cowork(tmp_path / "gw", "--agent", "gateway", "--gateway-url", server.url,
                     "--gateway-poll-sec", "0.2", runtime=runtime)  # fmt: skip
    finally:
        server.stop()
    assert run.rc == 0, run.out  # settled: a scored failure, not infrastructure
    row = run.latest[IID]
    inst = run.root / "cowork_bench" / IID
    # the groundtruth link is removed before the eval container sees the workspace
    assert (row["status"], row["reason_code"], row["score"]) == ("failed", "verifier_failed", 0.0)
    assert "Sales_Summary.xlsx exists" in row["details"]["eval"]["checker_output_tail"]
    removed = {r["path"]: r for r in row["details"]["cowork_bench"]["workspace_removed"]}
    assert set(removed) == {"Sales_Summary.xlsx", "gt", "passwd.txt"}, removed
    assert removed["Sales_Summary.xlsx"]["target"] == f"{GT}/Sales_Summary.xlsx"
    on_disk = json.loads((inst / "workspace_sanitised.json").read_text())
    assert {r["path"] for r in on_disk["removed"]} == set(removed) and on_disk["kept_links"] == 1
    assert not os.path.lexists(inst / "workspace" / "Sales_Summary.xlsx")
    assert os.path.islink(inst / "workspace" / "alias.txt")  # a link inside stays
    assert not os.path.lexists(inst / "workspace" / "pipe")  # copy-out never brings a FIFO
    # agent logs: links to /dev/zero refused and recorded; the FIFO never reached the host
    refused = {r["file"]: r["why"]
               for r in row["details"]["cowork_bench"]["agent_logs_refused"]}
    assert {"agent/events.jsonl", "agent/agent.log", "agent/runtime_usage.jsonl"} <= set(refused)
    assert "/dev/zero" in refused["agent/events.jsonl"]
    assert not os.path.lexists(inst / "agent" / "tools.jsonl") or "agent/tools.jsonl" in refused
    # the harness's usage record is its own file; the forged copy changes nothing
    harness_usage = json.loads((inst / "runtime_usage.jsonl").read_text())
    assert harness_usage["prompt_tokens"] == 500 and row["tokens"]["prompt"] == 500
    # who the agent was, and what the database let it do
    seen = probe(inst)
    assert seen["uid"] == "1000" and seen["pguser"] == "cowork_agent", seen["text"]
    assert seen["CapEff"] == seen["CapPrm"] == seen["CapBnd"] == "0000000000000000"
    if (runtime or security_runtime()) is None:  # gVisor's /proc/self/status has no NoNewPrivs line
        assert seen["NoNewPrivs"] == "1"
    assert seen["copy_rc"] != "0" and "pg_execute_server_program" in seen["text"]
    assert seen["alter_rc"] != "0" and "must be superuser to alter superuser roles" in seen["text"]
    assert seen["eigent_rc"] != "0" and 'role "eigent" is not permitted to log in' in seen["text"]
    assert seen["super"] == "false" and seen["rows"].isdigit()  # data access still works
    # the audit reads the run without following or hanging on the agent's logs
    out = tmp_path / "audit.json"
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "cowork", "audit", str(run.root),
                           "--output", str(out)], capture_output=True, text=True, cwd=REPO_ROOT,
                          timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    task = json.loads(out.read_text())["tasks"][0]
    assert {f["source"] for f in task["manual_review"] if f["reason"] == "agent_log_refused"} >= {
        "agent/events.jsonl", "agent/agent.log"
    }  # fmt: skip


CGROUP_LIMITS = r"""
c=/sys/fs/cgroup
if [ -f $c/cpu.max ]; then read q p < $c/cpu.max; echo "cpu=$q/$p pids=$(cat $c/pids.max)"
else echo "cpu=$(cat $c/cpu/cpu.cfs_quota_us)/$(cat $c/cpu/cpu.cfs_period_us)" \
  "pids=$(cat $c/pids/pids.max)"; fi
"""


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_command_agent_relative_groundtruth_link_fails_and_runs_unprivileged(
    tmp_path: Path, runtime: str | None
) -> None:
    command = (
        f"ln -s ../../tasks/finalpool/{IID}/groundtruth_workspace/Sales_Summary.xlsx "
        "Sales_Summary.xlsx && mkfifo /workspace/dumps/agent/tools.jsonl && "
        "ln -s /dev/zero /workspace/dumps/agent/events.jsonl && "
        "echo uid=$(id -u) && grep -E '^(CapEff|NoNewPrivs):' /proc/self/status && " + CGROUP_LIMITS
    )
    run = cowork(tmp_path / "cmd", "--agent", "command", "--agent-command", command,
                 "--cowork-cpus", "0.5", "--cowork-pids", "300", runtime=runtime)  # fmt: skip
    assert run.rc == 0, run.out
    row = run.latest[IID]
    assert (row["status"], row["reason_code"]) == ("failed", "verifier_failed")
    removed = {r["path"]: r for r in row["details"]["cowork_bench"]["workspace_removed"]}
    assert "climbs out" in removed["Sales_Summary.xlsx"]["why"]
    stdout = (run.root / row["output_paths"]["agent_stdout"]).read_text()
    assert "uid=1000" in stdout and "CapEff:\t0000000000000000" in stdout
    if (runtime or security_runtime()) is None:  # gVisor shows neither NoNewPrivs nor the host cgroups
        assert "NoNewPrivs:\t1" in stdout
        assert "cpu=50000/100000 pids=300" in stdout  # the options reach the agent container
    refused = row["details"]["cowork_bench"]["agent_logs_refused"]
    assert "agent/events.jsonl" in {r["file"] for r in refused}
    assert run.manifest["extra"]["cowork"]["applied_config"]["container_limits"] == {
        "cpus": 0.5, "memory": "2g", "pids": 300
    }  # fmt: skip


def test_copy_out_caps_of_the_run_apply_to_cowork(tmp_path: Path) -> None:
    """``--max-copy-out-files`` reaches Cowork's containers: an agent that floods its
    workspace past the run's cap fails (its failure, not an infra retry) and nothing past
    the cap reaches the host."""
    command = "mkdir flood && for i in $(seq 1 300); do echo $i > flood/f$i; done"
    run = cowork(tmp_path / "flood", "--agent", "command", "--agent-command", command,
                 "--max-copy-out-files", "100")  # fmt: skip
    assert run.rc == 0, run.out
    row = run.latest[IID]
    assert (row["status"], row["reason_code"]) == ("agent_failed", "too_many_files"), row
    assert row["infra"] is False
    flood = run.root / "cowork_bench" / IID / "workspace" / "flood"
    assert not flood.exists() or len(list(flood.iterdir())) <= 100


def test_flooding_the_mcp_log_folder_is_the_agents_failure(tmp_path: Path) -> None:
    """The MCP supervisor's log folder is the agent's (the supervisor runs as it): an agent
    that floods it past ``--max-copy-out-files`` fails like a flooded workspace, never a
    crash of the instance, and nothing past the cap reaches the host."""
    task = "email-reply-invoice"  # a task with MCP servers: its logs are copied out
    command = "for i in $(seq 1 300); do echo $i > /workspace/dumps/mcp/f$i; done"
    run = run_pytest("benchmarks/cowork_bench", tmp_path / "mcpflood", "--cowork-root",
                     str(FIXTURE), "--cowork-allow-dirty-bench", "--instance", task,
                     "--agent", "command", "--agent-command", command,
                     "--max-copy-out-files", "100", *security_runtime_args(),
                     timeout=600)  # fmt: skip
    assert run.rc == 0, run.out
    row = run.latest[task]
    assert (row["status"], row["reason_code"]) == ("agent_failed", "too_many_files"), row
    assert row["infra"] is False
    logs = run.root / "cowork_bench" / task / "mcp"
    assert not logs.exists() or len(list(logs.iterdir())) <= 100
