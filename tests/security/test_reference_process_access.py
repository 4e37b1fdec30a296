"""Attack: read a running reference through the kernel (ptrace, /proc/<pid>/mem, exe, maps,
fd, process_vm_readv), or trace it from its start. Issue 11 item 3, ProgramBench fixture.

The calculator exits at once, so the attack keeps it alive: its stdout is a pipe that is
already full, so its final write blocks until the attacker drains the pipe. Every read is
refused (the kernel marks the process non-dumpable: its user cannot read the program), and a
traced start makes the kernel ignore the launcher's setuid bit: the reference never runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.security.reference_support import (
    assert_no_reference_bytes,
    attack_log,
    fixture_reference,
    run_attack,
)

pytestmark = pytest.mark.docker

PEEK = r"""
import ctypes, os, sys
pid = int(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
ctypes.set_errno(0)
attach = libc.ptrace(16, pid, None, None)           # PTRACE_ATTACH
print("ptrace_attach=" + ("ok" if attach == 0 else "errno%d" % ctypes.get_errno()))
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
buf = ctypes.create_string_buffer(4096)
local = iovec(ctypes.cast(buf, ctypes.c_void_p), 4096)
remote = iovec(0x400000, 4096)
libc.process_vm_readv.restype = ctypes.c_ssize_t
n = libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
print("vm_readv=" + ("ok" if n >= 0 else "errno%d" % ctypes.get_errno()))
"""

ATTACK = """
cd /workspace
try() {{ name=$1; shift; if "$@" 2>>attack.err; then echo "$name=ok"; else echo "$name=denied"; fi; }}
mkfifo /tmp/full
exec 3<>/tmp/full
head -c 65536 /dev/zero >&3                     # the pipe is now full
./reference_executable 2 + 3 >&3 &
pid=$!
sleep 1
{{
echo "alive=$(test -d /proc/$pid && echo yes)"
echo "uid=$(awk '/^Uid:/ {{print $2}}' /proc/$pid/status)"
try exe sh -c "cat /proc/$pid/exe > stolen_exe.bin"
try mem sh -c "dd if=/proc/$pid/mem bs=4096 skip=1024 count=4 of=stolen_mem.bin"
try maps sh -c "cat /proc/$pid/maps > stolen_maps.txt"
try fd ls /proc/$pid/fd
try map_files ls /proc/$pid/map_files
try strace_attach strace -p $pid -o strace_attach.txt
python3 -c '{peek}' $pid
try traced_start sh -c "strace -f -o traced.txt ./reference_executable 2 + 3 > traced_out.txt"
echo "traced_out=$(cat traced_out.txt)"
echo "setid_files=$(find / -xdev -perm /6000 -type f 2>/dev/null | tr '\n' ' ')"
echo "cap_eff=$(awk '/^CapEff/ {{print $2}}' /proc/self/status)"
echo "core_limit=$(ulimit -Hc)"
}} > attack.log
cat /tmp/full > /dev/null &                     # drain: the reference finishes
wait $pid; echo "exit=$?" >> attack.log
"""


def test_a_running_reference_cannot_be_read_or_traced(tmp_path: Path) -> None:
    ref = fixture_reference()
    command = ATTACK.format(peek=PEEK.replace("'", "'\\''"))
    run, row = run_attack(tmp_path / "run", command)
    log = dict(line.split("=", 1) for line in attack_log(run, row).splitlines())
    assert log["alive"] == "yes" and log["uid"] == "1000", log  # runs as the agent user
    for attempt in ("exe", "mem", "maps", "fd", "map_files", "strace_attach"):
        assert log[attempt] == "denied", (attempt, log)
    assert log["ptrace_attach"] == "errno1" and log["vm_readv"] == "errno1", log  # EPERM
    # Traced from its start, the launcher runs without its owner and stops (exit 126).
    assert log["traced_start"] == "denied" and log["traced_out"] == "", log
    assert log["exit"] == "0", log  # the blocked reference then finished normally
    # The launcher is the only privilege transition left; the agent holds no capability.
    assert log["setid_files"].split() == ["/workspace/reference_executable"], log
    assert log["cap_eff"] == "0000000000000000" and log["core_limit"] == "0", log
    preflight = row["details"]["programbench"]["preflight"]
    assert preflight["agent_capabilities"]["CapEff"] == "0000000000000000"
    errors = attack_log(run, row, "attack.err")
    assert "cannot open the protected program" in errors, errors
    assert assert_no_reference_bytes(run, row, ref) > 3
