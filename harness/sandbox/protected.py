"""Protected artifacts: a reference binary the agent may run but not read.

The file is put in place as root:root mode 0111 (execute only). What keeps it secret
(measured on this machine, kernel 6.x, Docker 20.10; see tests/docker/test_protected.py):

* ``cat``/``cp``/``sha256sum`` as a non-root user: ``EACCES`` (no read bit).
* The kernel marks a process that execs an unreadable file non-dumpable, so its
  ``/proc/<pid>/exe``, ``maps`` and ``mem`` are refused to the agent, and so is
  ``ptrace`` attach (``strace -p``: ``EPERM``).
* A tracer the agent starts *before* the exec (``strace ./bin``, ``PTRACE_TRACEME``)
  stays attached and sees syscall numbers and register values, but every memory read
  (``PTRACE_PEEKTEXT``, strace's string decoding) fails with ``EIO``: the kernel
  requires ``CAP_SYS_PTRACE`` to read a non-dumpable process's memory, and the sandbox
  drops it (``cap_drop=("SYS_PTRACE",)``; the agent user has no capabilities anyway).
  Blocking that syscall-level view too would need a seccomp profile without ``ptrace``.

A script cannot be protected this way: its interpreter must read it.
"""

from __future__ import annotations

import docker

from harness.sandbox import transfer
from harness.sandbox.errors import ProtectedInstallFailed
from harness.sandbox.execution import run_exec

PROTECTED_MODE = 0o111


def install_protected(api: docker.APIClient, container_id: str, data: bytes, dest: str) -> None:
    if not data.startswith(b"\x7fELF"):
        raise ProtectedInstallFailed(
            f"{dest}: a protected artifact must be a compiled ELF executable "
            "(an execute-only script cannot run: its interpreter must read it)"
        )
    archive = transfer.pack_bytes(dest, data, mode=PROTECTED_MODE, uid=0, gid=0)
    transfer.put_archive(api, container_id, dest, archive)
    # Check what landed: owner, group and mode exactly (put_archive keeps tar headers).
    res = run_exec(api, container_id, ["stat", "-c", "%u:%g:%a", dest], user="root", timeout=60)
    got = res.stdout.decode().strip()
    if not res.ok or got != "0:0:111":
        raise ProtectedInstallFailed(
            f"{dest} was installed as {got or res.stderr!r}, expected 0:0:111"
        )
