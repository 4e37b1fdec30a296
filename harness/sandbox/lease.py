"""Run leases on the Docker engine, and the one rule that says a run is dead.

Several hosts may share one Docker engine (a remote ``DOCKER_HOST``, a socket mounted in
several containers): a sweep cannot judge another host's run by its run root (not visible
here) nor by its run lock (a ``flock`` on that host). Liveness must be visible on the
engine itself. Labels cannot change after creation, so the heartbeat is a sequence of
**lease volumes**:

* At admission the controller creates a labelled, empty Docker volume
  ``harness-lease-<run>-<hex>`` (``harness.lease=1``, the run's labels, the owner's labels
  of :mod:`harness.sandbox.lease_identity`, ``harness.lease.ttl_s``). A thread renews it
  every ``ttl_s / 3`` seconds by creating a fresh volume and then removing the older ones
  (TTL 120 s, or ``$HARNESS_LEASE_TTL_S``). A volume is cheap (a folder on the engine, no
  image, no process), and its ``CreatedAt`` is stamped by the engine: expiry is
  ``CreatedAt + ttl_s`` compared with the engine's own clock (``docker info``
  ``SystemTime``), so the clocks of different hosts never matter. (A lease *container*
  would need an image and a process; Docker configs need swarm.) The lease carries no
  ``harness.run_root`` (see :func:`lease_labels`).
* At session end the heartbeat stops and the lease is removed, then the run's sweep.
  ``--keep-sandboxes`` makes a lease labelled ``harness.lease.keep=1`` that never expires:
  only ``harness sweep --run`` (or the sandboxes' own TTL) ends such a run.

:func:`judge` decides, for one run, from its resources' labels and its leases:

1. kept (a keep lease): **alive**;
2. some owner recorded on the run (lease or resource) is checkable from here (same host
   id, boot and PID namespace) and its process is alive: **alive**. Owners are the
   controller (the lease) and whichever process created a resource (an xdist worker);
3. an unexpired lease whose owner is not checkable from here (another host): **alive**;
4. the run has leases, and none is alive by 1-3 (expired, or its owner's pid is gone on
   this host): **stale**;
5. no lease, every recorded owner is checkable from here and gone: **stale**;
6. otherwise (resources of older versions without owner labels, or another host's
   resources without a lease, such as a test's bare sandboxes): judged by TTL only:
   **stale** once every container's ``Created + harness.ttl_s`` has passed on the engine
   clock (a container without the TTL label is never stale) and, for a run with no
   container left, once its networks and volumes are :data:`LEGACY_TTL_S` old.

Never the absence of a local path: a run root that does not exist here proves nothing.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, NotFound

from harness.sandbox import labels as L
from harness.sandbox.client import get_client
from harness.sandbox.lease_identity import Owner, current_owner, process_alive

LEASE = "harness.lease"  # "1" on lease volumes
LEASE_ID = "harness.lease.id"  # one per Lease object: its renewals share it
LEASE_TTL = "harness.lease.ttl_s"
LEASE_KEEP = "harness.lease.keep"
LEASE_WORKER = "lease"  # the harness.runner.worker label of lease volumes (worker sweeps skip it)

LEASE_TTL_S = 120.0  # default; HARNESS_LEASE_TTL_S overrides (at least 3 s)
LEASE_TTL_ENV = "HARNESS_LEASE_TTL_S"
LEGACY_TTL_S = 24 * 3600.0

_FRACTION = re.compile(r"(\.\d{1,6})\d*")


def default_ttl_s() -> float:
    """The lease TTL of a run: ``$HARNESS_LEASE_TTL_S`` if a number >= 3, else 120 s."""
    try:
        return max(3.0, float(os.environ.get(LEASE_TTL_ENV, "")))
    except ValueError:
        return LEASE_TTL_S


def parse_engine_time(value: Any) -> float | None:
    """Unix seconds from a Docker timestamp (RFC 3339 with nanoseconds, or an int)."""
    if isinstance(value, (int, float)):
        return float(value) if value > 0 else None
    if not isinstance(value, str) or not value or value.startswith("0001-"):
        return None
    text = _FRACTION.sub(r"\1", value.strip()).replace("Z", "+00:00")
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def engine_now(api: docker.APIClient) -> float:
    """The engine's clock (``docker info`` ``SystemTime``), in unix seconds."""
    now = parse_engine_time(api.info().get("SystemTime"))
    if now is None:
        raise RuntimeError("the Docker engine reports no usable SystemTime")
    return now


@dataclass(frozen=True)
class Resource:
    """One labelled container, network or volume, as the sweep sees it."""

    kind: str  # "containers" | "networks" | "volumes"
    name: str
    labels: Mapping[str, str]
    created: float | None  # engine clock

    @property
    def is_lease(self) -> bool:
        return self.kind == "volumes" and self.labels.get(LEASE) == "1"

    @property
    def owner(self) -> Owner | None:
        return Owner.from_labels(self.labels)

    def lease_expires(self) -> float | None:
        try:
            ttl = float(self.labels.get(LEASE_TTL, ""))
        except ValueError:
            return None
        return None if self.created is None else self.created + ttl

    def ttl_end(self) -> float | None:
        try:
            ttl = float(self.labels.get(L.TTL, ""))
        except ValueError:
            return None
        return None if self.created is None else self.created + ttl


@dataclass(frozen=True)
class Verdict:
    stale: bool
    reason: str


def judge(resources: Iterable[Resource], here: Owner, now: float) -> Verdict:
    """Alive or proven dead (see the module docstring for the rule, in this order)."""
    items = list(resources)
    leases = [r for r in items if r.is_lease]
    if any(r.labels.get(LEASE_KEEP) == "1" for r in leases):
        return Verdict(False, "kept (--keep-sandboxes)")
    owners = {o for o in (r.owner for r in items) if o is not None}
    local = {o for o in owners if o.checkable_from(here)}
    for o in sorted(local, key=lambda o: o.pid):
        if process_alive(o.pid, o.start):
            return Verdict(False, f"owner pid {o.pid} is alive on this host")
    for lease in leases:
        expires, owner = lease.lease_expires(), lease.owner
        if owner is not None and owner.checkable_from(here):
            continue  # its pid was checked above: gone
        if expires is None or expires > now:
            where = owner.hostname or owner.host if owner else "an unknown host"
            left = "unknown" if expires is None else f"{expires - now:.0f}s"
            return Verdict(False, f"lease of {where} valid ({left} left)")
    if leases:
        return Verdict(True, "lease expired or its owner is gone")
    if owners and owners == local:
        return Verdict(True, "owner pid(s) gone on this host")
    containers = [r for r in items if r.kind == "containers"]
    ends = [r.ttl_end() for r in containers] if containers else [
        None if r.created is None else r.created + LEGACY_TTL_S for r in items]
    if not ends or any(end is None or end > now for end in ends):
        return Verdict(False, "no lease and TTL not expired")
    return Verdict(True, "no lease and TTL expired")


def lease_labels(
    run_id: str, run_root: Path | str, lease_id: str, ttl_s: float, keep: bool,
    owner: Mapping[str, str] | None = None,
) -> dict[str, str]:
    labels = L.run_labels(run_id, LEASE_WORKER, LEASE_WORKER, run_root, owner=owner)
    # No harness.run_root: a local path means nothing on the engine, and sweeps of older
    # harness versions leave a run with an unlabelled root alone (so do mixed fleets).
    del labels[L.RUN_ROOT]
    return {
        **labels,
        LEASE: "1",
        LEASE_ID: lease_id,
        LEASE_TTL: f"{ttl_s:g}",
        LEASE_KEEP: "1" if keep else "0",
    }


def create_lease_volume(
    api: docker.APIClient, run_id: str, run_root: Path | str, *, lease_id: str,
    ttl_s: float, keep: bool = False, owner: Mapping[str, str] | None = None,
) -> str:
    """One lease volume (also used by tests to stand in for another host's run)."""
    name = L.resource_name("harness-lease", run_id, "l")
    api.create_volume(name, driver="local",
                      labels=lease_labels(run_id, run_root, lease_id, ttl_s, keep, owner))
    return name


@dataclass
class Lease:
    """This run's heartbeat on the engine: ``Lease(...).acquire()``, later ``release()``."""

    run_id: str
    run_root: Path
    ttl_s: float = field(default_factory=default_ttl_s)
    keep: bool = False
    client: docker.DockerClient | None = None
    lease_id: str = field(default_factory=lambda: secrets.token_hex(8))
    renewals: int = 0
    last_error: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def _api(self) -> docker.APIClient:
        if self.client is None:
            self.client = get_client()
        return self.client.api

    def renew(self) -> str:
        """Create a fresh lease volume, then remove this lease's older ones."""
        api = self._api()
        name = create_lease_volume(api, self.run_id, self.run_root, lease_id=self.lease_id,
                                   ttl_s=self.ttl_s, keep=self.keep,
                                   owner=current_owner().labels())
        self.renewals += 1
        self._remove(keep_name=name)
        return name

    def _remove(self, keep_name: str | None = None) -> None:
        api = self._api()
        found = api.volumes(filters={"label": [f"{LEASE_ID}={self.lease_id}"]}).get("Volumes")
        for vol in found or []:
            if vol["Name"] != keep_name:  # gone or in removal: the next renewal tries again
                with contextlib.suppress(NotFound, APIError):
                    api.remove_volume(vol["Name"], force=True)

    def acquire(self) -> Lease:
        self.renew()
        if not self.keep:  # a kept run never expires: nothing to renew
            self._thread = threading.Thread(target=self._beat, name="harness-lease",
                                            daemon=True)
            self._thread.start()
        return self

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                self.renew()
                self.last_error = None
            except Exception as exc:  # Docker hiccup: the next beat tries again
                self.last_error = f"{type(exc).__name__}: {exc}"[:500]

    def stop(self) -> None:
        """Stop renewing (the lease then expires after ``ttl_s``)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def release(self) -> None:
        """Stop renewing and remove the lease (a kept lease stays)."""
        self.stop()
        if not self.keep:
            self._remove()

    def record(self) -> dict[str, Any]:
        """For the manifest: what identifies this lease (no secret in it)."""
        owner = current_owner()
        return {"lease_id": self.lease_id, "ttl_s": self.ttl_s, "keep": self.keep,
                "host": owner.host, "hostname": owner.hostname, "pid": owner.pid,
                "renewals": self.renewals, "last_error": self.last_error,
                "at_unix": round(time.time(), 3)}
