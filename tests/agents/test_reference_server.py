"""The reference agent server's own HTTP behaviour (what a real server's client relies on)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import httpx

from harness.agents.reference_server.server import agent_server_command
from tests.agents.agents_support import REPO, task_body


def _post(url: str, path: str, body: object) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, timeout=5, trust_env=False)


def test_routes_statuses_and_envelope(ref_server, tmp_path):
    server = ref_server({"runtime_version": "6.97.2", "app_version": "6.97.2-app"})
    health = httpx.get(f"{server.url}/api/health", trust_env=False).json()
    assert health == {
        "status": "ok",
        "version": "6.97.2-app",
        "app_version": "6.97.2-app",
        "runtime_version": "6.97.2",
    }
    assert server.state()["supervisor_ready"] is True
    created = _post(
        server.url, "/api/tasks", task_body(tmp_path / "ws", {"steps": []}, task_id="abc-1")
    )
    assert created.status_code == 200
    assert created.json() == {"ok": True, "task_id": "abc-1", "status": "scheduled"}
    envelope = server.task("abc-1")
    assert envelope["status"] in {"scheduled", "running", "completed"}
    server.wait_for(lambda s: s["tasks"]["abc-1"] == "completed")
    envelope = server.task("abc-1")
    for field in (
        "reason_code",
        "outcome_axes",
        "loop_outcome",
        "prompt_tokens",
        "completion_tokens",
        "total_rounds",
        "accounted_upper_bound_usd",
        "cost_known",
        "cost_final",
        "cost_with_children_partial",
    ):
        assert field in envelope
    assert envelope["outcome_axes"]["lifecycle"] == {"status": "completed"}
    listing = httpx.get(f"{server.url}/api/tasks", trust_env=False).json()
    assert listing == {"tasks": [{"task_id": "abc-1", "status": "completed"}]}
    assert httpx.get(f"{server.url}/api/tasks/nope", trust_env=False).status_code == 404
    assert _post(server.url, "/api/tasks/abc-1/cancel", {}).status_code == 404  # settled
    assert httpx.get(f"{server.url}/api/nothing", trust_env=False).status_code == 404


def test_submit_refusals(ref_server, tmp_path):
    server = ref_server({"protected_roots": [str(tmp_path / "server-data")]})
    not_json = httpx.post(f"{server.url}/api/tasks", content=b"{", trust_env=False)
    assert not_json.status_code == 400
    body = task_body(tmp_path / "ws")
    body["metadata"]["executor_ref"] = {"type": "local"}
    nested = _post(server.url, "/api/tasks", body)
    assert nested.status_code == 400 and "top-level" in nested.json()["error"]
    overlap = task_body(tmp_path / "server-data" / "ws")
    assert _post(server.url, "/api/tasks", overlap).status_code == 400
    bad_plan = task_body(tmp_path / "ws", {"steps": [{"run": 1}]})
    assert _post(server.url, "/api/tasks", bad_plan).status_code == 400
    secret_body = {"description": "", "context": "sk-should-not-echo"}
    answer = _post(server.url, "/api/tasks", secret_body)
    assert answer.status_code == 400 and "sk-should-not-echo" not in answer.text
    assert server.state()["submissions"] == 0


def test_cancel_with_cascade_and_state_counters(ref_server, tmp_path):
    server = ref_server({"never_settle": True})
    task_id = _post(server.url, "/api/tasks", task_body(tmp_path / "ws")).json()["task_id"]
    answer = _post(server.url, f"/api/tasks/{task_id}/cancel", {"cascade": True})
    assert answer.json() == {"ok": True, "task_id": task_id, "cascade": True}
    state = server.wait_for(lambda s: s["tasks"][task_id] == "cancelled")
    assert state["cancels"] == [task_id]


def test_cli_bad_config_exits_2(tmp_path, capsys):
    config = tmp_path / "bad.json"
    config.write_text(json.dumps({"faults": [{"kind": "explode"}]}))
    assert agent_server_command(["--config", str(config), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("harness agent-server: bad config") and err.count("\n") == 1


def test_cli_serves_until_sigterm_and_exits_0(tmp_path):
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness.agents.reference_server.server",
            "--port",
            "0",
            "--port-file",
            str(port_file),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("reference agent server listening on http://127.0.0.1:")
        port = int(port_file.read_text())
        assert httpx.get(f"http://127.0.0.1:{port}/api/health", trust_env=False).is_success
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0


def test_default_plan_from_the_config_file(ref_server, tmp_path):
    plan = {
        "steps": [{"write": {"path": "from_config.txt", "content": "cfg"}}],
        "result": "configured",
    }
    server = ref_server({"default_plan": plan})
    body = task_body(tmp_path / "ws")
    del body["metadata"]["reference_plan"]
    task_id = _post(server.url, "/api/tasks", body).json()["task_id"]
    server.wait_for(lambda s: s["tasks"][task_id] == "completed")
    assert server.task(task_id)["result"] == "configured"
    assert (tmp_path / "ws" / "from_config.txt").read_text() == "cfg"


def test_plans_in_submission_order_then_the_default(ref_server, tmp_path):
    """``plans``: the first submission runs the first plan, the second the second, later ones
    the default (a scenario's killed task thinks long, its resumed task does not)."""
    server = ref_server({"plans": [{"result": "first"}, {"result": "second"}],
                         "default_plan": {"result": "default"}})
    results = []
    for n in range(3):
        body = task_body(tmp_path / f"ws{n}")
        del body["metadata"]["reference_plan"]
        task_id = _post(server.url, "/api/tasks", body).json()["task_id"]
        server.wait_for(lambda s, t=task_id: s["tasks"][t] == "completed")
        results.append(server.task(task_id)["result"])
    assert results == ["first", "second", "default"]
