"""The client as a real process: SIGKILL mid-wait then reattach; SIGINT cancels the task."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from harness.agents.gateway.checkpoint import read_checkpoint
from tests.agents.agents_support import REPO, task_body

CLIENT = Path(__file__).with_name("gateway_client_main.py")


def _interruptible() -> None:
    """In the child before exec: SIGINT at its default and unblocked, as from a terminal.
    A disposition left ignored (or a mask left blocking it) by whatever ran earlier in this
    test process would otherwise be inherited, and Python keeps an ignored SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _spawn(url: str, instance_dir: Path, body_file: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(CLIENT), url, str(instance_dir), str(body_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        preexec_fn=_interruptible,
    )


def _signal_state(pid: int) -> str:
    """The process's ignored, blocked and caught signal masks (for a failure message)."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return " ".join(line for line in lines if line.startswith(("SigBlk", "SigIgn", "SigCgt")))


def _wait_ready(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "ready", (line, proc.stderr.read() if proc.stderr else "")


def test_sigkilled_client_is_replaced_by_one_that_reattaches(ref_server, tmp_path):
    server = ref_server()
    # The task waits for ``release`` (bounded), which the test writes only once the second
    # client has reattached: the task is still running then however slow the machine is.
    plan = {"steps": [{"run": "for i in $(seq 1200); do [ -f release ] && break; sleep 0.05; "
                              "done; echo built > out.txt", "cost_usd": 0.1}]}
    body_file = tmp_path / "body.json"
    body_file.write_text(json.dumps(task_body(tmp_path / "ws", plan)))
    inst = tmp_path / "inst"

    first = _spawn(server.url, inst, body_file)
    _wait_ready(first)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    checkpoint = read_checkpoint(inst / "task_checkpoint.json")
    assert checkpoint is not None
    assert server.state()["tasks"][checkpoint.task_id] in {"scheduled", "running"}

    second = _spawn(server.url, inst, body_file)
    assert second.stderr is not None
    seen = []
    for line in second.stderr:  # the client logs its reattach decision, then waits
        seen.append(line)
        if "reattaching to task" in line:
            break
    (tmp_path / "ws" / "release").touch()
    out, err = second.communicate(timeout=30)
    err = "".join(seen) + err
    assert second.returncode == 0, err
    final = json.loads(out.strip().splitlines()[-1])
    assert final == {
        "task_id": checkpoint.task_id,
        "status": "completed",
        "reattached": True,
        "reason": final["reason"],
    }
    assert final["reason"] in {"task_running", "task_scheduled"}
    state = server.state()
    assert state["submissions"] == 1 and state["submit_attempts"] == 1
    assert (tmp_path / "ws" / "out.txt").read_text() == "built\n"
    assert state["cancels"] == []


def test_sigint_cancels_the_task_on_the_server(ref_server, tmp_path):
    server = ref_server({"never_settle": True})
    body_file = tmp_path / "body.json"
    body_file.write_text(json.dumps(task_body(tmp_path / "ws", {"steps": []})))
    inst = tmp_path / "inst"
    proc = _spawn(server.url, inst, body_file)
    _wait_ready(proc)
    state = f"client {_signal_state(proc.pid)}; this process {_signal_state(os.getpid())}"
    proc.send_signal(signal.SIGINT)
    try:
        _out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _out, err = proc.communicate()
        raise AssertionError(f"SIGINT did not end the client ({state}): {err[-3000:]}") from None
    assert proc.returncode != 0
    assert "KeyboardInterrupt" in err and "cancelling agent task" in err
    checkpoint = read_checkpoint(inst / "task_checkpoint.json")
    assert checkpoint is not None
    state = server.wait_for(lambda s: s["tasks"].get(checkpoint.task_id) == "cancelled")
    assert state["cancels"] == [checkpoint.task_id]
