"""Point 3: exec with user, env, workdir, stdin, and a timeout that kills the whole tree."""

from __future__ import annotations

import hashlib
import http.client
import time

import pytest

from harness.errors import InfraError
from harness.sandbox.container import Sandbox
from harness.sandbox.errors import ExecFailed, ExecTimeout


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
    started = time.monotonic()
    res = sandbox.exec(TREE, timeout=1.5, user=user)
    elapsed = time.monotonic() - started
    assert res.timed_out and res.stdout == b"started\n"
    assert 1.5 <= elapsed < 4.0, elapsed
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
