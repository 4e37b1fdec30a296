"""The command agent in a real Docker sandbox (``harness.sandbox``, the probe image)."""

from __future__ import annotations

import json

import pytest

from harness.agents import AgentRequest
from harness.agents.command import CommandAgent, CommandAgentConfig

pytestmark = pytest.mark.docker

INSTRUCTION = "Write the answer to answer.txt.\nLine two: ünïcode.\n"


def _run(tmp_path, sandbox, command, *, timeout=30.0, environ=None, **cfg):
    agent = CommandAgent(CommandAgentConfig(command=command, **cfg), environ=environ or {})
    request = AgentRequest(
        instance_id="inst-1",
        instance_dir=tmp_path / "inst",
        instruction=INSTRUCTION,
        sandbox=sandbox,
        timeout_sec=timeout,
        env_allowlist=list((environ or {}).keys()),
    )
    return agent.run(request)


def test_completed_with_instruction_on_stdin_and_in_file(tmp_path, sandbox_factory):
    sb = sandbox_factory()
    command = (
        'cat > from_stdin.txt; cp "$HARNESS_INSTRUCTION_FILE" from_file.txt; '
        'id -u; pwd; echo "instance=$HARNESS_INSTANCE_ID"; echo oops >&2'
    )
    outcome = _run(tmp_path, sb, command)
    assert outcome.completed and outcome.exit_code == 0 and not outcome.truncated
    assert outcome.reason_code == "completed"
    for name in ("from_stdin.txt", "from_file.txt"):
        got = sb.exec(["cat", f"/workspace/{name}"], timeout=30).stdout.decode()
        assert got == INSTRUCTION
    inst = tmp_path / "inst"
    assert (inst / "agent_stdout.log").read_text() == "1000\n/workspace\ninstance=inst-1\n"
    assert (inst / "agent_stderr.log").read_text() == "oops\n"
    record = json.loads((inst / "agent_command.json").read_text())
    assert record["exit_code"] == 0 and record["instruction_file"] == "/tmp/harness_instruction.md"
    assert outcome.output_paths["agent_stdout"] == str(inst / "agent_stdout.log")


def test_instruction_via_file_only_leaves_stdin_empty(tmp_path, sandbox_factory):
    sb = sandbox_factory()
    outcome = _run(
        tmp_path, sb, 'wc -c; test -s "$HARNESS_INSTRUCTION_FILE"', instruction_via="file"
    )
    assert outcome.completed
    assert (tmp_path / "inst" / "agent_stdout.log").read_text().strip() == "0"


def test_argv_command_and_explicit_user(tmp_path, sandbox_factory):
    sb = sandbox_factory()
    outcome = _run(
        tmp_path,
        sb,
        ["python3", "-c", "import os; print(os.getuid(), os.getcwd())"],
        user="1000:1000",
        workdir="/tmp",
    )
    assert outcome.completed
    assert (tmp_path / "inst" / "agent_stdout.log").read_text() == "1000 /tmp\n"


def test_root_user_is_refused():
    for user in ("root", "0", "0:0"):
        with pytest.raises(ValueError, match="may not run as root"):
            CommandAgentConfig(command="true", user=user)


def test_non_zero_exit_is_not_completed(tmp_path, sandbox_factory):
    outcome = _run(tmp_path, sandbox_factory(), "exit 3")
    assert not outcome.completed and not outcome.infra and not outcome.truncated
    assert outcome.exit_code == 3 and outcome.reason_code == "agent_exit_nonzero"


def test_missing_agent_program_is_the_agents_failure(tmp_path, sandbox_factory):
    outcome = _run(tmp_path, sandbox_factory(), ["no-such-agent-cli", "--yolo"])
    assert not outcome.infra and not outcome.completed
    assert outcome.exit_code == 127 and outcome.reason_code == "agent_exit_127"


def test_timeout_is_truncated_deadline_local_and_kills_the_agent(tmp_path, sandbox_factory):
    sb = sandbox_factory()
    outcome = _run(tmp_path, sb, "echo started; sleep 67 & wait", timeout=1.0, kill_after_s=1.0)
    assert outcome.truncated and not outcome.completed
    assert outcome.reason_code == "deadline_local"
    assert outcome.duration_s is not None
    left = (
        sb.exec(
            ["/bin/sh", "-c", "ps -eo args | grep -c '[s]leep 67' || true"], user="root", timeout=30
        )
        .stdout.decode()
        .strip()
    )
    assert left == "0"


def test_allow_listed_env_reaches_the_agent_and_is_redacted(tmp_path, sandbox_factory):
    sb = sandbox_factory()
    environ = {"AGENT_TOKEN": "tok-123456789", "MULTI": "line1\nline2 with spaces"}
    command = (
        'test "$AGENT_TOKEN" = tok-123456789 && printf %s "$MULTI" | wc -l && '
        'echo "leak: $AGENT_TOKEN"; test -z "$NOT_LISTED"'
    )
    agent = CommandAgent(
        CommandAgentConfig(command=command, env=["AGENT_TOKEN"]),
        environ={**environ, "NOT_LISTED": "x"},
    )
    outcome = agent.run(
        AgentRequest(
            instance_id="i",
            instance_dir=tmp_path / "inst",
            instruction="x",
            sandbox=sb,
            timeout_sec=30,
            env_allowlist=["MULTI", "ABSENT_VAR"],
        )
    )
    assert outcome.completed, (tmp_path / "inst" / "agent_stderr.log").read_text()
    stdout = (tmp_path / "inst" / "agent_stdout.log").read_text()
    assert stdout == "1\nleak: [redacted:AGENT_TOKEN]\n"
    record = json.loads((tmp_path / "inst" / "agent_command.json").read_text())
    assert record["env_names"] == ["AGENT_TOKEN", "MULTI"]
    assert record["env_missing"] == ["ABSENT_VAR"] and record["redacted_values"] == 1
    assert "tok-123456789" not in (tmp_path / "inst" / "agent_command.json").read_text()


def test_sandbox_ended_from_inside_is_the_agents_failure(tmp_path, sandbox_factory):
    """The container's PID 1 dies while the agent runs (as a root-capable agent could do):
    an agent outcome that says why and that nothing is left to collect, never infra."""
    import threading

    sb = sandbox_factory()

    def pid1_dies() -> None:
        sb.exec(["kill", "-TERM", "1"], user="root", timeout=30)

    threading.Timer(1.0, pid1_dies).start()
    outcome = _run(tmp_path, sb, "echo running; sleep 60", timeout=120)
    assert not outcome.infra and not outcome.completed and outcome.sandbox_lost
    assert outcome.reason_code == "agent_sandbox_exited"
    assert outcome.details["sandbox_exit"]["cause"] == "ended_from_inside"
    record = json.loads((tmp_path / "inst" / "agent_command.json").read_text())
    assert record["sandbox_exit"]["exit_code"] not in (None, 0)


def test_stored_output_is_capped_and_no_secret_survives_the_cut(tmp_path, sandbox_factory):
    environ = {"AGENT_TOKEN": "tok-0123456789abcdef"}
    # the secret everywhere, so copies straddle both cut edges at some offsets
    command = 'for i in $(seq 400); do printf "%s." "$AGENT_TOKEN"; done; echo END'
    outcome = _run(
        tmp_path, sandbox_factory(), command, environ=environ,
        output_head_bytes=100, output_tail_bytes=64,
    )  # fmt: skip
    assert outcome.completed
    stored = (tmp_path / "inst" / "agent_stdout.log").read_bytes()
    assert b"0123456789" not in stored and b"tok-0123" not in stored
    assert stored.startswith(b"[redacted:AGENT_TOKEN].") and stored.endswith(b".END\n")
    assert b"bytes omitted here; the agent wrote 8404 bytes" in stored
    record = json.loads((tmp_path / "inst" / "agent_command.json").read_text())
    assert record["stdout_bytes"] == 8404 and record["stdout_truncated"]
    assert outcome.details["output_truncated"]["stdout_bytes"] == 8404


def test_processes_the_agent_leaves_behind_are_ended_with_it(tmp_path, sandbox_factory):
    sb = sandbox_factory()
    command = (
        "setsid sh -c 'sleep 5151; touch /workspace/late' </dev/null >/dev/null 2>&1 & "
        "nohup sleep 5252 </dev/null >/dev/null 2>&1 & exit 0"
    )
    outcome = _run(tmp_path, sb, command)
    assert outcome.completed
    left = sb.exec(["ps", "-u", "1000", "-o", "pid=,args="], user="root", timeout=30)
    assert left.stdout.decode().strip() == ""
    assert sb.exec(["ps", "-eo", "args="], user="root").stdout.count(b"sleep 5") == 0


def test_a_fork_bomb_left_running_is_ended_and_the_sandbox_stays_usable(
    tmp_path, sandbox_factory
):
    sb = sandbox_factory(pids_limit=64)
    command = "b() { b & b & wait; }; (b </dev/null >/dev/null 2>&1 &); sleep 2; exit 0"
    outcome = _run(tmp_path, sb, command)
    # its own `sleep` may find no free pid either: an agent outcome whichever way it ends
    assert not outcome.infra and outcome.reason_code in ("completed", "agent_exit_nonzero")
    left = sb.exec("ps -u 1000 -o pid=; echo ps=$?", user="root", timeout=30)
    assert left.stdout == b"ps=1\n"  # ps could fork, and found no process of the agent
