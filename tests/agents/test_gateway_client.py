"""The gateway client against the reference server over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.agents.base import AgentRequest
from harness.agents.gateway.agent import GatewayAgent
from harness.agents.gateway.checkpoint import read_checkpoint
from harness.agents.gateway.client import (
    ClientPollError,
    ClientPollTimeout,
    GatewayClient,
    GatewayDuplicate,
    GatewayNotReady,
    GatewayUnavailable,
    GatewayValidation,
    PollPolicy,
)
from harness.agents.gateway.run import reattach_decision, run_task
from harness.core.errors import RunInterrupted
from tests.agents.agents_support import FAST, free_port, task_body

PLAN = {
    "steps": [
        {
            "run": "printf 'int main(){}' > main.c",
            "cost_usd": 0.25,
            "prompt_tokens": 100,
            "completion_tokens": 10,
        },
        {
            "write": {"path": "compile.sh", "content": "#!/bin/sh\ncc main.c\n", "mode": 493},
            "cost_usd": 0.5,
            "prompt_tokens": 200,
            "completion_tokens": 30,
        },
    ],
    "result": "done",
}


def _run(
    server_url: str,
    tmp: Path,
    plan: dict | None = None,
    policy: PollPolicy = FAST,
    **fields: object,
):
    with GatewayClient(server_url, policy=policy) as client:
        return run_task(
            client, task_body(tmp / "ws", plan or PLAN, **fields),
            instance_dir=tmp / "inst",
            adapter="programbench",
            timeout_s=30,
        )


def test_happy_path_runs_plan_and_writes_body_checkpoint_result(ref_server, tmp_path):
    server = ref_server()
    run = _run(server.url, tmp_path)
    assert run.result.status == "completed"
    assert not run.reattached
    inst = tmp_path / "inst"
    body = json.loads((inst / "programbench_task_body.json").read_text())
    assert body["task_id"] == run.task_id and body["workspace_mode"] == "external"
    assert (tmp_path / "ws" / "main.c").read_text() == "int main(){}"
    assert (tmp_path / "ws" / "compile.sh").stat().st_mode & 0o777 == 0o755
    checkpoint = read_checkpoint(inst / "task_checkpoint.json")
    assert checkpoint is not None
    assert checkpoint.task_id == run.task_id and checkpoint.status == "completed"
    assert checkpoint.polls >= 1 and checkpoint.task_result is not None
    saved = json.loads((inst / "task_result.json").read_text())
    assert saved["status"] == "completed" and saved["total_rounds"] == 2
    assert server.state()["submissions"] == 1


def test_gateway_agent_outcome_has_cost_tokens_and_runtime_outcome(ref_server, tmp_path):
    server = ref_server()
    agent = GatewayAgent(server.url, policy=FAST)
    request = AgentRequest(
        instance_id="abc",
        instance_dir=tmp_path / "inst",
        instruction="x",
        task_body=task_body(tmp_path / "ws", PLAN),
        timeout_sec=30,
        adapter="programbench",
    )
    outcome = agent.run(request)
    assert outcome.completed and not outcome.infra and not outcome.truncated
    assert outcome.cost_usd == pytest.approx(0.75) and outcome.cost_known
    assert outcome.tokens.prompt == 300 and outcome.tokens.completion == 40
    assert outcome.tokens.total == 340
    assert outcome.runtime_outcome.available and outcome.runtime_outcome.status == "completed"
    assert outcome.runtime_outcome.execution_status == "completed"
    assert outcome.raw_result_path == str(tmp_path / "inst" / "task_result.json")
    assert set(outcome.output_paths) == {"task_body", "task_checkpoint", "task_result",
                                         "gateway_events"}
    body = json.loads((tmp_path / "inst" / "programbench_task_body.json").read_text())
    assert body["timeout_sec"] == 30  # filled from the request


def test_truncation_reason_is_reported(ref_server, tmp_path):
    server = ref_server()
    plan = {**PLAN, "reason_code": "budget_exhausted", "resource_limit": "budget"}
    agent = GatewayAgent(server.url, policy=FAST)
    outcome = agent.run(
        AgentRequest(
            instance_id="t",
            instance_dir=tmp_path / "inst",
            instruction="x",
            task_body=task_body(tmp_path / "ws", plan),
        )
    )
    assert outcome.completed and outcome.truncated and not outcome.infra
    assert outcome.reason_code == "budget_exhausted"
    assert outcome.runtime_outcome.resource_limit == "budget"


def test_failed_step_is_a_model_failure_not_infra(ref_server, tmp_path):
    server = ref_server()
    agent = GatewayAgent(server.url, policy=FAST)
    plan = {"steps": [{"run": "exit 3"}]}
    outcome = agent.run(
        AgentRequest(
            instance_id="t",
            instance_dir=tmp_path / "inst",
            instruction="x",
            task_body=task_body(tmp_path / "ws", plan),
        )
    )
    assert not outcome.completed and not outcome.infra
    assert outcome.reason_code == "step_failed"


def test_infra_failed_result_is_classified_infra(ref_server, tmp_path):
    server = ref_server({"infra_failure": "llm_api_error"})
    agent = GatewayAgent(server.url, policy=FAST)
    outcome = agent.run(
        AgentRequest(
            instance_id="t",
            instance_dir=tmp_path / "inst",
            instruction="x",
            task_body=task_body(tmp_path / "ws", PLAN),
        )
    )
    assert outcome.infra and not outcome.completed
    assert outcome.reason_code == "llm_api_error"
    assert outcome.runtime_outcome.execution_status == "infra_failed"


def test_slow_responses_beyond_request_timeout_are_retried(ref_server, tmp_path):
    server = ref_server(
        {
            "faults": [
                {"kind": "delay", "match": "GET /api/tasks/*", "count": 2, "delay_s": 0.6},
            ]
        }
    )
    policy = FAST.model_copy(update={"request_timeout_s": 0.3})
    run = _run(server.url, tmp_path, policy=policy)
    assert run.result.status == "completed"
    faults = server.state()["faults"]
    assert faults[0]["applied"] == 2


def test_5xx_burst_during_polling_is_retried(ref_server, tmp_path):
    server = ref_server(
        {
            "faults": [
                {"kind": "error", "match": "GET /api/tasks/*", "count": 4, "status": 502},
            ]
        }
    )
    run = _run(server.url, tmp_path)
    assert run.result.status == "completed"
    assert server.state()["faults"][0]["applied"] == 4
    assert server.state()["submissions"] == 1


def test_dropped_connections_are_retried_and_submit_is_not_duplicated(ref_server, tmp_path):
    server = ref_server(
        {
            "faults": [
                {"kind": "drop", "match": "POST /api/tasks", "count": 1},
                {"kind": "drop", "match": "GET /api/tasks/*", "count": 3},
            ]
        }
    )
    run = _run(server.url, tmp_path)
    assert run.result.status == "completed"
    state = server.state()
    assert [f["applied"] for f in state["faults"]] == [1, 3]
    assert state["submissions"] == 1  # the dropped POST was answered by asking for the id


def test_errors_beyond_the_budget_leave_the_task_reattachable(ref_server, tmp_path):
    server = ref_server({"faults": [{"kind": "error", "match": "GET /api/tasks/*", "status": 500}]})
    policy = FAST.model_copy(update={"error_budget_s": 0.5})
    with pytest.raises(ClientPollError) as info:
        _run(server.url, tmp_path, policy=policy)
    assert info.value.reason_code == "client_poll_error_reattachable"
    checkpoint = read_checkpoint(tmp_path / "inst" / "task_checkpoint.json")
    assert checkpoint is not None and checkpoint.task_id == info.value.task_id


@pytest.mark.parametrize("keep", ["reattach", "keep_sandbox"])
def test_never_settling_task_times_out_reattachable(ref_server, tmp_path, keep):
    """With a workspace that outlives the run (the adapter's ``reattach``) or a sandbox the
    adapter keeps for a reattach (``keep_sandbox``), the task is left running for a resume to
    reattach to."""
    server = ref_server({"never_settle": True})
    agent = GatewayAgent(server.url, policy=FAST.model_copy(update={"client_grace_s": 0.0}))
    outcome = agent.run(
        AgentRequest(
            instance_id="t",
            instance_dir=tmp_path / "inst",
            instruction="x",
            task_body=task_body(tmp_path / "ws", PLAN),
            timeout_sec=0.5,
            extra={keep: True},
        )
    )
    assert outcome.infra and not outcome.completed
    assert outcome.reason_code == "client_poll_timeout_reattachable"
    assert outcome.details["reattachable"] is True
    assert outcome.runtime_outcome.status == "running"
    assert server.state()["cancels"] == []  # not cancelled: reattachable
    # A resumed run reattaches to it instead of submitting again.
    with GatewayClient(server.url, policy=FAST) as client:
        decision = reattach_decision(client, tmp_path / "inst" / "task_checkpoint.json")
    assert decision.action == "reattach" and decision.task_id == outcome.task_id


def test_give_up_cancels_the_task_when_its_sandbox_ends_with_the_instance(ref_server, tmp_path):
    """Issue 14 point 1: when the adapter does not keep the sandbox, a task the client gave up
    on would run (and spend) against a removed sandbox: it is cancelled and the row says so."""
    server = ref_server({"never_settle": True})
    agent = GatewayAgent(server.url, policy=FAST.model_copy(update={"client_grace_s": 0.0}))
    outcome = agent.run(AgentRequest(instance_id="t", instance_dir=tmp_path / "inst",
                                     instruction="x", task_body=task_body(tmp_path / "ws", PLAN),
                                     timeout_sec=0.5))
    assert outcome.infra and outcome.task_id is not None
    assert outcome.details["reattachable"] is False
    assert outcome.details["cancelled_on_give_up"] is True
    assert server.state()["cancels"] == [outcome.task_id]
    assert server.state()["tasks"][outcome.task_id] in {"cancel_requested", "cancelled"}


def test_a_resume_cancels_the_earlier_attempts_task_before_submitting(ref_server, tmp_path):
    """Issue 14 point 1: a resumed instance whose ancestor left its gateway task running
    (SIGKILL mid-wait: a checkpoint, no row) cancels that task and waits for it to settle
    before it submits, so there are never two live paid tasks for one instance."""
    server = ref_server({"never_settle": True})
    ancestor = tmp_path / "ancestor"
    with GatewayClient(server.url, policy=FAST) as client:  # the killed run's submission
        from harness.agents.gateway.checkpoint import write_checkpoint

        old_id = client.submit(task_body(tmp_path / "ws", PLAN)).task_id
        ancestor.mkdir()
        write_checkpoint(ancestor / "task_checkpoint.json", old_id, "running", None,
                         server.url, 3)
    assert server.state()["tasks"][old_id] in {"scheduled", "running"}

    agent = GatewayAgent(server.url, policy=FAST.model_copy(update={"client_grace_s": 0.0}))
    outcome = agent.run(AgentRequest(
        instance_id="t", instance_dir=tmp_path / "inst", instruction="x",
        task_body=task_body(tmp_path / "ws2", PLAN), timeout_sec=0.5,
        extra={"ancestor_checkpoints": [str(ancestor / "task_checkpoint.json")]}))
    state = server.state()
    assert state["tasks"][old_id] == "cancelled"  # settled before the new one was sent
    assert state["cancels"][0] == old_id
    (orphan,) = outcome.details["orphan_tasks"]
    assert orphan["task_id"] == old_id and orphan["action"] == "cancelled"
    assert orphan["status_before"] in {"scheduled", "running"}
    assert orphan["status"] == "cancelled"
    live = [t for t, status in state["tasks"].items()
            if status in {"requested", "scheduled", "running"}]
    assert len(live) <= 1


def test_a_task_that_will_not_settle_blocks_a_second_submission(ref_server, tmp_path):
    """When the earlier attempt's task does not settle after its cancel, the instance is an
    infra failure and nothing new is submitted."""
    from harness.agents.gateway.checkpoint import write_checkpoint
    from harness.agents.gateway.errors import GatewayError

    server = ref_server({"faults": [{"kind": "error", "match": "POST /api/tasks/*/cancel",
                                     "status": 500}], "never_settle": True})
    ancestor = tmp_path / "ancestor"
    ancestor.mkdir()
    with GatewayClient(server.url, policy=FAST) as client:
        old_id = client.submit(task_body(tmp_path / "ws", PLAN)).task_id
    write_checkpoint(ancestor / "task_checkpoint.json", old_id, "running", None, server.url, 1)
    agent = GatewayAgent(server.url, policy=FAST)
    with pytest.raises(GatewayError) as info:
        agent.run(AgentRequest(
            instance_id="t", instance_dir=tmp_path / "inst", instruction="x",
            task_body=task_body(tmp_path / "ws2", PLAN), timeout_sec=0.5,
            extra={"ancestor_checkpoints": [str(ancestor / "task_checkpoint.json")]}))
    assert info.value.reason_code == "gateway_orphan_live"
    assert server.state()["submissions"] == 1  # only the earlier attempt's


def test_wait_never_treats_error_text_or_cancel_requested_as_terminal(ref_server, tmp_path):
    server = ref_server({"never_settle": True})
    plan = {**PLAN, "progress_error": "failed: provider timeout, retrying"}
    with GatewayClient(server.url, policy=FAST) as client:
        task_id = client.submit(task_body(tmp_path / "ws", plan)).task_id
        with pytest.raises(ClientPollTimeout) as info:
            client.wait(task_id, timeout_s=0.6)
        assert info.value.last is not None and info.value.last.status == "running"
        assert info.value.last.error == "failed: provider timeout, retrying"
        seen: list[str | None] = []
        assert client.cancel(task_id)
        result = client.wait(task_id, timeout_s=10, on_poll=lambda r: seen.append(r.status))
    assert result.status == "cancelled"
    assert seen[-1] == "cancelled" and set(seen) <= {"cancel_requested", "cancelled"}


def test_duplicate_task_id_is_409(ref_server, tmp_path):
    server = ref_server({"preexisting_task_ids": ["taken-1"]})
    with GatewayClient(server.url, policy=FAST) as client:
        with pytest.raises(GatewayDuplicate) as info:
            client.submit(task_body(tmp_path / "ws", PLAN, task_id="taken-1"))
        assert info.value.status_code == 409 and "duplicate_task_id" in str(info.value)
        client.submit(task_body(tmp_path / "ws", PLAN, task_id="fresh-1"))
        with pytest.raises(GatewayDuplicate):
            client.submit(task_body(tmp_path / "ws", PLAN, task_id="fresh-1"))
    assert server.state()["submissions"] == 1


def test_validation_errors_are_400_or_refused_before_sending(ref_server, tmp_path):
    server = ref_server({"allowed_types": ["task"]})
    with GatewayClient(server.url, policy=FAST) as client:
        with pytest.raises(GatewayValidation) as local:
            client.submit({"description": "x", "executor_ref": {"type": "docker_exec"}})
        assert "container_name" in str(local.value)
        with pytest.raises(GatewayValidation) as remote:
            client.submit(task_body(tmp_path / "ws", PLAN, type="evolution"))
        assert remote.value.status_code == 400 and "internal" in str(remote.value)
    assert server.state()["submit_attempts"] == 1


def test_503_while_starting_is_retried_then_accepted(ref_server, tmp_path):
    server = ref_server({"starting_posts": 3})
    run = _run(server.url, tmp_path)
    assert run.result.status == "completed"
    state = server.state()
    assert state["submit_attempts"] == 4 and state["submissions"] == 1


def test_503_beyond_the_bound_is_not_ready(ref_server, tmp_path):
    server = ref_server({"starting_s": 60})
    policy = FAST.model_copy(update={"not_ready_budget_s": 0.4})
    # Refused within its budget: the server goes on starting for a minute.
    with GatewayClient(server.url, policy=policy) as client, pytest.raises(GatewayNotReady) as info:
        client.submit(task_body(tmp_path / "ws", PLAN))
    assert info.value.reason_code == "gateway_not_ready"
    assert server.state()["supervisor_ready"] is False


def test_unreachable_server_is_gateway_unavailable(tmp_path):
    policy = FAST.model_copy(update={"error_budget_s": 0.3})
    with GatewayClient(f"http://127.0.0.1:{free_port()}", policy=policy) as client:
        with pytest.raises(GatewayUnavailable):
            client.submit(task_body(tmp_path / "ws", PLAN))
        assert client.cancel("nobody") is False  # best effort, never raises


def test_reattach_rules_for_settled_tasks(ref_server, tmp_path):
    server = ref_server()
    inst = tmp_path / "inst"
    failed = _run(server.url, tmp_path, plan={"steps": [{"run": "exit 1"}]})
    assert failed.result.status == "failed"
    with GatewayClient(server.url, policy=FAST) as client:
        decision = reattach_decision(client, inst / "task_checkpoint.json")
        assert decision.action == "fresh" and decision.reason == "task_failed"
        again = run_task(
            client, task_body(tmp_path / "ws", PLAN),
            instance_dir=inst,
            adapter="programbench",
            timeout_s=30,
        )
        assert not again.reattached and again.task_id != failed.task_id
        # completed -> reattach, no resubmission
        third = run_task(
            client, task_body(tmp_path / "ws", PLAN),
            instance_dir=inst,
            adapter="programbench",
            timeout_s=30,
        )
        assert third.reattached and third.task_id == again.task_id
    assert server.state()["submissions"] == 2
    # unknown to the server (e.g. another server) -> fresh
    other = ref_server()
    with GatewayClient(other.url, policy=FAST) as client:
        decision = reattach_decision(client, inst / "task_checkpoint.json")
    assert decision.action == "fresh" and decision.reason == "task_unknown"


def test_run_interrupted_cancels_the_task(ref_server, tmp_path):
    """A stop request (RunInterrupted raised while waiting) cancels the agent's task."""
    server = ref_server({"never_settle": True})

    def stop_on_first_sleep(_seconds: float) -> None:
        raise RunInterrupted("signal_15")

    client = GatewayClient(server.url, policy=FAST, sleep=stop_on_first_sleep)
    with client, pytest.raises(RunInterrupted):
        run_task(
            client, task_body(tmp_path / "ws", PLAN),
            instance_dir=tmp_path / "inst",
            adapter="programbench",
            timeout_s=30,
        )
    checkpoint = read_checkpoint(tmp_path / "inst" / "task_checkpoint.json")
    assert checkpoint is not None
    state = server.wait_for(lambda s: s["tasks"].get(checkpoint.task_id) == "cancelled")
    assert state["cancels"] == [checkpoint.task_id]


def test_an_oversized_answer_is_not_read_whole(tmp_path):
    """A task result bigger than the cap (e.g. an agent's huge output echoed back) stops
    the read at the cap with a clear reason; memory and the instance folder stay bounded."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from harness.agents.gateway.errors import GatewayError
    from harness.agents.gateway.http import MAX_RESPONSE_BYTES, GatewayHTTP

    class Huge(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"task_id": "t", "status": "completed", "result": "')
            chunk = b"x" * (1 << 20)
            try:
                for _ in range((MAX_RESPONSE_BYTES >> 20) + 8):
                    self.wfile.write(chunk)
            except OSError:
                pass  # the client stopped reading: expected

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Huge)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        with GatewayHTTP(url) as http, pytest.raises(GatewayError) as info:
            http.get_task("t")
        assert info.value.reason_code == "gateway_response_too_large"
    finally:
        server.shutdown()
