"""The gateway agent builds its task from the neutral request (issue 42): a benchmark names
its sandbox, instruction, timeout and terms, never an agent server's body."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.agents.base import AgentRequest, AgentTerms
from harness.agents.gateway.agent import own_body
from harness.core.errors import InfraError


def request(sandbox: object | None, workdir: str = "/data") -> AgentRequest:
    if sandbox is not None:
        sandbox = SimpleNamespace(name="harness-abc", spec=SimpleNamespace(
            workdir=workdir, network="none", binds=()))
    return AgentRequest(instance_id="task-1", instance_dir=Path("/nonexistent"),
                        instruction="Write hello.", sandbox=sandbox,  # type: ignore[arg-type]
                        timeout_sec=90.0, adapter="harbor",
                        terms=AgentTerms(metadata={"harbor_task": "task-1"}))


def test_the_body_names_the_sandbox_its_workdir_and_the_request() -> None:
    body = own_body(request(object())).model_dump(mode="json", exclude_none=True)
    ref = body["executor_ref"]
    assert (ref["type"], ref["container_name"], ref["workspace_backend_path"]) == (
        "docker_exec", "harness-abc", "/data")
    assert body["description"] == "Write hello." and body["timeout_sec"] == 90.0
    assert body["metadata"] == {"harbor_task": "task-1"} and body["source"] == "harbor"
    assert body["allowed_resources"] == {"web": False, "network": False, "internet": False}
    assert body["task_id"].startswith("harbor-task-1-")
    # each try is its own task on the server
    assert own_body(request(object())).task_id != body["task_id"]


def test_a_task_in_the_image_root_names_no_workspace() -> None:
    body = own_body(request(object(), workdir="/")).model_dump(mode="json", exclude_none=True)
    assert "workspace_backend_path" not in body["executor_ref"]


def test_without_a_sandbox_the_gateway_agent_refuses_in_one_line() -> None:
    with pytest.raises(InfraError) as err:
        own_body(request(None))
    assert err.value.reason_code == "gateway_task_body_missing"
    assert "\n" not in str(err.value) and "task-1" in str(err.value)
