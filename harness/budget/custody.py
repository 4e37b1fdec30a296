"""Is the process that holds a custody entry still alive?

An entry records host name, boot id, pid and the pid's start time (``/proc/<pid>/stat``
field 22). On this host it is *stale* when the boot id changed, the pid is gone (or a
zombie), or the pid now belongs to another process (start time differs). An entry of
another host cannot be checked from here: it is treated as live, and an operator clears
it with ``harness campaign reconcile``.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .models import ActiveRun

Liveness = Literal["alive", "dead", "unknown"]


@dataclass(frozen=True)
class ProcessIdentity:
    host: str
    boot_id: str | None
    pid: int
    start_ticks: int | None


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces.
    return raw[raw.rfind(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20:
        return None
    return int(fields[19])  # field 22 overall: starttime


def identify(pid: int) -> ProcessIdentity:
    return ProcessIdentity(socket.gethostname(), _boot_id(), pid, start_ticks(pid))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    fields = _stat_fields(pid)
    return not (fields is not None and fields[0] in {"Z", "X"})


def liveness(entry: ActiveRun) -> Liveness:
    if entry.host != socket.gethostname():
        return "unknown"
    boot = _boot_id()
    if entry.boot_id and boot and entry.boot_id != boot:
        return "dead"
    if not pid_alive(entry.pid):
        return "dead"
    if entry.pid_start_ticks is not None:
        now = start_ticks(entry.pid)
        if now is not None and now != entry.pid_start_ticks:
            return "dead"
    return "alive"


def describe(entry: ActiveRun) -> str:
    return f"run {entry.run_id} (pid {entry.pid} on {entry.host}, run root {entry.run_root})"
