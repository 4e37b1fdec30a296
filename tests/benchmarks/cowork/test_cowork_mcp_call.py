"""MCP from bash (issue 26 point 2), on Docker: the real mini-swe-agent package, driven by
the scripted FAKE model, solves a Cowork fixture task through ``mcp-call`` alone.

mini-swe-agent's only tool is bash in the agent container. Its instruction (the task, then
the harness's section naming ``mcp-call`` and the tools as ``mcp-call --list`` prints them)
reaches the model through ``benchmarks/cowork_bench/mini_swe.yaml``'s templates; the model's
commands list the tools, create the three events and read one day back; the real checker
passes the task. Every call went through the supervisor's one session to the calendar server.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from harness.testing.fake_model_server import start_fake_model_server
from tests.benchmarks.cowork.cowork_helpers import FIXTURE
from tests.support.suite import REPO_ROOT, run_pytest

pytestmark = pytest.mark.docker

TARGET = "benchmarks/cowork_bench"
IID = "gcal-standup-week"
MODEL = "openai/fake-model"
CREATE = ("for d in 03 04 05; do mcp-call google_calendar create_event "
          "\"{\\\"summary\\\": \\\"Daily standup\\\", \\\"start\\\": \\\"2026-03-${d}T09:30:00+00:00\\\", "
          "\\\"end\\\": \\\"2026-03-${d}T09:45:00+00:00\\\"}\" || exit 1; done")  # fmt: skip
COMMANDS = ["mcp-call --list google_calendar", CREATE,
            "mcp-call google_calendar list_events '{\"day\": \"2026-03-04\"}'",
            "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]  # fmt: skip


def script() -> dict[str, object]:
    return {"model": "fake-model", "responses": [
        {"content": "Next step.", "tool_calls": [{"name": "bash", "arguments": {"command": c}}],
         "usage": {"prompt_tokens": 900, "completion_tokens": 60}} for c in COMMANDS]}  # fmt: skip


def agent_config(path: Path, base_url: str) -> Path:
    """The Cowork templates the harness ships, with the scripted model's address."""
    cfg = yaml.safe_load((REPO_ROOT / "benchmarks" / "cowork_bench" / "mini_swe.yaml").read_text())
    cfg["model"] = {"model_kwargs": {"api_base": base_url, "api_key": "not-a-key"}}
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.slow  # one of the default tier's longest (durations.json); CI runs it in the slow tier
def test_mini_swe_agent_solves_a_cowork_task_through_mcp_call(tmp_path: Path) -> None:
    model = start_fake_model_server(script(), log=tmp_path / "requests.jsonl")
    try:
        run = run_pytest(TARGET, tmp_path / "run", "--cowork-root", str(FIXTURE),
                         "--cowork-allow-dirty-bench", "--instance", IID, "--agent", "mini-swe-agent",
                         "--solve-model", MODEL,
                         "--agent-config", str(agent_config(tmp_path / "c.yaml", model.base_url)),
                         timeout=600)  # fmt: skip
    finally:
        model.stop()
    assert run.rc == 0, run.out
    row = run.latest[IID]
    assert (row["status"], row["resolved"]) == ("passed", True), row
    assert row["details"]["agent"]["details"]["exit_status"] == "Submitted"
    assert row["details"]["agent"]["details"]["steps"] == len(COMMANDS)

    inst = run.root / "cowork_bench" / IID
    instruction = (inst / "instruction.md").read_text()
    task = (FIXTURE / "tasks" / "finalpool" / IID / "docs" / "task.md").read_text().strip()
    assert task in instruction  # the task, then the tool section
    assert instruction.index(task) < instruction.index("## MCP tools")
    assert 'mcp-call SERVER TOOL \'{"name": "value"}\'' in instruction
    assert "  create_event(summary: string, start: string, end: string, description?: string)" \
        in instruction  # the listing, as mcp-call printed it in the container  # fmt: skip
    assert "emails: 3 tools" in instruction and "filesystem: 3 tools" in instruction
    traj = json.loads((run.root / row["output_paths"]["trajectory"]).read_text())
    first_user = next(m for m in traj["messages"] if m["role"] == "user")["content"]
    assert instruction.strip() in first_user  # the model was given it (mini_swe.yaml's {{task}})
    assert "reverse-engineering" not in json.dumps(traj["messages"][:2])
    observations = [m for m in traj["messages"] if m["role"] == "tool"]
    text = [json.dumps(m.get("content")) for m in observations]
    assert "google_calendar: 2 tools" in text[0]
    assert text[1].count("created event") == 3, text[1]
    assert "Daily standup" in text[2] and "09:30" in text[2], text[2]
    # one supervised calendar server took every call (the persistent session)
    log = (inst / "mcp" / "google_calendar.stderr.log").read_text()
    assert log.count("CallToolRequest") == 4
