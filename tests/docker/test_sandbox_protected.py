"""Point 5: a reference binary the agent can run but not read, copy, hash or trace.

Each refusal has a control showing the same operation works on an ordinary file or
process, so a test cannot pass merely because a tool is missing.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from harness.sandbox.container import Sandbox
from harness.sandbox.errors import ProtectedInstallFailed

REF = "/opt/ref/reference"

PEEK = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
target = sys.argv[1]
pid = os.fork()
if pid == 0:
    libc.ptrace(0, 0, None, None)          # PTRACE_TRACEME
    os.execv(target, [target])
os.waitpid(pid, 0)                         # stopped at exec
ctypes.set_errno(0)
libc.ptrace(2, pid, ctypes.c_void_p(0x401000), None)   # PTRACE_PEEKTEXT
print(ctypes.get_errno())
os.kill(pid, 9)
"""


@pytest.fixture
def protected(sandbox: Sandbox, protected_elf: Path) -> Sandbox:
    sandbox.install_protected(protected_elf, REF)
    sandbox.copy_in(protected_elf, "/opt/plain")  # control: an ordinary readable copy
    sandbox.exec(["chmod", "0755", "/opt/plain/ref"], user="root").check()
    return sandbox


def test_installed_root_owned_execute_only(protected: Sandbox) -> None:
    assert protected.exec(["stat", "-c", "%U:%G %a", REF]).stdout == b"root:root 111\n"


def test_agent_can_run_it(protected: Sandbox) -> None:
    res = protected.exec([REF, "x", "y"])
    assert (res.exit_code, res.stdout) == (0, b"reference output 3\n")


@pytest.mark.parametrize("cmd", ["cat {}", "cp {} /tmp/copy", "sha256sum {}", "head -c 4 {}"])
def test_agent_cannot_read_copy_or_hash_it(
    protected: Sandbox, protected_elf: Path, cmd: str
) -> None:
    res = protected.exec(cmd.format(REF) + " > /dev/null")
    assert res.exit_code != 0 and b"Permission denied" in res.stderr, res
    control = protected.exec(cmd.format("/opt/plain/ref") + " > /dev/null")
    assert control.exit_code == 0, control
    digest = hashlib.sha256(protected_elf.read_bytes()).hexdigest()
    assert digest.encode() in protected.exec("sha256sum /opt/plain/ref").stdout


def test_proc_exe_of_the_running_reference_is_refused(protected: Sandbox) -> None:
    script = (
        '"$1" sleep & pid=$!; sleep 0.3; '
        'cat /proc/$pid/exe > /dev/null; echo "exe=$?"; '
        'cat /proc/$pid/maps > /dev/null; echo "maps=$?"; '
        'sleep 60 & own=$!; cat /proc/$own/exe > /dev/null; echo "control=$?"; '
        "kill $pid $own"
    )
    res = protected.exec(["sh", "-c", script, "sh", REF], timeout=30)
    assert res.stdout.decode().split() == ["exe=1", "maps=1", "control=0"], res
    assert res.stderr.count(b"Permission denied") == 2


def test_ptrace_attach_is_refused(protected: Sandbox) -> None:
    script = (
        '"$1" sleep & pid=$!; sleep 0.3; strace -p $pid -o /dev/null; echo "ref=$?"; '
        'sleep 60 & own=$!; sleep 0.2; timeout -s INT 1 strace -p $own -o /dev/null; echo "control=$?"; '
        "kill $pid $own"
    )
    res = protected.exec(["sh", "-c", script, "sh", REF], timeout=30)
    assert b"Operation not permitted" in res.stderr, res
    out = res.stdout.decode().split()
    assert out[0] == "ref=1" and out[1] in ("control=0", "control=130", "control=124"), res


def test_tracing_from_launch_cannot_read_its_memory(protected: Sandbox) -> None:
    """A tracer started before exec stays attached, but memory reads fail (EIO)."""
    res = protected.exec(["python3", "-c", PEEK, REF], timeout=30)
    assert res.stdout.strip() == b"5", res  # EIO
    control = protected.exec(["python3", "-c", PEEK, "/opt/plain/ref"], timeout=30)
    assert control.stdout.strip() == b"0", control
    # strace's string decoding needs memory reads: the output text never appears.
    traced = protected.exec(["strace", "-e", "trace=write", "-o", "/tmp/trace", REF], timeout=30)
    assert traced.stdout == b"reference output 1\n"
    log = protected.exec(["cat", "/tmp/trace"]).stdout
    assert b"write(1" in log and b"reference output" not in log


def test_protected_file_never_leaves_in_exports(
    sandbox: Sandbox, protected_elf: Path, tmp_path: Path
) -> None:
    sandbox.install_protected(protected_elf, "/workspace/executable")
    sandbox.exec("echo src > /workspace/main.c").check()
    assert sandbox.export_tar_gz("/workspace", tmp_path / "sub.tar.gz") == ["main.c"]
    assert sandbox.copy_out("/workspace", tmp_path / "out") == ["main.c"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["main.c"]


def test_scripts_are_refused(sandbox: Sandbox) -> None:
    with pytest.raises(ProtectedInstallFailed) as info:
        sandbox.install_protected(b"#!/bin/sh\necho hi\n", "/opt/ref/script")
    assert "ELF" in str(info.value) and info.value.reason_code == "protected_install_failed"
