"""Is the process that holds a custody entry still alive?

An entry records host name, boot id, pid and the pid's start time (``/proc/<pid>/stat``
field 22), and a *lease*: an expiry time the controller pushes forward every quarter of
its length while it lives (:meth:`harness.budget.campaign.Campaign.renew_lease`).

* On this host an entry is *dead* when the boot id changed, the pid is gone (or a zombie),
  or the pid now belongs to another process (start time differs); else alive, whatever its
  lease says (the process may be spending).
* Seen from another host, an entry with a lease is *dead* once the lease expired and
  *alive* while it runs: a runner that vanished (a CI job killed with its machine) stops
  renewing, and after the lease any machine may take its custody over.
* An entry of another host without a lease (written before leases) is ``unknown``: an
  operator clears it with ``harness campaign reconcile``.

The host's name is ``HARNESS_HOST_ID`` when set (a container or CI job names its machine;
tests play a second machine), else the host name.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # annotations only: the runner's collection loads no pydantic model
    from .models import ActiveRun

Liveness = Literal["alive", "dead", "unknown"]
HOST_ID_ENV = "HARNESS_HOST_ID"
DEFAULT_LEASE_SEC = 90.0


def host_name() -> str:
    """This machine's name in custody entries (``HARNESS_HOST_ID``, else the host name)."""
    return os.environ.get(HOST_ID_ENV) or socket.gethostname()


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
    return ProcessIdentity(host_name(), _boot_id(), pid, start_ticks(pid))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    fields = _stat_fields(pid)
    return not (fields is not None and fields[0] in {"Z", "X"})


def lease_left(entry: ActiveRun, now: float | None = None) -> float | None:
    """Seconds until the entry's lease expires (negative once expired), None without one."""
    if entry.lease_expires_unix is None:
        return None
    return entry.lease_expires_unix - (time.time() if now is None else now)


def liveness(entry: ActiveRun, now: float | None = None) -> Liveness:
    if entry.host != host_name():
        left = lease_left(entry, now)
        if left is None:
            return "unknown"
        return "alive" if left > 0 else "dead"
    boot = _boot_id()
    if entry.boot_id and boot and entry.boot_id != boot:
        return "dead"
    if not pid_alive(entry.pid):
        return "dead"
    if entry.pid_start_ticks is not None:
        now_ticks = start_ticks(entry.pid)
        if now_ticks is not None and now_ticks != entry.pid_start_ticks:
            return "dead"
    return "alive"


def describe(entry: ActiveRun) -> str:
    who = f" as {entry.identity}" if entry.identity else ""
    left = lease_left(entry)
    lease = "" if left is None else (
        f", lease {'runs ' + format(left, '.0f') + ' s more' if left > 0 else 'expired'}")
    return (f"run {entry.run_id}{who} (pid {entry.pid} on {entry.host}, run root "
            f"{entry.run_root}{lease})")
