"""No API key in the instance folder or in the argv of any process while agents run.

A fake key is planted in the environment (and in the reference server's settings). The
command agent runs with it allow-listed in a real sandbox and the gateway agent runs a
task, both at once; meanwhile every ``/proc/*/cmdline`` on the machine (container
processes included) is scanned. Afterwards every file under the instance folders and the
server's log is searched.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from pathlib import Path

import httpx
import pytest

from harness.agents import AgentOutcome, AgentRequest
from harness.agents.command import CommandAgent, CommandAgentConfig
from harness.agents.gateway.agent import GatewayAgent
from tests.agents.agents_support import FAST, task_body

pytestmark = pytest.mark.docker

KEY_NAME = "HARNESS_FAKE_API_KEY"


def _scan_cmdlines(needle: bytes) -> tuple[list[str], int]:
    hits: list[str] = []
    seen_agent = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read()
        except OSError:
            continue
        if needle in cmdline:
            hits.append(f"{entry}: {cmdline[:200]!r}")
        if cmdline == b"sleep\x002\x00":  # the command agent, inside the container
            seen_agent += 1
    return hits, seen_agent


def _files_containing(root: Path, needle: bytes) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_fake_key_never_reaches_files_or_argv(tmp_path, monkeypatch, ref_server, sandbox_factory):
    key = f"sk-fake-{secrets.token_hex(16)}"
    monkeypatch.setenv(KEY_NAME, key)
    server = ref_server({"settings": {"OUROBOROS_MODEL": "openai::gpt-5.5", "OPENAI_API_KEY": key}})
    sb = sandbox_factory()
    outcomes: dict[str, AgentOutcome] = {}
    errors: list[BaseException] = []

    # The agent checks it got the key (by its length) without ever printing it.
    command = CommandAgent(
        CommandAgentConfig(
            command=f'test "${{#{KEY_NAME}}}" -eq {len(key)} && sleep 2 && echo done',
            env=[KEY_NAME],
        )
    )
    gateway = GatewayAgent(server.url, policy=FAST)
    plan = {"steps": [{"run": "sleep 1.5; echo built > out.txt", "cost_usd": 0.1}]}

    def run(name: str, agent: object, request: AgentRequest) -> None:
        try:
            outcomes[name] = agent.run(request)  # type: ignore[attr-defined]
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(
            target=run,
            args=(
                "command",
                command,
                AgentRequest(
                    instance_id="cmd",
                    instance_dir=tmp_path / "runs" / "cmd",
                    instruction="go",
                    sandbox=sb,
                    timeout_sec=60,
                ),
            ),
        ),
        threading.Thread(
            target=run,
            args=(
                "gateway",
                gateway,
                AgentRequest(
                    instance_id="gw",
                    instance_dir=tmp_path / "runs" / "gw",
                    instruction="go",
                    task_body=task_body(tmp_path / "ws", plan),
                    timeout_sec=60,
                ),
            ),
        ),
    ]
    for thread in threads:
        thread.start()
    needle = key.encode()
    scans = agent_seen = 0
    while any(t.is_alive() for t in threads):
        hits, seen = _scan_cmdlines(needle)
        assert hits == [], f"the key is in a process argv: {hits}"
        agent_seen += seen
        scans += 1
        time.sleep(0.02)
    for thread in threads:
        thread.join()
    assert errors == []
    assert scans > 10 and agent_seen > 0  # the scans did see the agent process running

    assert outcomes["command"].completed, (tmp_path / "runs/cmd/agent_stderr.log").read_text()
    assert outcomes["gateway"].completed
    assert (tmp_path / "runs" / "cmd" / "agent_stdout.log").read_text() == "done\n"
    assert _files_containing(tmp_path / "runs", needle) == []
    # gateway_events.jsonl (the task's scrubbed events) is scanned by _files_containing above.
    assert sorted(p.name for p in (tmp_path / "runs" / "gw").iterdir()) == [
        "gateway_events.jsonl",
        "harness_task_body.json",
        "task_checkpoint.json",
        "task_result.json",
    ]
    assert sorted(p.name for p in (tmp_path / "runs" / "cmd").iterdir()) == [
        "agent_command.json",
        "agent_stderr.log",
        "agent_stdout.log",
    ]
    # The server had the key in its settings and its environment: never logged or served.
    assert needle not in server.log_path.read_bytes()
    assert needle not in httpx.get(f"{server.url}/api/settings", trust_env=False).content
