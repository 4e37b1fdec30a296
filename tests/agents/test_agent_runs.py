"""Whole instances of the built-in selftest benchmark through each agent kind, as real
pytest runs: ``--agent gateway`` against the reference server, ``--agent command`` in a
sandbox, ``oracle`` and ``nop``; and a planted API key that must never reach the run root
or any process's argv."""

from __future__ import annotations

import json
import os
import secrets
import signal
import threading
from pathlib import Path

import pytest

from tests.agents.agents_support import start_server
from tests.support.suite import Run, Suite, finish, wait_for

pytestmark = pytest.mark.docker

TASK = [{"id": "answer", "work": "agent", "answer": "42", "cost": 0.5}]


def test_gateway_agent_runs_a_whole_instance(tmp_path: Path) -> None:
    suite = Suite(tmp_path)
    suite.tasks(TASK)
    server = start_server(tmp_path / "server", {"settings": {"OUROBOROS_MODEL": "openai::gpt-5.5"}})
    try:
        run = suite.run("--agent", "gateway", "--gateway-url", server.url,
                        "--gateway-poll-sec", "0.1", "--solve-model", "openai::gpt-5.5",
                        "--expect-runtime-version", "reference-1.0.0")
        state = server.state()
    finally:
        server.stop()
    assert run.rc == 0, run.out
    row = run.latest["answer"]
    assert row["status"] == "completed" and row["resolved"] is True
    assert row["cost_usd"] == 0.5 and row["cost_known"] is True
    assert row["tokens"]["prompt"] == 120
    assert row["details"]["agent"]["runtime_outcome"]["status"] == "completed"
    folder = run.root / "selftest" / "answer"
    assert (folder / "selftest_task_body.json").is_file()
    checkpoint = json.loads((folder / "task_checkpoint.json").read_text())
    assert checkpoint["status"] == "completed"
    extra = run.manifest["extra"]
    assert extra["runtime_attestation"]["ok"] is True
    assert extra["runtime_attestation"]["runtime_version"] == "reference-1.0.0"
    assert run.manifest["config"]["agent.kind"] == "gateway"
    assert state["submissions"] == 1


def test_an_interrupted_gateway_row_keeps_the_events_proving_its_spend(
        tmp_path: Path) -> None:
    """Issue 14 point 3: the task reported no cost yet (its usage is in its events only);
    Ctrl-C mid-task leaves an interrupted row whose ``paid_activity`` is observed, from the
    events copied before the last status request."""
    suite = Suite(tmp_path)
    suite.tasks([{"id": "slow", "work": "agent", "answer": "42", "cost": 0, "think_s": 120}])
    server = start_server(tmp_path / "server")
    try:
        proc, root = suite.start("--agent", "gateway", "--gateway-url", server.url,
                                 "--gateway-poll-sec", "0.1")
        events = root / "selftest" / "slow" / "gateway_events.jsonl"
        wait_for(lambda: events.is_file() and "llm_usage" in events.read_text(), timeout=120)
        os.killpg(proc.pid, signal.SIGINT)
        out = finish(proc)
        state = server.state()
    finally:
        server.stop()
    assert proc.returncode == 3, out
    row = Run.of(root).latest["slow"]
    assert row["status"] == "infra_failed" and row["reason_code"].endswith("signal_2"), row
    assert row["cost_usd"] in (None, 0.0)
    assert row["paid_activity"] is True, (row["details"], row["output_paths"])
    assert row["details"]["agent"]["paid_evidence"] == "gateway_events_llm_usage"
    assert (root / row["output_paths"]["gateway_events"]).is_file()
    assert list(state["cancels"]) == [next(iter(state["tasks"]))]  # Ctrl-C cancels the task


def test_gateway_refusals_are_recorded(tmp_path: Path) -> None:
    suite = Suite(tmp_path)
    suite.tasks(TASK)
    server = start_server(tmp_path / "server", {"settings": {"OUROBOROS_MODEL": "openai::gpt-5"}})
    try:
        skew = suite.run("--agent", "gateway", "--gateway-url", server.url,
                         "--expect-runtime-version", "9.9.9")
        model = suite.run("--agent", "gateway", "--gateway-url", server.url,
                          "--solve-model", "openai::gpt-5.5")
        suite.extra_env["OBO_ALLOW_EVOLVED_VOLUME"] = "1"  # the specification's waiver
        waived = suite.run("--agent", "gateway", "--gateway-url", server.url,
                           "--expect-runtime-version", "9.9.9")
        del suite.extra_env["OBO_ALLOW_EVOLVED_VOLUME"]
    finally:
        server.stop()
    assert skew.rc == 2, skew.out  # a refusal (docs/exit-codes.md)
    assert skew.manifest["refusal"]["reason"] == "runtime_skew"
    assert skew.manifest["extra"]["runtime_attestation"]["reason"] == "runtime_skew"
    assert waived.rc == 0, waived.out
    assert waived.manifest["extra"]["runtime_attestation"]["reason"] == "runtime_skew"
    assert waived.manifest["extra"]["runtime_attestation"]["overridden"] is True
    assert model.rc == 2, model.out
    assert "OUROBOROS_MODEL" in model.manifest["refusal"]["message"]
    unreachable = suite.run("--agent", "gateway", "--gateway-url", "http://127.0.0.1:9")
    assert unreachable.rc == 2 and unreachable.manifest["refusal"]["reason"] == (
        "runtime_unreachable")


def test_command_oracle_and_nop_agents(tmp_path: Path) -> None:
    suite = Suite(tmp_path)
    suite.tasks(TASK)
    command = suite.run("--agent", "command", "--agent-command",
                        "bash -c 'cat > /tmp/got; grep -q 42 /tmp/got && echo 42 > answer.txt'")
    assert command.rc == 0, command.out
    assert command.latest["answer"]["resolved"] is True
    assert (command.root / "selftest" / "answer" / "agent_stdout.log").is_file()
    oracle = suite.run("--agent", "oracle")
    assert oracle.latest["answer"]["resolved"] is True
    nop = suite.run("--agent", "nop")
    assert nop.rc == 0 and nop.latest["answer"]["score"] == 0.0


def scan_argv(needle: bytes, hits: list[str], stop: threading.Event) -> None:
    while not stop.is_set():
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/cmdline", "rb") as fh:
                        if needle in fh.read():
                            hits.append(entry)
                except OSError:
                    pass
        stop.wait(0.02)


def test_planted_key_never_reaches_the_run_root_or_argv(tmp_path: Path) -> None:
    key = f"sk-planted-{secrets.token_hex(12)}"
    suite = Suite(tmp_path)
    suite.tasks(TASK)
    os.environ["HARNESS_PLANTED_KEY"] = key
    hits: list[str] = []
    stop = threading.Event()
    scanner = threading.Thread(target=scan_argv, args=(key.encode(), hits, stop))
    scanner.start()
    try:
        run = suite.run(
            "--agent", "command", "--agent-env", "HARNESS_PLANTED_KEY", "--agent-command",
            'bash -c \'test -n "$HARNESS_PLANTED_KEY" && echo "key=$HARNESS_PLANTED_KEY" '
            '&& echo 42 > answer.txt\'')
    finally:
        stop.set()
        scanner.join()
        del os.environ["HARNESS_PLANTED_KEY"]
    assert run.rc == 0, run.out
    assert run.latest["answer"]["resolved"] is True  # the agent did get the key
    assert hits == [], "the key appeared in a process's argv"
    leaked = [p for p in run.root.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
    assert leaked == []
    assert key not in run.out
