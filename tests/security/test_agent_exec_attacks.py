"""Attacks on the agent exec layer (issue 11 items 2, 4, 6): an adversarial command agent on
the ProgramBench fixture, real Docker. Whatever the agent does to itself, its process tree or
its sandbox, the row is the agent's outcome with a reason code, never infrastructure (which
a resume would retry for free); what it prints is stored capped (head and tail)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.security.agentexec_support import assert_agent_outcome, attack, command_record

# slow tier: end-to-end Docker runs of a minute or more together (CI runs the tier after
# the default one, which stays under its 10 minutes)
pytestmark = [pytest.mark.docker, pytest.mark.slow]

MIB = 1 << 20


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        ("exit 126", "agent_exit_126"),
        ("exit 127", "agent_exit_127"),
        ("/workspace/no-such-agent --yolo", "agent_exit_127"),
        ("kill -9 1; exit 1", "agent_exit_nonzero"),  # PID 1 is root's: refused
        ("kill -9 -1", "agent_killed_signal_9"),  # kills every process it may, itself too
        ("exec >&- 2>&-; rm -rf /tmp/* /tmp/.[!.]*; exit 5", "agent_exit_nonzero"),
    ],
    ids=["exit126", "exit127", "missing-program", "kill-pid1", "kill-all", "close-and-rm-tmp"],
)
def test_agent_exit_tricks_are_agent_failures(tmp_path: Path, command: str, reason: str) -> None:
    run, row = attack(tmp_path / "run", command)
    assert_agent_outcome(run, row, reason)
    # the harness carried on: the submission was collected and officially scored
    assert row["official_eval_status"] == "completed" and row["score"] == 0.0


def test_forged_kill_target_cannot_turn_a_timeout_into_infra(tmp_path: Path) -> None:
    """The agent stops the coreutils ``timeout`` that runs it (so only the exec-level kill
    can end it), forges the old kill-target file (pgid 1: "every process") and a process
    carrying its own exec marker, and starts a child that leaves its session."""
    command = (
        "kill -STOP $PPID; "
        'tok=$HARNESS_EXEC_TOKEN; echo 1 > "/tmp/.harness-exec-$tok.pgid"; '
        'chmod 444 "/tmp/.harness-exec-$tok.pgid"; '
        '(exec -a "harness-exec-$tok" sleep 600) & '
        "setsid sleep 700 & "
        "echo forged; sleep 800"
    )
    run, row = attack(tmp_path / "run", command, "--pb-task-timeout", "2",
                      "--agent-kill-after", "1", "--agent-exec-margin", "3")
    assert_agent_outcome(run, row, "deadline_local")
    assert row["details"]["agent"]["truncated"] is True
    record = command_record(run, row)
    assert record["timed_out"] and record["kill_survivors"] == ""
    assert record["exec_timeout_sec"] == 2 + 1 + 3  # the options reach the exec-level kill
    assert (run.root / row["output_paths"]["agent_stdout"]).read_bytes() == b"forged\n"
    # the sandbox outlived the kill: the submission was collected and scored
    assert row["official_eval_status"] == "completed" and row["score"] == 0.0


def test_fifty_megabytes_of_output_are_stored_as_head_and_tail(tmp_path: Path) -> None:
    total = 50 * 1000 * 1000
    body = total - len("HEAD-MARK\n") - len("TAIL-MARK\n")
    command = (
        f"echo HEAD-MARK; head -c {body} /dev/zero | tr '\\0' x; echo TAIL-MARK; "
        "head -c 3000000 /dev/urandom >&2"  # binary garbage on stderr
    )
    run, row = attack(tmp_path / "run", command)
    assert row["infra"] is False and row["outcome"] != "infra_failed"
    stored = (run.root / row["output_paths"]["agent_stdout"]).read_bytes()
    assert 2 * MIB <= len(stored) <= 2 * MIB + 512, len(stored)
    assert stored.startswith(b"HEAD-MARK\nxxx") and stored.endswith(b"xxxTAIL-MARK\n")
    assert b"bytes omitted here; the agent wrote 50000000 bytes" in stored
    err = (run.root / row["output_paths"]["agent_stderr"]).read_bytes()
    assert 2 * MIB <= len(err) <= 2 * MIB + 512, len(err)
    record = command_record(run, row)
    assert record["stdout_bytes"] == total and record["stdout_truncated"] is True
    assert record["stderr_bytes"] == 3_000_000 and record["stderr_truncated"] is True
    assert row["details"]["agent"]["details"]["output_truncated"]["stdout_bytes"] == total
    folder = run.root / row["output_paths"]["agent_stdout"]
    used = sum(f.stat().st_size for f in folder.parent.iterdir() if f.name.startswith("agent_"))
    assert used < 5 * MIB, used
