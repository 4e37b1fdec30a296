"""The reference server's ``docker_exec`` executor against a real sandbox container."""

from __future__ import annotations

import time

import pytest

from harness.agents import AgentRequest
from harness.agents.gateway.agent import GatewayAgent
from harness.agents.gateway.client import GatewayClient
from tests.agents.agents_support import FAST

pytestmark = pytest.mark.docker


def _docker_body(container: str, plan: dict) -> dict:
    return {
        "description": "Build ./executable",
        "memory_mode": "empty",
        "executor_ref": {
            "type": "docker_exec",
            "id": "sb",
            "container_name": container,
            "network": "none",
            "workspace_backend_path": "/workspace",
        },
        "metadata": {"reference_plan": plan},
    }


def test_plan_runs_inside_the_container_as_the_configured_user(
    ref_server, sandbox_factory, tmp_path
):
    sb = sandbox_factory()
    server = ref_server({"docker_user": "1000:1000"})
    plan = {
        "steps": [
            {
                "write": {"path": "src/main.sh", "content": "echo hello from main\n", "mode": 493},
                "cost_usd": 0.2,
                "prompt_tokens": 50,
                "completion_tokens": 5,
            },
            {
                "run": "bash src/main.sh > out.txt && id -u >> out.txt && pwd >> out.txt",
                "env": {"STEP_VAR": "1"},
                "cost_usd": 0.3,
                "prompt_tokens": 70,
                "completion_tokens": 7,
            },
        ]
    }
    agent = GatewayAgent(server.url, policy=FAST)
    outcome = agent.run(
        AgentRequest(
            instance_id="d1",
            instance_dir=tmp_path / "inst",
            instruction="x",
            task_body=_docker_body(sb.name, plan),
            timeout_sec=60,
        )
    )
    assert outcome.completed and outcome.cost_usd == 0.5 and outcome.tokens.total == 132
    out = sb.exec(["cat", "/workspace/out.txt"], timeout=30).stdout.decode()
    assert out == "hello from main\n1000\n/workspace\n"


def test_cancel_stops_a_running_step_in_the_container(ref_server, sandbox_factory, tmp_path):
    sb = sandbox_factory()
    server = ref_server()
    plan = {"steps": [{"run": "sleep 45; touch /workspace/should_not_exist"}]}
    with GatewayClient(server.url, policy=FAST) as client:
        task_id = client.submit(_docker_body(sb.name, plan)).task_id
        server.wait_for(lambda s: s["tasks"][task_id] == "running")
        time.sleep(0.5)  # the step is executing
        assert client.cancel(task_id)
        result = client.wait(task_id, timeout_s=20)  # the step sleeps 45 s
    assert result.status == "cancelled"
    left = (
        sb.exec(
            ["/bin/sh", "-c", "ps -eo args | grep -c '[s]leep 45' || true"], user="root", timeout=30
        )
        .stdout.decode()
        .strip()
    )
    assert left == "0"
    assert sb.exec(["test", "-e", "/workspace/should_not_exist"], timeout=30).exit_code == 1


def test_step_deadline_in_the_container_is_deadline_local(ref_server, sandbox_factory, tmp_path):
    sb = sandbox_factory()
    server = ref_server()
    body = {**_docker_body(sb.name, {"steps": [{"run": "sleep 30"}]}), "timeout_sec": 1}
    outcome = GatewayAgent(server.url, policy=FAST).run(
        AgentRequest(
            instance_id="d3", instance_dir=tmp_path / "inst", instruction="x", task_body=body
        )
    )
    assert outcome.completed and outcome.truncated and outcome.reason_code == "deadline_local"


def test_missing_container_is_an_infra_failure(ref_server, tmp_path):
    server = ref_server()
    outcome = GatewayAgent(server.url, policy=FAST).run(
        AgentRequest(
            instance_id="d2",
            instance_dir=tmp_path / "inst",
            instruction="x",
            task_body=_docker_body("harness-no-such-container-xyz", {"steps": [{"run": "true"}]}),
        )
    )
    assert outcome.infra and not outcome.completed
    assert outcome.reason_code == "executor_unavailable"
    assert outcome.runtime_outcome.execution_status == "infra_failed"
