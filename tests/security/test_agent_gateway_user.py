"""Gateway agents never run as root (issue 11 item 4): the task body's ``executor_ref``
carries the unprivileged user, the reference agent server runs every ``docker exec`` step as
that user and refuses root. A scripted plan on the ProgramBench fixture, real Docker."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import httpx
import pytest

from benchmarks.programbench import FIXTURE_ID
from tests.agents.agents_support import start_server
from tests.security.agentexec_support import TARGET
from tests.support.suite import run_pytest

pytestmark = pytest.mark.docker


def step(run: str) -> dict:
    return {"run": run, "continue_on_error": True, "cost_usd": 0.01}


def test_gateway_steps_run_as_the_agent_user_and_cannot_read_the_reference(
    tmp_path: Path,
) -> None:
    plan = {"steps": [
        step("id -u; id -un"),
        step("cat /workspace/reference_executable > /workspace/stolen.bin"),
        step("kill -TERM 1"),  # PID 1 of the sandbox is root's
    ]}  # fmt: skip
    server = start_server(tmp_path / "server", {"default_plan": plan})  # no docker_user set
    try:
        run = run_pytest(TARGET, tmp_path / "gw", "--pb-fixtures", "-k", "calculator", "--agent", "gateway",
                         "--gateway-url", server.url, "--gateway-poll-sec", "0.2")
    finally:
        server.stop()
    row = run.latest[FIXTURE_ID]
    assert row["infra"] is False, (row["reason_code"], row.get("error"))
    body = json.loads((run.root / row["output_paths"]["task_body"]).read_text())
    assert body["executor_ref"]["user"] == "agent"
    result = json.loads((run.root / row["output_paths"]["task_result"]).read_text())
    who, steal, kill = result["steps"]
    assert who["exit_code"] == 0 and who["output_tail"] == "1000\nagent\n"
    assert steal["exit_code"] != 0 and "Permission denied" in steal["output_tail"]
    assert kill["exit_code"] != 0
    # The workspace reaches the host only inside submission.tar.gz.
    with tarfile.open(run.root / row["output_paths"]["submission"], "r:gz") as tar:
        stolen = [m for m in tar.getmembers() if m.name.lstrip("./") == "stolen.bin"]
    assert all(m.isreg() and m.size == 0 for m in stolen), stolen
    assert row["official_eval_status"] == "completed" and row["score"] == 0.0


def test_reference_server_refuses_a_root_executor(tmp_path: Path) -> None:
    server = start_server(tmp_path / "server", {})
    try:
        for user in ("root", "0", "0:0"):
            body = {"description": "x", "executor_ref": {
                "type": "docker_exec", "container_name": "any", "user": user}}  # fmt: skip
            answer = httpx.post(f"{server.url}/api/tasks", json=body, timeout=10)
            assert answer.status_code == 400 and "may not be root" in answer.text, answer.text
    finally:
        server.stop()
