"""Cleanup you can prove: remove by exact label, then list again.

* :func:`sweep` removes every container, network and volume labelled with one run (and
  optionally one worker), lists again and raises :class:`SweepIncomplete`
  (``sweep_incomplete``) if anything survived; :func:`remove_labelled` does the same for
  any set of exact labels (one instance of a run) and returns the names per kind.
* :func:`sweep_stale` (the start-up sweep and ``harness sweep --all-stale``) groups what is
  labelled ``harness.run`` by run and sweeps only the runs :func:`harness.sandbox.lease.judge`
  proves dead: an expired lease, or an owner pid gone on this very host, or (resources
  without owner labels or lease) an expired TTL. Another host's live run on the same engine
  is left alone; a run root that does not exist here proves nothing. A dead run's running
  sandbox kept for a reattach (label ``harness.reattach``) is left to its TTL.
* Run locks: the controller holds an exclusive ``flock`` on :func:`run_lock_path` for the
  whole run (it keeps two runs out of one run root; sweeps no longer read it).
* :func:`leaked_resources` lists what is labelled ``harness.run`` (for assertions).
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Mapping
from pathlib import Path

import docker
from docker.errors import APIError, NotFound
from filelock import FileLock

from harness.core.layout import lock_path
from harness.sandbox import labels as L
from harness.sandbox.client import get_client
from harness.sandbox.errors import SweepIncomplete
from harness.sandbox.lease import Resource, Verdict, engine_now, judge, parse_engine_time
from harness.sandbox.lease_identity import current_owner

SWEEP_WAIT_S = 30.0


run_lock_path = lock_path  # the one definition is harness.core.layout


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


def kept_for_reattach(item: dict) -> bool:
    """A running container labelled :data:`~harness.sandbox.labels.REATTACH` (a listing
    item): an agent server's task may still work in it."""
    labels = item.get("Labels") or {}
    return bool(labels.get(L.REATTACH)) and item.get("State") == "running"


def _spare(listing: dict[str, list[dict]]) -> None:
    """Drop kept sandboxes (and the networks they are attached to) from a listing."""
    kept = [c for c in listing["containers"] if kept_for_reattach(c)]
    if not kept:
        return
    nets = {name for c in kept
            for name in ((c.get("NetworkSettings") or {}).get("Networks") or {})}
    listing["containers"] = [c for c in listing["containers"] if not kept_for_reattach(c)]
    listing["networks"] = [n for n in listing["networks"] if n.get("Name") not in nets]


def _remove_matching(
    api: docker.APIClient, filters: list[str], what: str, wait_s: float,
    spare_kept: bool = False,
) -> list[tuple[str, str]]:
    """Remove what matches every label filter until a listing is empty; ``(kind, name)`` of
    everything seen, in order. Raises :class:`SweepIncomplete` naming what is left.
    ``spare_kept`` leaves running sandboxes kept for a reattach (:func:`kept_for_reattach`)."""
    removed: list[tuple[str, str]] = []
    deadline = time.monotonic() + wait_s
    while True:
        try:
            listing = _listing(api, filters)
        except APIError as exc:
            raise SweepIncomplete(f"sweep of {what}: listing failed: {exc}") from exc
        if spare_kept:
            _spare(listing)
        left = [
            (kind, item) for kind in ("containers", "networks", "volumes") for item in listing[kind]
        ]
        if not left:
            return removed
        if time.monotonic() > deadline:
            names = ", ".join(f"{kind[:-1]} {_name(kind, item)}" for kind, item in left)
            raise SweepIncomplete(f"sweep of {what} left {len(left)} resource(s): {names}")
        for kind, item in left:
            if (kind, _name(kind, item)) not in removed:
                removed.append((kind, _name(kind, item)))
            # Networks go only once their containers are gone.
            if kind == "containers" or not listing["containers"]:
                _remove(api, kind, item)
        time.sleep(0.1)


def sweep(
    run_id: str,
    worker: str | None = None,
    *,
    client: docker.DockerClient | None = None,
    wait_s: float = SWEEP_WAIT_S,
    spare_kept: bool = False,
) -> list[str]:
    """Remove everything labelled with ``run_id`` (and ``worker``); return what was removed.

    ``spare_kept`` (the runner's automatic sweeps) leaves running sandboxes kept for a
    reattach (:func:`kept_for_reattach`; list them with :func:`kept_sandboxes`); a sweep an
    operator asks for removes them too.
    """
    api = (client or get_client()).api
    found = _remove_matching(api, L.label_filters(run_id, worker), f"run {run_id}", wait_s,
                             spare_kept)
    return list(dict.fromkeys(name for _, name in found))


def kept_sandboxes(run_id: str | None = None, *, client: docker.DockerClient | None = None,
                   instance_id: str | None = None) -> list[dict[str, str]]:
    """Running sandboxes kept for a reattach (of ``run_id``, else of every run; optionally
    of one instance): ``{id, name, run, instance, run_root, ttl_s, created}`` each."""
    api = (client or get_client()).api
    filters = [*L.label_filters(run_id), L.REATTACH]
    if instance_id is not None:
        filters.append(f"{L.INSTANCE}={instance_id}")
    out = []
    for item in api.containers(all=True, filters={"label": filters}):
        if not kept_for_reattach(item):
            continue
        labels = item.get("Labels") or {}
        out.append({"id": str(item["Id"]), "name": _name("containers", item),
                    "run": labels.get(L.RUN, ""), "instance": labels.get(L.INSTANCE, ""),
                    "run_root": labels.get(L.RUN_ROOT, ""), "ttl_s": labels.get(L.TTL, ""),
                    "created": str(item.get("Created", ""))})
    return out


def remove_labelled(
    labels: Mapping[str, str],
    *,
    client: docker.DockerClient | None = None,
    wait_s: float = SWEEP_WAIT_S,
) -> dict[str, list[str]]:
    """Remove every container, network and volume carrying all ``labels`` (exact values,
    e.g. one run's instance), then list again to prove nothing is left.

    Returns the names removed per kind (``containers``, ``networks``, ``volumes``; sorted);
    raises :class:`SweepIncomplete` (``sweep_incomplete``) naming what is still listed
    after ``wait_s``. An empty ``labels`` is refused: it would match every resource.
    """
    if not labels:
        raise ValueError("remove_labelled needs at least one label")
    api = (client or get_client()).api
    filters = [f"{k}={v}" for k, v in labels.items()]
    found = _remove_matching(api, filters, f"labels {dict(labels)}", wait_s)
    return {kind: sorted({n for k, n in found if k == kind})
            for kind in ("containers", "networks", "volumes")}


def run_resources(api: docker.APIClient) -> dict[str, list[Resource]]:
    """Everything labelled ``harness.run``, grouped by run id (volumes, leases, last)."""
    runs: dict[str, list[Resource]] = {}
    for kind, items in _listing(api, [L.RUN]).items():
        for item in items:
            labels = item.get("Labels") or {}
            run_id = labels.get(L.RUN)
            if run_id:
                created = item.get("CreatedAt") if kind == "volumes" else item.get("Created")
                runs.setdefault(run_id, []).append(
                    Resource(kind, _name(kind, item), labels, parse_engine_time(created)))
    return runs


def stale_runs(
    client: docker.DockerClient | None = None, *, run_id_prefix: str | None = None
) -> dict[str, Verdict]:
    """Each labelled run (optionally only those with ``run_id_prefix``) and its verdict."""
    api = (client or get_client()).api
    now = engine_now(api)  # read before listing: every lease listed is judged younger
    runs, here = run_resources(api), current_owner()
    return {
        run_id: judge(items, here, now)
        for run_id, items in sorted(runs.items())
        if run_id_prefix is None or run_id.startswith(run_id_prefix)
    }


def sweep_stale(
    client: docker.DockerClient | None = None, *, run_id_prefix: str | None = None
) -> list[str]:
    """Sweep every run proven dead (:func:`harness.sandbox.lease.judge`); return their ids.

    ``run_id_prefix`` limits the sweep to matching runs (tests use it so they can only
    touch runs they created).
    """
    client = client or get_client()
    swept = []
    for run_id, verdict in stale_runs(client, run_id_prefix=run_id_prefix).items():
        # A dead run's sandbox kept for a reattach stays until its TTL ends it.
        if verdict.stale and sweep(run_id, client=client, spare_kept=True):
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
