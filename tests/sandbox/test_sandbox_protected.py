"""A protected executable: the agent runs it through a setuid launcher, never reads it.

Each refusal has a control showing the same operation works on an ordinary file or
process, so a test cannot pass merely because a tool is missing. The program under test
is dynamically linked (like most real references), so loader injection is exercised.
"""

from __future__ import annotations

import hashlib
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from harness.runner.sandbox_fixtures import SandboxFactory
from harness.sandbox.container import Sandbox
from harness.sandbox.errors import ProtectedInstallFailed
from harness.sandbox.protected import (
    PROTECTED_DIR,
    PROTECTED_SANDBOX_CAP_DROP,
    PROTECTED_SANDBOX_ULIMITS,
    PROTECTED_UID,
    ProtectedExecutable,
)

pytestmark = pytest.mark.docker

REF = "/opt/ref/reference"
TARGET = f"{PROTECTED_DIR}/reference"

PROGRAM_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
extern char **environ;
int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "sleep") == 0) { sleep(120); return 0; }
    if (argc > 2 && strcmp(argv[1], "write") == 0) {
        FILE *f = fopen(argv[2], "w");
        if (!f) return 3;
        fputs("written\n", f);
        return fclose(f) == 0 ? 0 : 4;
    }
    if (argc > 1 && strcmp(argv[1], "env") == 0) {
        for (char **e = environ; *e; e++) puts(*e);
        return 0;
    }
    printf("argc=%d\n", argc);
    for (int i = 0; i < argc; i++) printf("[%s]\n", argv[i]);
    fprintf(stderr, "to stderr\n");
    return argc == 1 ? 0 : 40 + argc;
}
"""

PRELOAD_C = r"""
#include <stdio.h>
__attribute__((constructor)) static void injected(void) {
    FILE *f = fopen("/tmp/INJECTED", "w");
    if (f) fclose(f);
}
"""

# vfs_cap_data revision 2, effective: cap_dac_override (bit 1) permitted and effective.
DAC_OVERRIDE_FCAPS = struct.pack("<IIIII", 0x02000001, 1 << 1, 0, 0, 0)


def _gcc(tmp: Path, name: str, source: str, *flags: str) -> Path:
    gcc = shutil.which("gcc")
    assert gcc, "gcc is needed to build the test programs: apt-get install gcc libc6-dev"
    (tmp / f"{name}.c").write_text(source)
    out = tmp / name
    subprocess.run([gcc, "-O2", *flags, "-o", str(out), str(tmp / f"{name}.c")], check=True)
    return out


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dynamically linked ELF (the base image has the host's Debian libc)."""
    return _gcc(tmp_path_factory.mktemp("prog"), "reference", PROGRAM_C)


@pytest.fixture(scope="module")
def preload(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _gcc(tmp_path_factory.mktemp("so"), "inject.so", PRELOAD_C, "-shared", "-fPIC")


@pytest.fixture
def sandbox_options() -> dict[str, Any]:
    """What a sandbox holding a protected program runs with (see harness.sandbox.protected)."""
    return {
        "user": "agent",
        "network": "none",
        "cap_drop": PROTECTED_SANDBOX_CAP_DROP,
        "ulimits": PROTECTED_SANDBOX_ULIMITS,
    }


@pytest.fixture
def installed(sandbox: Sandbox, program: Path) -> ProtectedExecutable:
    prot = sandbox.install_protected(program, REF)
    sandbox.copy_in(program, "/opt/plain")  # control: an ordinary readable copy
    sandbox.exec(["chmod", "0755", "/opt/plain/reference"], user="root").check()
    return prot


def test_layout_owner_and_modes(sandbox: Sandbox, installed: ProtectedExecutable,
                                program: Path) -> None:
    res = sandbox.exec(["stat", "-c", "%n %u %a", PROTECTED_DIR, TARGET, REF], user="root")
    assert res.stdout.decode().splitlines() == [
        f"{PROTECTED_DIR} {PROTECTED_UID} 700",
        f"{TARGET} {PROTECTED_UID} 111",
        f"{REF} {PROTECTED_UID} 4111",
    ]
    digest = hashlib.sha256(program.read_bytes()).hexdigest()
    assert (installed.sha256, installed.size) == (digest, program.stat().st_size)
    assert sandbox.protected_hashes[digest] == program.stat().st_size
    assert sandbox.protected_hashes[installed.launcher_sha256] == installed.launcher_size
    assert REF in sandbox.protected


def test_status_streams_and_argv_pass_through(installed: ProtectedExecutable,
                                              sandbox: Sandbox) -> None:
    res = sandbox.exec([REF, "a b", "", "-x", "*"])
    assert res.exit_code == 45
    assert res.stdout == b"argc=5\n[/opt/ref/reference]\n[a b]\n[]\n[-x]\n[*]\n"
    assert res.stderr == b"to stderr\n"
    relative = sandbox.exec("cd /opt/ref && ./reference")
    assert (relative.exit_code, relative.stdout) == (0, b"argc=1\n[./reference]\n")
    stdin = sandbox.exec(f"echo piped | {REF} x; echo rc=$?")
    assert stdin.stdout.endswith(b"rc=42\n")


def test_runs_as_the_caller_and_writes_the_callers_files(installed: ProtectedExecutable,
                                                         sandbox: Sandbox) -> None:
    assert sandbox.exec([REF, "write", "/tmp/out.txt"]).exit_code == 0
    owner = sandbox.exec(["stat", "-c", "%U:%G %s", "/tmp/out.txt"]).stdout
    assert owner == b"agent:agent 8\n"


def test_loader_variables_are_removed_others_kept(installed: ProtectedExecutable,
                                                  sandbox: Sandbox, preload: Path) -> None:
    sandbox.copy_in(preload, "/tmp", uid=1000, gid=1000)
    env = "LD_PRELOAD=/tmp/inject.so LD_LIBRARY_PATH=/tmp GCONV_PATH=/tmp KEEP_ME=1 TMPDIR=/t"
    res = sandbox.exec(f"env {env} {REF} env")
    names = {line.split("=", 1)[0] for line in res.stdout.decode().splitlines()}
    assert res.exit_code == 0 and {"KEEP_ME", "PATH", "HOME"} <= names
    # glibc's unsecure list (TMPDIR included: glibc drops it for any setuid program)
    assert not names & {"LD_PRELOAD", "LD_LIBRARY_PATH", "GCONV_PATH", "TMPDIR"}, names
    assert sandbox.exec("test -e /tmp/INJECTED").exit_code == 1
    control = sandbox.exec("LD_PRELOAD=/tmp/inject.so /opt/plain/reference; test -e /tmp/INJECTED")
    assert control.exit_code == 0, control


@pytest.mark.parametrize("path", [REF, TARGET])
@pytest.mark.parametrize("cmd", ["cat {}", "cp {} /tmp/copy", "sha256sum {}", "head -c 4 {}"])
def test_agent_cannot_read_copy_or_hash_it(
    installed: ProtectedExecutable, sandbox: Sandbox, program: Path, cmd: str, path: str
) -> None:
    res = sandbox.exec(cmd.format(path) + " > /dev/null")
    assert res.exit_code != 0 and b"Permission denied" in res.stderr, res
    control = sandbox.exec(cmd.format("/opt/plain/reference") + " > /dev/null")
    assert control.exit_code == 0, control


@pytest.mark.parametrize("cmd", [f"mv {TARGET} /tmp/x", f"ln {TARGET} /tmp/x",
                                 f"ls {PROTECTED_DIR}", f"ln -s {TARGET} /tmp/l && cat /tmp/l"])
def test_agent_cannot_move_link_or_list_the_real_file(
    installed: ProtectedExecutable, sandbox: Sandbox, cmd: str
) -> None:
    res = sandbox.exec(cmd)
    assert res.exit_code != 0 and b"Permission denied" in res.stderr, res
    assert sandbox.exec(["test", "-f", TARGET], user="root").exit_code == 0


def test_proc_views_of_the_running_program_are_refused(installed: ProtectedExecutable,
                                                       sandbox: Sandbox) -> None:
    script = (
        '"$1" sleep & pid=$!; sleep 0.5; '
        'for f in exe maps mem; do cat /proc/$pid/$f > /dev/null; echo "$f=$?"; done; '
        'ls /proc/$pid/fd > /dev/null; echo "fd=$?"; '
        'grep ^Uid: /proc/$pid/status | tr -s "\\t " " "; '
        'sleep 60 & own=$!; cat /proc/$own/exe > /dev/null; echo "control=$?"; '
        "kill $pid $own"
    )
    res = sandbox.exec(["sh", "-c", script, "sh", REF], timeout=30)
    lines = res.stdout.decode().splitlines()
    assert lines[:4] == ["exe=1", "maps=1", "mem=1", "fd=2"], res
    assert lines[4] == "Uid: 1000 1000 1000 1000" and lines[5] == "control=0", res


def test_ptrace_attach_is_refused(installed: ProtectedExecutable, sandbox: Sandbox) -> None:
    script = (
        '"$1" sleep & pid=$!; sleep 0.5; strace -p $pid -o /dev/null; echo "ref=$?"; '
        'sleep 60 & own=$!; sleep 0.2; timeout -s INT 1 strace -p $own -o /dev/null; '
        'echo "control=$?"; kill $pid $own'
    )
    res = sandbox.exec(["sh", "-c", script, "sh", REF], timeout=30)
    assert b"Operation not permitted" in res.stderr, res
    out = res.stdout.decode().split()
    assert out[0] == "ref=1" and out[1] in ("control=0", "control=130", "control=124"), res


def test_a_traced_launch_does_not_run_the_program(installed: ProtectedExecutable,
                                                  sandbox: Sandbox) -> None:
    """Tracing from the start: the kernel ignores the setuid bit, the launcher exits 126."""
    res = sandbox.exec(["strace", "-f", "-o", "/tmp/trace", REF, "x"], timeout=30)
    assert res.exit_code == 126 and b"cannot open the protected program" in res.stderr, res
    assert b"argc=" not in res.stdout
    control = sandbox.exec(["strace", "-o", "/tmp/trace2", "/opt/plain/reference"], timeout=30)
    assert control.exit_code == 0 and b"argc=1" in control.stdout, control


def test_no_core_dump_limit(installed: ProtectedExecutable, sandbox: Sandbox) -> None:
    assert sandbox.exec("ulimit -Hc").stdout == b"0\n"


def test_protected_file_never_leaves_in_exports(
    sandbox: Sandbox, program: Path, tmp_path: Path
) -> None:
    sandbox.install_protected(program, "/workspace/executable")
    sandbox.exec("echo src > /workspace/main.c").check()
    assert sandbox.export_tar_gz("/workspace", tmp_path / "sub.tar.gz") == ["main.c"]
    assert sandbox.copy_out("/workspace", tmp_path / "out") == ["main.c"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["main.c"]


def test_protect_in_place_moves_the_file_and_is_idempotent(sandbox: Sandbox,
                                                           program: Path) -> None:
    sandbox.copy_in(program, "/workspace")
    sandbox.exec(["sh", "-c", "mv /workspace/reference /workspace/executable && "
                  "chown 0:0 /workspace/executable && chmod 0111 /workspace/executable"],
                 user="root").check()
    candidates = ["/workspace/executable", "/workspace/run_me"]
    first = sandbox.protect_executable(candidates, "/workspace/run_me")
    again = sandbox.protect_executable(candidates, "/workspace/run_me")
    assert (first.sha256, first.size) == (again.sha256, again.size)
    assert first.sha256 == hashlib.sha256(program.read_bytes()).hexdigest()
    listing = sandbox.exec("ls -A /workspace").stdout.decode().split()
    assert listing == ["run_me"]
    assert sandbox.exec(["/workspace/run_me", "q"]).stdout == b"argc=2\n[/workspace/run_me]\n[q]\n"


def test_already_presented_program_and_its_other_copies(sandbox: Sandbox,
                                                        program: Path) -> None:
    """The real file already at the launcher's path, a hard link and a copy elsewhere."""
    sandbox.copy_in(program, "/workspace")
    setup = ("cd /workspace && chown 0:0 reference && chmod 0111 reference && "
             "ln reference /opt/hardlink && cp -p reference /usr/local/bin/copy && "
             "chmod 0755 /usr/local/bin/copy")
    sandbox.exec(["sh", "-c", setup], user="root").check()
    prot = sandbox.protect_executable(["/workspace/executable", "/workspace/reference"],
                                      "/workspace/reference")
    assert prot.sha256 == hashlib.sha256(program.read_bytes()).hexdigest()
    assert sorted(prot.copies) == ["/opt/hardlink", "/usr/local/bin/copy"]
    modes = sandbox.exec(["stat", "-c", "%u %a %h", "/opt/hardlink", "/usr/local/bin/copy",
                          TARGET], user="root")
    assert modes.stdout.decode().splitlines() == ["0 0 1", "0 0 1", f"{PROTECTED_UID} 111 1"]
    for path in ("/opt/hardlink", "/usr/local/bin/copy"):
        res = sandbox.exec(f"cat {path} > /dev/null || {path}")
        assert res.exit_code != 0 and b"Permission denied" in res.stderr, res
    assert sandbox.exec(["/workspace/reference"]).stdout == b"argc=1\n[/workspace/reference]\n"


def test_other_privileged_files_are_stripped(sandbox_factory: SandboxFactory,
                                             sandbox_image: str, program: Path) -> None:
    """setuid/setgid bits and file capabilities: only the launcher is left privileged."""
    box = sandbox_factory(sandbox_image, user="agent", network="none")  # SETFCAP kept here
    setxattr = ("import os, sys; os.setxattr('/usr/bin/head', 'security.capability', "
                "bytes.fromhex(sys.argv[1]))")
    box.exec(["python3", "-c", setxattr, DAC_OVERRIDE_FCAPS.hex()], user="root").check()
    box.exec("cp /bin/cat /tmp/mycat && chmod 4755 /tmp/mycat", user="root").check()
    before = box.exec("head -c 1 /etc/shadow > /dev/null && echo READ")
    assert before.stdout == b"READ\n", before  # the threat: a file capability reads anything
    prot = box.install_protected(program, REF)
    assert "fcaps /usr/bin/head" in prot.stripped and "setid /tmp/mycat" in prot.stripped
    assert "setid /usr/bin/su" in prot.stripped
    after = box.exec("head -c 1 /etc/shadow > /dev/null && echo READ")
    assert after.exit_code != 0 and b"Permission denied" in after.stderr, after
    left = box.exec("find / -xdev -perm /6000 -type f", user="root").stdout.decode().split()
    assert left == [REF]


def test_no_new_privileges_sandbox_is_refused(sandbox_factory: SandboxFactory,
                                              sandbox_image: str, program: Path) -> None:
    box = sandbox_factory(sandbox_image, user="agent", network="none", no_new_privileges=True)
    with pytest.raises(ProtectedInstallFailed, match="no_new_privileges"):
        box.install_protected(program, REF)


def test_scripts_are_refused(sandbox: Sandbox) -> None:
    with pytest.raises(ProtectedInstallFailed) as info:
        sandbox.install_protected(b"#!/bin/sh\necho hi\n", "/opt/ref/script")
    assert "ELF" in str(info.value) and info.value.reason_code == "protected_install_failed"
