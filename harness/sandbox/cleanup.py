"""Cleanup you can prove: remove by exact label, then list again.

* :func:`sweep` removes every container, network and volume labelled with one run (and
  optionally one worker), lists again and raises :class:`SweepIncomplete`
  (``sweep_incomplete``) if anything survived.
* Run locks: the controller holds an exclusive ``flock`` (``filelock.FileLock``) on
  :func:`run_lock_path` for the whole run. :func:`sweep_stale` finds runs by label
  and sweeps those whose lock is free or whose run root is gone: their controller is
  dead, so their resources are orphans. A run root without a lock file (a runner or
  test stand-in that never locks) is judged by its containers: while one runs, the
  run is left alone (it expires by TTL); otherwise its leftovers are swept. Hold
  :func:`run_lock` while a run has sandboxes.
* :func:`leaked_resources` lists what is labelled ``harness.run`` (for assertions).
"""

from __future__ import annotations

import fcntl
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import docker
from docker.errors import APIError, NotFound
from filelock import FileLock

from harness.layout import keep_marker, lock_path
from harness.sandbox import labels as L
from harness.sandbox.client import get_client
from harness.sandbox.errors import SweepIncomplete

SWEEP_WAIT_S = 30.0


run_lock_path = lock_path  # the one definition is harness.layout


def run_lock(run_root: Path | str) -> FileLock:
    """The run's lock (not yet acquired): ``with run_lock(root).acquire(timeout=0): ...``."""
    path = run_lock_path(run_root)
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path))


def lock_is_held(run_root: Path | str) -> bool:
    """True if some open file description (any process, this one too) holds the run lock."""
    try:
        fd = os.open(run_lock_path(run_root), os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def _listing(api: docker.APIClient, filters: list[str]) -> dict[str, list[dict]]:
    return {
        "containers": api.containers(all=True, filters={"label": filters}),
        "networks": api.networks(filters={"label": filters}),
        "volumes": api.volumes(filters={"label": filters}).get("Volumes") or [],
    }


def _name(kind: str, item: dict) -> str:
    if kind == "containers":
        names = item.get("Names") or [item["Id"][:12]]
        return str(names[0]).lstrip("/")
    return str(item["Name"])


def _remove(api: docker.APIClient, kind: str, item: dict) -> None:
    try:
        if kind == "containers":
            api.remove_container(item["Id"], force=True, v=True)
        elif kind == "networks":
            api.remove_network(item["Id"])
        else:
            api.remove_volume(item["Name"], force=True)
    except NotFound:
        pass
    except APIError:
        pass  # in use or removal in progress: the next round lists it again


def sweep(
    run_id: str,
    worker: str | None = None,
    *,
    client: docker.DockerClient | None = None,
    wait_s: float = SWEEP_WAIT_S,
) -> list[str]:
    """Remove everything labelled with ``run_id`` (and ``worker``); return what was removed."""
    api = (client or get_client()).api
    filters = L.label_filters(run_id, worker)
    removed: list[str] = []
    deadline = time.monotonic() + wait_s
    while True:
        listing = _listing(api, filters)
        left = [
            (kind, item) for kind in ("containers", "networks", "volumes") for item in listing[kind]
        ]
        if not left:
            return removed
        if time.monotonic() > deadline:
            names = ", ".join(f"{kind[:-1]} {_name(kind, item)}" for kind, item in left)
            raise SweepIncomplete(f"sweep of run {run_id} left {len(left)} resource(s): {names}")
        for kind, item in left:
            name = _name(kind, item)
            if name not in removed:
                removed.append(name)
            # Networks go only once their containers are gone.
            if kind == "containers" or not listing["containers"]:
                _remove(api, kind, item)
        time.sleep(0.1)


@dataclass
class _Run:
    roots: set[str] = field(default_factory=set)
    running: bool = False  # some container of the run is running


def _runs(api: docker.APIClient) -> dict[str, _Run]:
    runs: dict[str, _Run] = {}
    for kind, items in _listing(api, [L.RUN]).items():
        for item in items:
            labels = item.get("Labels") or {}
            run_id = labels.get(L.RUN)
            if run_id:
                run = runs.setdefault(run_id, _Run())
                run.roots.add(labels.get(L.RUN_ROOT, ""))
                # "created" counts as live: a sandbox is created, then started
                run.running |= kind == "containers" and item.get("State") in (
                    "running", "created", "restarting")
    return runs


def _stale(run: _Run) -> bool:
    """Stale: every run root is gone, or its lock exists and is free.

    A root without a lock file belongs to a runner that never took the lock (a test
    stand-in, say): its running containers cannot be judged, so only its leftovers
    (stopped containers, networks, volumes) are stale. Running ones expire by TTL.
    """
    for root in run.roots:
        if not root:
            return False  # no run root label: not ours to judge
        if not Path(root).exists():
            continue
        if keep_marker(root).exists():
            return False  # --keep-sandboxes: only `harness sweep --run` (or the TTL) ends them
        if not run_lock_path(root).exists():
            if run.running:
                return False
            continue
        if lock_is_held(root):
            return False
    return True


def sweep_stale(
    client: docker.DockerClient | None = None, *, run_id_prefix: str | None = None
) -> list[str]:
    """Sweep every run whose lock is not held; return their run ids.

    ``run_id_prefix`` limits the sweep to matching runs (tests use it so they can only
    touch runs they created).
    """
    client = client or get_client()
    swept = []
    for run_id, run in sorted(_runs(client.api).items()):
        if run_id_prefix is not None and not run_id.startswith(run_id_prefix):
            continue
        if _stale(run):
            sweep(run_id, client=client)
            swept.append(run_id)
    return swept


def leaked_resources(
    client: docker.DockerClient | None = None,
    *,
    run_id_prefix: str | None = None,
    run_root_under: Path | str | None = None,
) -> dict[str, list[str]]:
    """Containers, networks and volumes labelled ``harness.run``, as ``name (run id)``.

    Optionally only those whose run id has ``run_id_prefix`` or whose run root lies
    under ``run_root_under`` (either match counts when both are given).
    """
    api = (client or get_client()).api
    roots = []
    if run_root_under is not None:  # labels hold absolute (not resolved) paths
        roots = sorted({str(Path(run_root_under).absolute()), str(Path(run_root_under).resolve())})
    out: dict[str, list[str]] = {}
    for kind, items in _listing(api, [L.RUN]).items():
        names = []
        for item in items:
            labels = item.get("Labels") or {}
            run_id, root = labels.get(L.RUN, ""), labels.get(L.RUN_ROOT, "")
            wanted = run_id_prefix is None and run_root_under is None
            wanted |= run_id_prefix is not None and run_id.startswith(run_id_prefix)
            wanted |= any(root == r or root.startswith(r.rstrip("/") + "/") for r in roots)
            if wanted:
                names.append(f"{_name(kind, item)} ({run_id})")
        out[kind] = names
    return out
