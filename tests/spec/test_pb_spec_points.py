"""Issue 43: the specification's small points a user sees (no Docker: dry runs, refusals and
the defaults the official CLI is called with)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from benchmarks.programbench.official_eval import (
    CliSetupError,
    default_docker_cpus,
    programbench_cli,
)
from harness.run.plan import default_runs_root
from tests.support.suite import run_cli, run_pytest

TARGET = "benchmarks/programbench"


def test_eval_defaults_follow_the_specification(monkeypatch: pytest.MonkeyPatch) -> None:
    """``programbench eval`` gets --docker-cpus 4 (capped at this host's CPUs, which the
    engine cannot exceed), ``$PROGRAMBENCH_DOCKER_CPUS`` overrides it, and a bad value is one
    line naming the variable."""
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert default_docker_cpus({}) == 4
    assert default_docker_cpus({"PROGRAMBENCH_DOCKER_CPUS": "6"}) == 6
    assert default_docker_cpus({"PROGRAMBENCH_DOCKER_CPUS": "16"}) == 8
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert default_docker_cpus({}) == 2
    with pytest.raises(CliSetupError, match="PROGRAMBENCH_DOCKER_CPUS=four is not a whole"):
        default_docker_cpus({"PROGRAMBENCH_DOCKER_CPUS": "four"})


def test_programbench_python_names_the_interpreter_of_the_official_cli(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROGRAMBENCH_PYTHON", sys.executable)
    assert programbench_cli() == [sys.executable, "-m", "programbench"]
    monkeypatch.setenv("PROGRAMBENCH_PYTHON", "/nonexistent/python3.11")
    with pytest.raises(CliSetupError, match=r"PROGRAMBENCH_PYTHON=/nonexistent/python3\.11 is"):
        programbench_cli()


def test_the_ouroboros_runs_root_is_honoured_beside_ours(tmp_path: Path) -> None:
    assert default_runs_root({"OUROBOROS_BENCH_RUNS_ROOT": str(tmp_path)}) == tmp_path
    ours = tmp_path / "ours"
    env = {"OUROBOROS_BENCH_RUNS_ROOT": str(tmp_path), "BENCH_RUNS_ROOT": str(ours)}
    assert default_runs_root(env) == ours


def _refused(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> str:
    run = run_pytest(TARGET, tmp_path / "run", "--pb-fixtures", "--dry-run", *args, env=env)
    assert run.rc == 2, run.out
    return run.out


def test_bad_memory_and_programbench_python_are_refused_at_admission(tmp_path: Path) -> None:
    out = _refused(tmp_path, "--agent", "oracle", "--pb-memory", "lots")
    assert "--pb-memory 'lots' is not a size; pass e.g. 16g or 512m" in out
    out = _refused(tmp_path, "--agent", "oracle",
                   env={"PROGRAMBENCH_PYTHON": "/nonexistent/python3.11"})
    assert "PROGRAMBENCH_PYTHON=/nonexistent/python3.11 is not an executable Python" in out


def test_a_refused_run_records_the_selection_it_refused(tmp_path: Path) -> None:
    """Issue 43 (8): an agent_missing refusal's manifest names the units it was asked for."""
    run = run_pytest(TARGET, tmp_path / "run", "--pb-fixtures", "--attempts", "2")
    assert run.rc == 2, run.out
    manifest = run.manifest
    assert manifest["refusal"]["reason"] == "agent_missing"
    selection = manifest["selection"]
    assert selection["source"] == "requested" and not selection["resolved"]
    assert selection["count"] == 6 and "programbench/testorg__calculator.abc1234@2" in (
        selection["instance_ids"])


def test_a_dry_run_says_no_scores_exist(tmp_path: Path) -> None:
    run = run_pytest(TARGET, tmp_path / "run", "--pb-fixtures", "--dry-run", "--agent", "oracle")
    assert run.rc == 0, run.out
    assert "dry run: no scores exist" in run.out and "mean score 0.0000" not in run.out
    assert json.loads((run.root / "run_manifest.json").read_text())["mean_score"] is None


def test_cowork_audit_refuses_a_programbench_run(tmp_path: Path) -> None:
    run = run_pytest(TARGET, tmp_path / "run", "--pb-fixtures", "--dry-run", "--agent", "oracle")
    out = tmp_path / "audit.json"
    done = run_cli("cowork", "audit", str(run.root), "--output", str(out))
    assert done.returncode == 2 and not out.exists()
    assert "is a run of programbench, not of Cowork Bench; pass a Cowork run root" in done.stderr


def test_the_body_sends_the_host_workspace_as_the_specification_does(tmp_path: Path) -> None:
    """Issue 43 (1): with the gateway agent the body names the host workspace (both fields);
    ``--pb-workspace sandbox`` keeps it inside the container, the body without a host path."""
    for mode, host in (("auto", True), ("sandbox", False)):
        run = run_pytest(TARGET, tmp_path / mode, "--pb-fixtures", "--dry-run", "-k",
                         "calculator", "--agent", "gateway", "--pb-workspace", mode)
        assert run.rc == 0, run.out
        folder = run.root / "programbench" / "testorg__calculator.abc1234"
        body = json.loads((folder / "programbench_task_body.json").read_text())
        want = str((folder / "host_workspace" / "workspace").absolute()) if host else None
        assert body.get("workspace_root") == want
        assert body["executor_ref"].get("workspace_host_path") == want
