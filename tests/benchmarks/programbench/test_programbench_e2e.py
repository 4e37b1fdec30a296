"""ProgramBench end to end on the offline fixture, scored by the real ``programbench`` CLI
in real Docker: the README's main job, through every agent kind."""

from __future__ import annotations

import json
from pathlib import Path

import docker
import pytest

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench.fixture import ensure_fixture
from benchmarks.programbench.submission import list_submission
from tests.agents.agents_support import start_server
from tests.support.suite import run_pytest

TARGET = "benchmarks/programbench"


def fixture_row(run, *, host_workspace: bool = False) -> dict:
    row = run.latest[FIXTURE_ID]
    assert Path(run.root / row["output_paths"]["eval_json"]).is_file()
    assert (run.root / row["output_paths"]["submission"]).is_file()
    folder = run.root / "programbench" / FIXTURE_ID / "host_workspace" / "workspace"
    if host_workspace:  # the specification's end-to-end mode: the server's host folder,
        # removed once the submission is collected
        body = json.loads((run.root / row["output_paths"]["task_body"]).read_text())
        assert body["executor_ref"]["workspace_host_path"] == str(folder)
        assert not folder.parent.exists()
        return row
    # else the workspace is streamed into the submission, never copied to the host as a tree
    assert "workspace" not in row["output_paths"]
    assert not folder.exists()
    return row


def submitted(run) -> list[str]:
    names = list_submission(run.root / run.latest[FIXTURE_ID]["output_paths"]["submission"])
    assert not any(n.startswith(".git") or n in ("executable", "reference_executable")
                   for n in names)
    return sorted(names)


def no_containers(run_id: str) -> None:
    client = docker.from_env()
    left = client.containers.list(all=True, filters={"label": f"harness.run={run_id}"})
    assert left == [], [c.name for c in left]


@pytest.mark.docker
def test_oracle_scores_one_and_nop_scores_zero(tmp_path: Path) -> None:
    oracle = run_pytest(TARGET, tmp_path / "oracle", "--pb-fixtures", "-k", "calculator", "--agent", "oracle")
    assert oracle.rc == 0, oracle.out
    row = fixture_row(oracle)
    assert row["score"] == 1.0 and row["resolved"] is True and row["near_resolved"] is True
    assert row["official_eval_status"] == "completed"
    assert row["tests_passed"] == row["tests_total"] == 3
    # the grader's resolved plugins (issue 45): the fixture image's pytest, no reruns
    plugins = row["details"]["eval"]["test_plugins"]
    assert plugins["pytest"][0].isdigit() and "pytest-rerunfailures" not in plugins
    assert oracle.manifest["extra"]["programbench_grader"]["scores_correctly"] is True
    assert oracle.manifest["selection"]["count"] == 1
    assert submitted(oracle) == ["README.md", "calculator.sh", "compile.sh"]
    assert oracle.manifest["extra"]["official_parity"]["ok"] is True  # == programbench info
    no_containers(oracle.manifest["run_id"])
    nop = run_pytest(TARGET, tmp_path / "nop", "--pb-fixtures", "-k", "calculator", "--agent", "nop")
    assert nop.rc == 0, nop.out  # settled (unresolved) is not an infrastructure failure
    row = fixture_row(nop)
    assert row["score"] == 0.0 and row["resolved"] is False
    assert row["official_eval_status"] == "completed"
    assert row["details"]["eval"]["error_code"] == "compile_failed"
    assert submitted(nop) == ["README.md"]
    assert nop.manifest["extra"]["official_parity"]["ok"] is True
    nop.result.assert_outcomes(failed=1)


@pytest.mark.docker
def test_batch_eval_scores_at_session_end(tmp_path: Path) -> None:
    run = run_pytest(TARGET, tmp_path / "batch", "--pb-fixtures", "-k", "calculator", "--agent", "oracle",
                     "--pb-eval", "batch")
    assert run.rc == 0, run.out
    pending, final = [r for r in run.rows if r["instance_id"] == FIXTURE_ID]
    assert pending["official_eval_status"] == "pending" and pending["score"] is None
    assert final["official_eval_status"] == "completed" and final["score"] == 1.0
    assert final["resolved"] is True and final["details"]["programbench"]["executable_hash"]
    assert (run.root / "programbench_info.txt").read_text().count(FIXTURE_ID) == 1
    assert run.manifest["mean_score"] == 1.0


@pytest.mark.docker
def test_gateway_replays_the_oracle_through_the_reference_server(tmp_path: Path) -> None:
    files = ensure_fixture().oracle_contents()
    steps = [{"write": {"path": rel, "content": data.decode(),
                        "mode": 0o755 if rel.endswith(".sh") else 0o644},
              "cost_usd": 0.125, "prompt_tokens": 1000, "completion_tokens": 200}
             for rel, data in sorted(files.items())]
    server = start_server(tmp_path / "server", {"default_plan": {"steps": steps},
                                                "docker_user": "agent"})
    try:
        run = run_pytest(TARGET, tmp_path / "gw", "--pb-fixtures", "-k", "calculator", "--agent", "gateway",
                         "--gateway-url", server.url, "--gateway-poll-sec", "0.2")
    finally:
        server.stop()
    assert run.rc == 0, run.out
    row = fixture_row(run, host_workspace=True)  # --agent gateway: --pb-workspace auto
    assert row["score"] == 1.0 and row["resolved"] is True
    assert row["cost_usd"] == 0.125 * len(steps) and row["cost_known"] is True
    assert row["tokens"]["prompt"] == 1000 * len(steps)
    body = json.loads((run.root / row["output_paths"]["task_body"]).read_text())
    assert body["executor_ref"]["type"] == "docker_exec"
    assert body["executor_ref"]["network"] == "none"
    artifact = body["resource_policy"]["protected_artifacts"][0]
    assert "/workspace/reference_executable" in artifact["paths"]
    assert body["allowed_resources"] == {"web": False, "network": False, "internet": False}
    assert run.manifest["extra"]["runtime_attestation"]["ok"] is True


def test_dry_run_writes_200_task_bodies_without_containers(tmp_path: Path) -> None:
    # Not a docker test: DOCKER_HOST points nowhere (tests/conftest.py), so the dry run
    # proves it needs no engine at all, and no container can have been created.
    run = run_pytest(TARGET, tmp_path / "dry", "--dry-run")
    assert run.rc == 0, run.out
    assert run.manifest["outcome"] == "dry_run" and run.manifest["selection"]["count"] == 200
    bodies = list((run.root / "programbench").glob("*/programbench_task_body.json"))
    assert len(bodies) == 200
    assert FIXTURE_ID not in {p.parent.name for p in bodies}
    body = json.loads(bodies[0].read_text())
    assert body["timeout_sec"] == 21600
    assert body["metadata"]["budget_profile"]["improvement_policy"] == "until_deadline"
    order = json.loads((run.root / "instance_order.json").read_text())
    assert order["count"] == 200  # the offline fixture tasks never join a real selection
    assert not [i for i in order["instance_ids"] if i.startswith("testorg__")]
    assert (run.root / "run_manifest.json").is_file()
    assert run.latest and all(r["reason_code"] == "dry_run" for r in run.latest.values())
    assert not [r for r in run.latest.values() if "container" in r["details"].get("engine", {})]


@pytest.mark.docker
def test_missing_image_is_infra_not_a_score(tmp_path: Path) -> None:
    # --pull never: the image is not here and may not be fetched
    run = run_pytest(TARGET, tmp_path / "missing", "--instance", "abishekvashok__cmatrix.5c082c6",
                     "--agent", "nop", "--pull", "never")
    assert run.rc == 1, run.out
    row = run.latest["abishekvashok__cmatrix.5c082c6"]
    assert row["status"] == "infra_failed" and row["reason_code"] == "image_missing"
    assert row["score"] is None
    assert "programbench/abishekvashok_1776_cmatrix.5c082c6:task_cleanroom_v6" in row["error"]
    # the default (--pull missing) pulls; no registry answers here: a pull failure, not a score
    run = run_pytest(TARGET, tmp_path / "unpulled", "--instance",
                     "abishekvashok__cmatrix.5c082c6", "--agent", "nop", "--pull-retries", "0")
    assert run.rc == 1, run.out
    row = run.latest["abishekvashok__cmatrix.5c082c6"]
    assert row["status"] == "infra_failed" and row["reason_code"] == "image_pull_failed"
    assert row["score"] is None and "programbench/abishekvashok_1776_cmatrix" in row["error"]
