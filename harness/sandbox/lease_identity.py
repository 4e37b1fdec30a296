"""Who owns a sandbox resource: a stable host id plus the owning process, as Docker labels.

Every container, network and volume of a run carries these labels (``labels.run_labels``)
so that a sweep on *any* host sharing the Docker engine can tell whose it is:

* ``harness.host``: a random id made once per machine (or container) and kept in the
  harness cache folder (``$HARNESS_CACHE_DIR/host-id``, else ``~/.cache/harness/host-id``).
  ``/etc/machine-id`` is only a fallback: container images often ship the same one.
* ``harness.hostname``: for humans only.
* ``harness.boot_id``, ``harness.pidns``: the kernel boot and the PID namespace of the
  owning process. A pid can be checked only where all three (host id, boot, PID namespace)
  equal ours: a pid from another boot or another container's namespace means nothing here.
* ``harness.pid``, ``harness.pid_start``: the owning process and its start time (clock
  ticks since boot, ``/proc/<pid>/stat`` field 22), so a reused pid is not mistaken for it.
"""

from __future__ import annotations

import functools
import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.core.cache import cache_root as cache_root

HOST = "harness.host"
HOSTNAME = "harness.hostname"
BOOT = "harness.boot_id"
PIDNS = "harness.pidns"
PID = "harness.pid"
PID_START = "harness.pid_start"

HOST_ID_NAME = "host-id"


@dataclass(frozen=True)
class Owner:
    """The process that owns a resource (or holds a lease), as recorded in its labels."""

    host: str
    hostname: str
    boot: str
    pidns: str
    pid: int
    start: str  # "" when unknown

    def labels(self) -> dict[str, str]:
        return {
            HOST: self.host,
            HOSTNAME: self.hostname,
            BOOT: self.boot,
            PIDNS: self.pidns,
            PID: str(self.pid),
            PID_START: self.start,
        }

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> Owner | None:
        """The owner recorded in ``labels``; None for resources of older versions."""
        host, pid = labels.get(HOST), labels.get(PID, "")
        if not host or not pid.isdigit():
            return None
        return cls(host=host, hostname=labels.get(HOSTNAME, ""), boot=labels.get(BOOT, ""),
                   pidns=labels.get(PIDNS, ""), pid=int(pid), start=labels.get(PID_START, ""))

    def checkable_from(self, here: Owner) -> bool:
        """True if this owner's pid can be checked by ``here``: same host, boot, namespace."""
        return bool(self.boot and self.pidns) and (self.host, self.boot, self.pidns) == (
            here.host, here.boot, here.pidns)


@functools.lru_cache(maxsize=4)
def host_id(cache: Path | None = None) -> str:
    """This machine's stable harness host id (made once, atomically, in the cache folder).

    If the cache folder cannot be written: ``machine-<machine-id>-<hostname>`` (a pid is
    still checked only where the boot id and PID namespace match too).
    """
    try:
        return _stored_host_id(cache or cache_root())
    except OSError:
        machine = _read("/etc/machine-id") or "unknown"
        return f"machine-{machine}-{socket.gethostname()}"


def _stored_host_id(folder: Path) -> str:
    path = folder / HOST_ID_NAME
    try:
        value = path.read_text().strip()
        if value:
            return value
    except FileNotFoundError:
        pass
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{HOST_ID_NAME}.{os.getpid()}.{uuid.uuid4().hex}"
    tmp.write_text(uuid.uuid4().hex + "\n")
    try:
        os.link(tmp, path)  # first writer wins; a concurrent loser reads the winner's id
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return path.read_text().strip()


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def boot_id() -> str:
    return _read("/proc/sys/kernel/random/boot_id")


def pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` fields from field 3 (state) on; None if there is no such pid."""
    raw = _read(f"/proc/{pid}/stat")
    if not raw or ")" not in raw:
        return None
    return raw[raw.rindex(")") + 1:].split()  # the command name may hold spaces and ")"


def process_start(pid: int) -> str:
    fields = _stat_fields(pid)
    return fields[19] if fields and len(fields) > 19 else ""


def process_alive(pid: int, start: str = "") -> bool:
    """True if ``pid`` runs here (not a zombie) and, when ``start`` is known, started then."""
    fields = _stat_fields(pid)
    if not fields or fields[0] in ("Z", "X", "x"):
        return False
    return not start or (len(fields) > 19 and fields[19] == start)


def current_owner() -> Owner:
    """This process, as an owner (the pid is read at each call: forks get their own)."""
    pid = os.getpid()
    return Owner(host=host_id(), hostname=socket.gethostname(), boot=boot_id(),
                 pidns=pid_namespace(), pid=pid, start=process_start(pid))
