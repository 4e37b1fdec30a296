"""The sandbox contract, self-checked on real Docker against every implementation.

Each check runs once per implementation of :class:`harness.sandbox.protocol.Sandbox`:

* ``harness``: a :class:`harness.sandbox.container.Sandbox` made as ProgramBench makes its
  cleanroom (agent user, ``/workspace``, ``--network none``);
* ``cowork``: Cowork's :class:`benchmarks.cowork_bench.agents.AgentBox` around a container
  made as Cowork makes its agent container (:func:`benchmarks.cowork_bench.containers.
  container_spec`: every capability dropped, the agent as the container's own user, on the
  task's internal network; no database needed).

Checked: exec output, exit code, stdin and env; a timeout kills the command's tree and the
sandbox stays usable; output is bounded (head and tail, totals counted); copy in and out;
the user (root is honoured by the harness sandbox, never by the agent box); no network;
death detection (ended from inside, killed from outside, removed by the harness); and what
:meth:`end_user_processes` promises. No Docker means an error, never a skip.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from benchmarks.cowork_bench.agents import AgentBox
from benchmarks.cowork_bench.containers import AGENT, AGENT_ID, RunIdentity, container_spec
from benchmarks.cowork_bench.images import ensure_image as ensure_cowork_image
from benchmarks.cowork_bench.phases import AGENT_LOGS, ROOT, WORKSPACE
from harness.sandbox.cleanup import leaked_resources, run_lock, sweep
from harness.sandbox.container import Sandbox as HarnessSandbox
from harness.sandbox.container import SandboxSpec
from harness.sandbox.errors import SandboxError
from harness.sandbox.images.build import BuiltImage
from harness.sandbox.network import create_internal_network, remove_network
from harness.sandbox.pack import NewDir
from harness.sandbox.protocol import Sandbox

pytestmark = pytest.mark.docker

IMPLEMENTATIONS = ["harness", "cowork"]


@dataclass
class Impl:
    """One implementation under check, and what it promises."""

    box: Sandbox
    container: HarnessSandbox  # the container itself: the test's own steps as root
    honours_user: bool  # a command asked to run as root runs as root
    pid1_user: str  # who may end the container's PID 1 from inside
    ends_leftovers: bool  # end_user_processes kills what the user left running


@pytest.fixture
def impl(request: pytest.FixtureRequest, tmp_path: Path, sandbox_client: docker.DockerClient,
         sandbox_base_image: BuiltImage) -> Iterator[Impl]:
    run_root = tmp_path / "run"
    run_root.mkdir()
    run_id = f"hxt-selfcheck-{secrets.token_hex(4)}"
    made: list[HarnessSandbox] = []
    network: str | None = None
    with run_lock(run_root).acquire(timeout=0):  # a concurrent sweep_stale leaves it alone
        try:
            if request.param == "harness":
                sb = HarnessSandbox.create(SandboxSpec(
                    image=sandbox_base_image.image_id, run_id=run_id, instance_id="selfcheck",
                    run_root=run_root, user="agent", workdir="/workspace", network="none",
                    cap_drop=("SYS_PTRACE",), ttl_s=600), client=sandbox_client)
                made.append(sb)
                sb.exec(["/bin/sh", "-c", "mkdir -p /workspace && chown agent /workspace"],
                        user="root", timeout=60).check()
                yield Impl(sb, sb, honours_user=True, pid1_user="root", ends_leftovers=True)
            else:
                image = ensure_cowork_image("runtime").image_id
                network = create_internal_network(run_id, "selfcheck", "main", run_root,
                                                  client=sandbox_client)
                sb = HarnessSandbox.create(container_spec(
                    image, RunIdentity(run_id, run_root), "selfcheck", network=network,
                    role="agent", user=AGENT, ttl_s=600), client=sandbox_client)
                made.append(sb)
                sb.make_dirs([NewDir(ROOT), NewDir("/workspace/dumps"),
                              NewDir(WORKSPACE, AGENT_ID, AGENT_ID),
                              NewDir(AGENT_LOGS, AGENT_ID, AGENT_ID)])
                yield Impl(AgentBox(sb), sb, honours_user=False, pid1_user=AGENT,
                           ends_leftovers=False)
        finally:
            for sb in made:
                sb.remove()
            if network is not None:
                remove_network(network, client=sandbox_client)
            sweep(run_id)
    assert leaked_resources(run_id_prefix=run_id) == {
        "containers": [], "networks": [], "volumes": []}


def _ps(impl: Impl) -> str:
    return impl.container.exec(["ps", "-eo", "args="], user="root", timeout=60).stdout.decode()


def _wait(condition: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, indirect=True)
def test_exec_returns_output_exit_code_and_takes_stdin_and_env(impl: Impl) -> None:
    box = impl.box
    res = box.exec(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=60)
    assert (res.exit_code, res.stdout, res.stderr) == (3, b"out\n", b"err\n")
    assert not res.timed_out and not res.truncated
    res = box.exec(["sh", "-c", 'cat; printf "|%s" "$SELF_CHECK"'], timeout=60,
                   stdin=b"in", env={"SELF_CHECK": "env"})
    assert res.exit_code == 0 and res.stdout == b"in|env"
    assert box.exec("echo $((40 + 2))", timeout=60).stdout == b"42\n"  # a string: the shell
    assert box.exec(["pwd"], timeout=60).stdout.decode().strip() == box.workdir


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, indirect=True)
def test_a_timeout_kills_the_command_tree_and_the_sandbox_stays_usable(impl: Impl) -> None:
    started = time.monotonic()
    res = impl.box.exec(["sh", "-c", "sleep 4242 & sleep 4243; echo never"], timeout=2)
    assert res.timed_out and b"never" not in res.stdout
    assert time.monotonic() - started < 60
    assert _wait(lambda: "sleep 424" not in _ps(impl)), _ps(impl)
    assert impl.box.exec(["echo", "still here"], timeout=60).stdout == b"still here\n"


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, indirect=True)
def test_output_is_bounded_to_its_head_and_tail_and_counted(impl: Impl) -> None:
    cmd = "head -c 3000000 /dev/zero | tr '\\0' a; printf END"
    res = impl.box.exec(["sh", "-c", cmd], timeout=120, max_output=1000, tail_output=500)
    assert res.exit_code == 0 and res.truncated
    assert len(res.stdout) == 1500 and res.stdout_total == 3_000_003
    assert res.stdout_cut == 1000
    assert res.stdout.startswith(b"a" * 1000) and res.stdout.endswith(b"END")


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, indirect=True)
def test_copy_in_and_copy_out(impl: Impl, tmp_path: Path) -> None:
    box = impl.box
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("alpha\n")
    (src / "sub" / "b.bin").write_bytes(bytes(range(256)))
    os.symlink("a.txt", src / "link")
    dest = f"{box.workdir}/incoming"
    box.copy_in(src, dest, uid=AGENT_ID, gid=AGENT_ID)
    owners = box.exec(["stat", "-c", "%u %n", dest, f"{dest}/a.txt", f"{dest}/sub/b.bin"],
                      timeout=60)
    assert [line.split()[0] for line in owners.stdout.decode().splitlines()] == [
        str(AGENT_ID)] * 3
    # the agent works on what came in; what goes out is what it left
    box.exec(["sh", "-c", f"cd {dest} && cat a.txt > c.txt && echo beta >> c.txt"],
             timeout=60).check()
    out = tmp_path / "out"
    out.mkdir()
    box.copy_out(dest, out)
    assert (out / "a.txt").read_text() == "alpha\n"
    assert (out / "c.txt").read_text() == "alpha\nbeta\n"
    assert (out / "sub" / "b.bin").read_bytes() == bytes(range(256))
    assert (out / "link").is_symlink() and os.readlink(out / "link") == "a.txt"


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, indirect=True)
def test_commands_run_as_the_promised_user(impl: Impl) -> None:
    box = impl.box
    assert box.exec(["id", "-un"], timeout=60).stdout.decode().strip() == box.user == "agent"
    as_root = box.exec(["id", "-u"], user="root", timeout=60).stdout.decode().strip()
    assert as_root == ("0" if impl.honours_user else str(AGENT_ID))
    shadow = box.exec(["cat", "/etc/shadow"], timeout=60)
    assert shadow.exit_code != 0  # the default user is never root


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, indirect=True)
def test_the_sandbox_has_no_way_out(impl: Impl) -> None:
    # (an internal network has a default route to its bridge, which forwards nothing)
    probe = ("import socket\n"
             "s = socket.socket(); s.settimeout(5)\n"
             "try:\n    s.connect(('1.1.1.1', 53)); print('reached')\n"
             "except OSError as e:\n    print('refused', e)\n")
    res = impl.box.exec(["python3", "-c", probe], timeout=60)
    assert res.stdout.startswith(b"refused"), res.stdout
    assert impl.box.exec(["getent", "hosts", "example.com"], timeout=60).exit_code != 0


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, indirect=True)
def test_death_from_inside_is_detected(impl: Impl) -> None:
    box = impl.box
    since = time.time()
    state = box.exit_state(since)
    assert state is not None and state.running
    impl.container.exec(["kill", "-TERM", "1"], user=impl.pid1_user, timeout=60)
    assert _wait(lambda: not impl.container.is_running())
    state = box.exit_state(since)
    assert state is not None and not state.running and state.from_inside
    with pytest.raises(SandboxError):  # what an agent running in it sees
        box.exec(["true"], timeout=60)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, indirect=True)
def test_a_kill_from_outside_and_a_removal_are_not_the_agents(impl: Impl) -> None:
    box = impl.box
    since = time.time()
    impl.container.api.kill(impl.container.id)  # an operator, a sweep: not the agent
    assert _wait(lambda: not impl.container.is_running())
    state = box.exit_state(since)
    assert state is not None and not state.running
    assert state.killed_via_api and not state.from_inside
    impl.container.remove()
    assert box.exit_state(since) is None  # the harness removed it itself


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, indirect=True)
def test_end_user_processes_keeps_its_promise(impl: Impl) -> None:
    box = impl.box
    box.exec(["sh", "-c", "setsid sleep 4711 >/dev/null 2>&1 < /dev/null &"], timeout=60)
    assert _wait(lambda: "sleep 4711" in _ps(impl))
    assert box.end_user_processes(box.user) == ""
    if impl.ends_leftovers:
        assert _wait(lambda: "sleep 4711" not in _ps(impl)), _ps(impl)
    else:  # Cowork: the agent user's processes are the task's (its MCP servers)
        time.sleep(0.5)
        assert "sleep 4711" in _ps(impl)
    with pytest.raises(ValueError):
        impl.container.end_user_processes("root")
