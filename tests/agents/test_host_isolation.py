"""Host agents apart (issue 40): the namespace a host agent runs in, the exec socket's peer
check, and what is left when the agent ends. Docker-free: real processes, a real socket."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from harness.agents.host_exec import ExecRequest, ExecService, call
from harness.agents.host_isolation import (
    ISOLATED,
    PeerCheck,
    isolation,
    launch_argv,
    launch_env,
)


def _start(command: str, isolated: bool) -> subprocess.Popen[bytes]:
    return subprocess.Popen(launch_argv(command, isolated), start_new_session=True,
                            env=launch_env(dict(os.environ), command, isolated),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as fh:
        return [int(x) for x in fh.read().split()]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def test_this_machine_isolates_host_agents() -> None:
    assert isolation() == ISOLATED  # util-linux's unshare and user namespaces are here


def test_only_the_agents_own_processes_pass_the_peer_check() -> None:
    proc = _start("sleep 30", isolated=True)
    try:
        check = PeerCheck(proc.pid, isolated=True)
        deadline = time.monotonic() + 10
        while (check.agent_namespace() is None or not _children(proc.pid)) and (
                time.monotonic() < deadline):
            time.sleep(0.01)
        (inner,) = _children(proc.pid)  # the namespace's first process (bash, then sleep)
        assert check(inner) is True
        assert check(os.getpid()) is False  # this process: another namespace
        assert check(proc.pid) is False  # the launcher itself stays outside
        assert check(0) is False and check(2**22 + 7) is False
    finally:
        _stop(proc)


def test_without_namespaces_the_check_is_the_agents_session() -> None:
    proc = _start("sleep 30", isolated=False)
    try:
        check = PeerCheck(proc.pid, isolated=False)
        assert check(proc.pid) is True
        assert check(os.getpid()) is False
    finally:
        _stop(proc)


def test_a_process_the_agent_leaves_behind_ends_with_it(tmp_path: Path) -> None:
    marker = f"sleep {int(time.time()) % 1000 + 5000}"  # a command line no one else runs
    proc = _start(f"(setsid {marker} &) ; exit 0", isolated=True)
    assert proc.wait(10) == 0
    time.sleep(0.2)
    alive = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if cmdline.strip() == marker.encode():
                alive.append(entry)
    assert alive == []  # the namespace ended with its first process: its daemon too


class _NoSandbox:
    name = "none"

    def exec(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a refused peer reached the sandbox")


def test_the_exec_socket_refuses_a_peer_the_check_rejects() -> None:
    service = ExecService(_NoSandbox()).start()  # type: ignore[arg-type]
    seen: list[int] = []

    def refuse(pid: int) -> bool:
        seen.append(pid)
        return False

    service.admit = refuse
    try:
        reply = call(str(service.path), ExecRequest(argv=["id"]), 10)
    finally:
        service.close()
    assert reply.exit_code is None and reply.error is not None and "refused" in reply.error
    assert seen == [os.getpid()] and service.refused == 1 and service.calls == 0


@pytest.mark.parametrize("isolated", [True, False])
def test_the_agent_command_runs_with_bash(tmp_path: Path, isolated: bool) -> None:
    out = tmp_path / "out.txt"
    command = f"echo $((6 * 7)) > {out}"
    proc = subprocess.run(launch_argv(command, isolated), timeout=30, check=False,
                          env=launch_env(dict(os.environ), command, isolated))
    assert proc.returncode == 0 and out.read_text() == "42\n"


def test_the_engines_socket_and_state_are_covered_and_stay_covered(tmp_path: Path) -> None:
    """A root runner's agent owns the engine's socket (and with it every sandbox): in the
    agent's namespaces it is /dev/null, the engine's state an empty tmpfs, and the agent,
    root of its own namespace, cannot take either mount off (they are locked)."""
    out = tmp_path / "out.txt"
    command = (f"exec > {out} 2>&1; umount /run/docker.sock; umount -l /var/lib/docker; "
               "stat -c %F /run/docker.sock; ls -A /var/lib/docker | wc -l")
    proc = subprocess.run(launch_argv(command, True), timeout=30, check=False,
                          env=launch_env(dict(os.environ), command, True))
    lines = out.read_text().splitlines()
    assert proc.returncode == 0, lines
    assert lines[-2:] == ["character special file", "0"], lines


def test_docker_hosts_socket_is_covered_too() -> None:
    from harness.agents.host_isolation import MASKED, masked_paths

    assert masked_paths({"DOCKER_HOST": "unix:///srv/engine.sock"}) == [
        *MASKED, "/srv/engine.sock"]
    assert masked_paths({"DOCKER_HOST": "ssh://runner@build-1"}) == list(MASKED)
