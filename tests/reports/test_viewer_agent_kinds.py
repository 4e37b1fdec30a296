"""Each agent kind's instance page, from a real run of the ProgramBench fixture, opened in
Chromium: its timeline in the order of the agent's own record (issue 46). mini-swe-agent
against the scripted model; the gateway agent against the reference server; a command
agent behind the model gateway, recorded; a host-command agent through ``harness exec``.
Screenshots go to ``$HARNESS_TEST_ARTIFACTS/reports/``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench.fixture import ensure_fixture
from harness.testing.fake_model_server import start_fake_model_server
from tests.agents.agents_support import start_server
from tests.agents.model_scripts import solve_script, step
from tests.agents.test_host_command_agent import agent_script
from tests.agents.test_mini_swe_agent import MODEL, agent_config, prices
from tests.reports.test_report_browser import artifacts_dir
from tests.reports.test_viewer_browser import open_page
from tests.security.model_gateway_support import AGENT_COMMAND, SdkInjector, agent_report
from tests.support.suite import Run, run_pytest

# slow tier: a Docker run of the fixture each, and a real browser
pytestmark = [pytest.mark.docker, pytest.mark.slow]
TARGET = "benchmarks/programbench"
FIXTURE = ("--pb-fixtures", "-k", "calculator")
KEY = "sk-viewer-test-0123456789abcdef"


def timeline(browser: Any, run: Run, shot: Path) -> tuple[list[tuple[str, str, str]], Any]:
    """(kind, step, status) of each row of the fixture's page, as Chromium shows them."""
    page_path = run.root / "report" / "instances" / f"programbench__{FIXTURE_ID}.html"
    page, problems = open_page(browser, page_path)
    rows = page.eval_on_selector_all("#timeline tbody tr", """rs => rs.map(r => [
        r.cells[2].firstChild.textContent.trim(), r.cells[3].querySelector('code').textContent,
        r.cells[4].firstChild ? r.cells[4].firstChild.textContent : ''])""")
    page.screenshot(path=str(shot), full_page=True)
    page.close()
    assert problems == []
    return [tuple(r) for r in rows], run.latest[FIXTURE_ID]


def shots(factory: pytest.TempPathFactory) -> Path:
    path = artifacts_dir(factory)
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_mini_swe_agent(tmp_path, browser, tmp_path_factory) -> None:
    server = start_fake_model_server(solve_script())
    try:
        run = run_pytest(TARGET, tmp_path / "run", *FIXTURE, "--agent", "mini-swe-agent",
                         "--solve-model", MODEL, "--agent-config",
                         str(agent_config(tmp_path / "c.yaml", server.base_url)),
                         "--model-prices", str(prices(tmp_path / "p.json")))
    finally:
        server.stop()
    assert run.rc == 0, run.out
    rows, row = timeline(browser, run, shots(tmp_path_factory) / "kind-mini-swe.png")
    traj = json.loads((run.root / row["output_paths"]["trajectory"]).read_text())
    asked = [a["command"] for m in traj["messages"] if m["role"] == "assistant"
             for a in m["extra"].get("actions", [])]
    answered = [m["extra"]["returncode"] for m in traj["messages"] if m["role"] == "tool"]
    commands = [(s, st) for k, s, st in rows if k == "command"]
    assert [s for s, _ in commands] == asked
    assert [st for _, st in commands][:len(answered)] == [f"exit {c}" for c in answered]
    assert sum(1 for k, _, _ in rows if k == "model") == row["steps"]


def test_gateway_agent(tmp_path, browser, tmp_path_factory) -> None:
    files = ensure_fixture().oracle_contents()
    plan = [{"write": {"path": rel, "content": data.decode(), "mode": 0o755},
             "cost_usd": 0.125, "prompt_tokens": 1000, "completion_tokens": 200}
            for rel, data in sorted(files.items())]
    server = start_server(tmp_path / "server", {"default_plan": {"steps": plan},
                                                "docker_user": "agent"})
    try:
        run = run_pytest(TARGET, tmp_path / "run", *FIXTURE, "--agent", "gateway",
                         "--gateway-url", server.url, "--gateway-poll-sec", "0.2")
    finally:
        server.stop()
    assert run.rc == 0, run.out
    rows, row = timeline(browser, run, shots(tmp_path_factory) / "kind-gateway.png")
    events = [json.loads(x) for x in (run.root / row["output_paths"]["gateway_events"])
              .read_text().splitlines()]
    steps = [e for e in events if e["type"] == "step"]
    # the server's plan is its own (not in the task body): a step is named by its index
    assert [(s, st) for k, s, st in rows if k == "command"] == [
        (f"step {e['index']}", f"exit {e['exit_code']}" if "exit_code" in e else "")
        for e in steps]  # a write step has no exit code
    assert len(steps) == len(files)
    assert sum(1 for k, _, _ in rows if k == "model") == sum(
        1 for e in events if e["type"] == "llm_usage")


def test_command_agent_behind_the_model_gateway(tmp_path, browser, tmp_path_factory) -> None:
    upstream = start_fake_model_server({"responses": [step("ls -la")], "loop": True})
    params = {"key_parts": [KEY], "model": "fake-model", "stream": False, "max_steps": 3}
    root = tmp_path / "run"
    try:
        with SdkInjector(root, params):
            run = run_pytest(TARGET, root, *FIXTURE, "--agent", "command", "--agent-command",
                             AGENT_COMMAND, "--model-upstream", upstream.base_url,
                             "--model-record", str(tmp_path / "tape"),
                             env={"HARNESS_MODEL_API_KEY": KEY})
    finally:
        upstream.stop()
    assert run.rc == 0, run.out
    rows, row = timeline(browser, run, shots(tmp_path_factory) / "kind-command.png")
    report = agent_report((run.root / row["output_paths"]["agent_stdout"]).read_text())
    record = json.loads((run.root / row["output_paths"]["agent_command"]).read_text())
    assert rows[0][0] == "command" and rows[0][2] == f"exit {record['exit_code']}"
    assert rows[1][1] == f"model gateway: {report['steps']} calls"
    tape = json.loads(next((tmp_path / "tape").rglob(f"instances/*/{FIXTURE_ID}.json"))
                      .read_text())
    calls = [s for k, s, _ in rows[2:] if k == "model"]
    assert calls == [f"model call {c['position']}" for c in tape["calls"]]
    assert len(calls) == report["steps"]  # the agent's own count of its calls
    # each call's time and latency on the tape, on the page beside it (issue 46)
    assert all(c["latency_s"] >= 0 and c["started_at"] > 0 for c in tape["calls"])
    html = (run.root / "report" / "instances" / f"programbench__{FIXTURE_ID}.html").read_text()
    assert KEY not in html


def test_host_command_agent(tmp_path, browser, tmp_path_factory) -> None:
    script = agent_script(tmp_path / "agent.sh")
    run = run_pytest(TARGET, tmp_path / "run", *FIXTURE, "--agent", "host-command",
                     "--agent-command", f"bash {script}", "--agent-env", "AGENT_TEST_KEY",
                     env={"AGENT_TEST_KEY": "named-agent-key-0123456789"})
    assert run.rc == 0, run.out
    rows, row = timeline(browser, run, shots(tmp_path_factory) / "kind-host-command.png")
    record = json.loads((run.root / row["output_paths"]["agent_record"]).read_text())
    assert rows[0][0] == "command" and rows[0][2] == f"exit {record['exit_code']}"
    assert rows[1][1] == (f"harness exec: {record['exec_calls']} calls, "
                          f"{record['exec_refused']} refused")
    html = (run.root / "report" / "instances" / f"programbench__{FIXTURE_ID}.html").read_text()
    assert "named-agent-key-0123456789" not in html  # an --agent-env value, redacted
