"""Point 3: exec with user, env, workdir, stdin, and a timeout that kills the whole tree."""

from __future__ import annotations

import hashlib
import http.client
import time

import pytest

from harness.core.errors import InfraError
from harness.sandbox.container import Sandbox
from harness.sandbox.errors import ExecFailed, ExecTimeout

pytestmark = pytest.mark.docker


def test_argv_and_shell_string(sandbox: Sandbox) -> None:
    res = sandbox.exec(["printf", "%s|", "a b", "$HOME", "*"])
    assert (res.exit_code, res.stdout, res.stderr) == (0, b"a b|$HOME|*|", b"")
    res = sandbox.exec("echo out; echo err >&2; exit 3")
    assert (res.exit_code, res.stdout, res.stderr, res.timed_out) == (3, b"out\n", b"err\n", False)
    assert not res.ok and res.wall_s > 0
    assert sandbox.exec("echo $0", shell=("/bin/bash", "-lc")).stdout == b"/bin/bash\n"


def test_user_env_workdir(sandbox: Sandbox) -> None:
    res = sandbox.exec('id -un; pwd; printf %s "$TOKEN"', env={"TOKEN": "s3cr3t value"})
    assert res.stdout == b"agent\n/workspace\ns3cr3t value"
    res = sandbox.exec(["sh", "-c", "id -u; pwd"], user="root", workdir="/tmp")
    assert res.stdout == b"0\n/tmp\n"


def test_stdin_bytes_round_trip(sandbox: Sandbox) -> None:
    data = bytes(range(256)) * 8192  # 2 MiB, all byte values
    res = sandbox.exec("tee /tmp/in | sha256sum; wc -c < /tmp/in", stdin=data + data)
    digest = hashlib.sha256(data + data).hexdigest()
    assert res.stdout.decode().split() == [digest, "-", str(2 * len(data))]
    assert sandbox.exec("cat", stdin=b"").stdout == b""
    assert sandbox.exec(["cat"], stdin=data).stdout == data


def test_big_output_is_complete(sandbox: Sandbox) -> None:
    res = sandbox.exec("head -c 20000000 /dev/zero; head -c 3000000 /dev/zero >&2")
    assert len(res.stdout) == 20_000_000 and len(res.stderr) == 3_000_000 and not res.truncated


def test_signals_and_missing_commands_keep_their_exit_codes(sandbox: Sandbox) -> None:
    assert sandbox.exec("kill -SEGV $$").exit_code == 139
    missing = sandbox.exec(["no-such-command"])
    assert missing.exit_code == 127 and b"no-such-command" in missing.stderr


TREE = (
    "trap '' TERM HUP INT; "  # ignores polite signals
    "sleep 4242 & "
    "(sleep 4343 & wait) & "
    "setsid sleep 4444 & "  # leaves the process group; still carries the exec token
    "echo started; sleep 4545; echo never"
)


@pytest.mark.parametrize("user", ["agent", "root"])
def test_timeout_kills_the_whole_tree_and_keeps_the_sandbox(sandbox: Sandbox, user: str) -> None:
    res = sandbox.exec(TREE, timeout=1.5, user=user)
    assert res.timed_out and res.stdout == b"started\n"  # ended by the kill, not sleep 4545
    assert res.exit_code == 137
    survivors = sandbox.exec(["ps", "-eo", "stat=,args="], user="root").stdout.decode()
    alive = [ln for ln in survivors.splitlines() if "sleep 4" in ln and not ln.startswith("Z")]
    assert alive == [], survivors
    assert sandbox.exec("echo usable").stdout == b"usable\n"
    with pytest.raises(ExecTimeout) as info:
        res.check()
    assert info.value.reason_code == "exec_timeout" and isinstance(info.value, InfraError)


def test_no_timeout_when_fast_enough(sandbox: Sandbox) -> None:
    res = sandbox.exec("sleep 0.2; echo done", timeout=10)
    assert res.ok and res.stdout == b"done\n" and res.check() is res


def test_exec_in_a_removed_sandbox_is_infra(sandbox: Sandbox) -> None:
    sandbox.remove()
    with pytest.raises(ExecFailed) as info:
        sandbox.exec("true")
    assert info.value.reason_code == "exec_failed"


def test_output_is_kept_when_the_client_reads_headers_late(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy client reads the 101 headers and the first output in one buffered read."""
    original = http.client.HTTPResponse.begin

    def late_begin(self: http.client.HTTPResponse) -> None:
        time.sleep(0.15)  # the command has printed by now
        original(self)

    monkeypatch.setattr(http.client.HTTPResponse, "begin", late_begin)
    for _ in range(3):
        res = sandbox.exec(["sh", "-c", "id -u; pwd; echo e >&2"], user="root", workdir="/tmp")
        assert (res.stdout, res.stderr) == (b"0\n/tmp\n", b"e\n")


def test_head_and_tail_capture_is_bounded_and_counts_everything(sandbox: Sandbox) -> None:
    from harness.sandbox.execution import run_exec

    cmd = "echo first; head -c 30000000 /dev/zero; echo; echo last; echo E >&2"
    res = run_exec(sandbox.api, sandbox.id, cmd, user="agent", max_output=1000, tail_output=500)
    assert res.exit_code == 0 and res.truncated
    assert len(res.stdout) == 1500 and res.stdout_total == len("first\n") + 30_000_000 + 6
    assert res.stdout.startswith(b"first\n") and res.stdout.endswith(b"\x00\nlast\n")
    assert res.stdout_cut == 1000
    assert (res.stderr, res.stderr_total, res.stderr_cut) == (b"E\n", 2, None)


def test_forged_exec_markers_never_reach_another_users_processes(sandbox: Sandbox) -> None:
    """An agent-user command that outlives its timeout forges the old kill-target file (pgid
    1) and processes named after its exec marker; a root command of the harness running at
    the same time is untouched, the agent's tree is gone and nothing is raised."""
    import threading

    from harness.sandbox.execution import ExecResult

    harness_side: dict[str, ExecResult] = {}

    def harness_command() -> None:
        harness_side["res"] = sandbox.exec("sleep 6; echo harness-ok", user="root", timeout=60)

    worker = threading.Thread(target=harness_command)
    worker.start()
    forge = (
        'tok=$HARNESS_EXEC_TOKEN; echo 1 > "/tmp/.harness-exec-$tok.pgid"; '
        '(exec -a "harness-exec-$tok" sleep 4646) & '
        "setsid sleep 4747 & echo forged; sleep 4848"
    )
    res = sandbox.exec(forge, user="agent", timeout=1.5)
    worker.join()
    assert res.timed_out and res.survivors == "" and res.stdout == b"forged\n"
    done = harness_side["res"]
    assert (done.exit_code, done.stdout, done.timed_out) == (0, b"harness-ok\n", False)
    ps = sandbox.exec(["ps", "-eo", "stat=,args="], user="root").stdout.decode()
    assert [ln for ln in ps.splitlines() if "sleep 4" in ln and not ln.startswith("Z")] == []
    assert sandbox.is_running()


def test_stop_event_ends_the_command_like_a_timeout(sandbox: Sandbox) -> None:
    import threading

    from harness.sandbox.execution import run_exec

    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    res = run_exec(sandbox.api, sandbox.id, "echo go; sleep 4949", user="agent", stop=stop)
    assert res.stopped and not res.timed_out and res.stdout == b"go\n"
    ps = sandbox.exec(["ps", "-eo", "args="], user="root").stdout.decode()
    assert "sleep 4949" not in ps


def test_container_exit_tells_inside_from_outside(sandbox_factory, sandbox_image) -> None:
    from harness.sandbox.execution import container_exit

    inside = sandbox_factory(sandbox_image)
    since = time.time()
    assert container_exit(inside.api, inside.id, since).running
    inside.exec("kill -TERM 1", user="root", timeout=30)  # PID 1 ends from within
    deadline = time.monotonic() + 30
    while inside.is_running() and time.monotonic() < deadline:
        time.sleep(0.1)
    state = container_exit(inside.api, inside.id, since)
    assert not state.running and state.from_inside and state.exit_code not in (None, 0)
    outside = sandbox_factory(sandbox_image)
    since = time.time()
    outside.api.kill(outside.id)  # an operator, a sweep, the harness: not the agent
    deadline = time.monotonic() + 30
    while outside.is_running() and time.monotonic() < deadline:
        time.sleep(0.1)
    state = container_exit(outside.api, outside.id, since)
    assert not state.running and state.killed_via_api and not state.from_inside
