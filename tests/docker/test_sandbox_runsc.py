"""``--runtime runsc``: the agent's sandbox under gVisor (Debian's ``runsc``, registered with
the Docker daemon by ``scripts/setup.sh``), scored by the real ``programbench`` CLI.

The official eval's own containers are the CLI's and stay on the daemon's default runtime.
"""

from __future__ import annotations

from pathlib import Path

import docker
import pytest

from benchmarks.programbench import FIXTURE_ID
from harness.sandbox.cleanup import sweep
from harness.testing.suite import run_pytest

pytestmark = pytest.mark.docker

TARGET = "benchmarks/programbench"
RUNTIME = "runsc"
COWORK_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "cowork_mini"


def test_oracle_under_gvisor_scores_one_in_a_gvisor_sandbox(tmp_path: Path) -> None:
    run = run_pytest(TARGET, tmp_path / "runsc", "-k", "calculator", "--agent", "oracle",
                     "--runtime", RUNTIME, "--keep-sandboxes")
    assert (run.root / "run_manifest.json").is_file(), run.out
    run_id = run.manifest["run_id"]
    client = docker.from_env()
    try:
        assert run.rc == 0, run.out
        row = run.latest[FIXTURE_ID]
        assert row["score"] == 1.0 and row["resolved"] is True
        assert row["official_eval_status"] == "completed"
        assert row["tests_passed"] == row["tests_total"] == 3
        manifest = run.manifest
        assert manifest["config"]["sandbox.runtime"] == RUNTIME
        assert manifest["extra"]["sandbox_runtime"]["name"] == RUNTIME
        assert str(manifest["extra"]["sandbox_runtime"]["path"]).endswith("runsc")
        # the kept sandbox is the one the agent worked in: gVisor, not the host kernel
        sandbox = client.containers.get(row["details"]["container"])
        assert sandbox.attrs["HostConfig"]["Runtime"] == RUNTIME
        code, out = sandbox.exec_run(["dmesg"], user="agent")
        assert code == 0 and b"Starting gVisor" in out, out
        code, out = sandbox.exec_run(["cat", "/workspace/calculator.sh"], user="agent")
        assert code == 0 and out, out
    finally:
        sweep(run_id)
    left = client.containers.list(all=True, filters={"label": f"harness.run={run_id}"})
    assert left == [], [c.name for c in left]


def test_cowork_agent_container_runs_under_gvisor(tmp_path: Path) -> None:
    run = run_pytest("benchmarks/cowork_bench", tmp_path / "cowork", "--cowork-root",
                     str(COWORK_FIXTURE), "--allow-dirty-bench", "-k", "excel-sales-summary",
                     "--agent", "command", "--agent-command", "dmesg > kernel.txt",
                     "--runtime", RUNTIME, timeout=600)
    row = run.latest["excel-sales-summary"]
    assert row["outcome"] == "scored" and row["reason_code"] == "verifier_failed", row
    kernel = run.root / row["output_paths"]["workspace"] / "kernel.txt"
    assert "Starting gVisor" in kernel.read_text(), kernel.read_text()[:500]
    assert run.manifest["config"]["sandbox.runtime"] == RUNTIME


def test_unregistered_runtime_is_refused_before_any_sandbox(tmp_path: Path) -> None:
    run = run_pytest(TARGET, tmp_path / "bogus", "-k", "calculator", "--agent", "oracle",
                     "--runtime", "no-such-runtime")
    assert run.rc == 2, run.out
    assert "--runtime no-such-runtime: the Docker daemon has no runtime of that name" in run.out
    refusal = run.manifest["refusal"]
    assert refusal["reason"] == "runtime_unavailable", refusal
    assert run.rows == []
