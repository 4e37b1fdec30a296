"""A sandbox kept for a reattach, and adopting it again on resume.

An agent server's ``docker_exec`` task works inside one named sandbox. When the harness
stops waiting before the task settled (a client give-up, a crash, SIGKILL), killing that
sandbox would throw away paid work the task may still finish. So such sandboxes are created
with the :data:`~harness.sandbox.labels.REATTACH` label (the runner's automatic sweeps leave
them running; their TTL ends them when nobody comes back), and each instance folder holds
``sandbox.json`` (:class:`SandboxRecord`): the container, where it runs, and what is
protected in it.

A resume reads the ancestor's record and :func:`adopt` takes the container over when it is
still the same sandbox: running, with the recorded labels, and every protected file still
hashing to what was recorded (checked inside, as root). Anything else is a
:class:`ReattachUnavailable` with a reason code, and the caller starts over.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Any, Literal

import docker
from docker.errors import APIError, NotFound
from pydantic import BaseModel, ConfigDict

from harness.core.fsutil import atomic_write_json, read_json
from harness.sandbox import labels as L
from harness.sandbox.container import Sandbox, SandboxSpec
from harness.sandbox.lease import parse_engine_time
from harness.sandbox.protected import ProtectedExecutable

RECORD_NAME = "sandbox.json"


class ReattachUnavailable(Exception):
    """The kept sandbox cannot be taken over; ``reason`` says why (for the row)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class ProtectedRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    launcher: str
    target: str
    sha256: str
    size: int
    launcher_sha256: str
    launcher_size: int


class SandboxRecord(BaseModel):
    """``<instance>/sandbox.json``: the sandbox an instance's agent worked in."""

    model_config = ConfigDict(extra="forbid")

    schema_: Literal["harness.sandbox_record.v1"] = "harness.sandbox_record.v1"
    container_id: str
    name: str
    image: str
    run_id: str
    instance_id: str
    run_root: str
    worker: str
    engine: str | None = None
    user: str
    workdir: str | None
    ttl_s: int
    created_unix: float
    reattachable: bool
    protected: list[ProtectedRecord] = []

    def expires_unix(self) -> float:
        return self.created_unix + self.ttl_s


def record_of(sandbox: Sandbox) -> SandboxRecord:
    """The record of ``sandbox``, with what is protected in it."""
    info = sandbox.api.inspect_container(sandbox.id)
    labels = (info.get("Config") or {}).get("Labels") or {}
    return SandboxRecord(
        container_id=sandbox.id, name=sandbox.name, image=sandbox.spec.image,
        run_id=sandbox.spec.run_id, instance_id=sandbox.spec.instance_id,
        run_root=labels.get(L.RUN_ROOT) or str(Path(sandbox.spec.run_root).absolute()),
        worker=sandbox.spec.worker, engine=labels.get(L.ENGINE), user=sandbox.spec.user,
        workdir=sandbox.spec.workdir, ttl_s=int(sandbox.spec.ttl_s),
        created_unix=_created(info), reattachable=bool(labels.get(L.REATTACH)),
        protected=[ProtectedRecord(launcher=p.launcher, target=p.target, sha256=p.sha256,
                                   size=p.size, launcher_sha256=p.launcher_sha256,
                                   launcher_size=p.launcher_size)
                   for p in sandbox.protected_records])


def _created(info: dict[str, Any]) -> float:
    started = (info.get("State") or {}).get("StartedAt") or info.get("Created")
    parsed = parse_engine_time(started) if started else None
    return parsed if parsed is not None else time.time()


def write_record(instance_dir: Path, record: SandboxRecord) -> Path:
    path = Path(instance_dir) / RECORD_NAME
    atomic_write_json(path, record)
    return path


def read_record(path: Path) -> SandboxRecord | None:
    """The record, or None when absent or unreadable (then there is nothing to adopt)."""
    try:
        return SandboxRecord.model_validate(read_json(path))
    except (OSError, ValueError):
        return None


def bind_mounts(info: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """(host folder, container path) of each bind mount in a container's ``docker inspect``
    (what the engine set up: nothing a process inside the container can change)."""
    return tuple((str(m["Source"]), str(m["Destination"])) for m in info.get("Mounts") or []
                 if m.get("Type") == "bind")


def adopt(client: docker.DockerClient, record: SandboxRecord) -> Sandbox:
    """Take the recorded sandbox over, or raise :class:`ReattachUnavailable`."""
    api = client.api
    try:
        info = api.inspect_container(record.container_id)
    except NotFound:
        raise ReattachUnavailable("sandbox_gone", f"sandbox {record.name} no longer exists "
                                  "(removed, or its TTL ended)") from None
    except APIError as exc:
        raise ReattachUnavailable("sandbox_unreadable",
                                  f"sandbox {record.name}: {exc.explanation or exc}") from None
    labels = (info.get("Config") or {}).get("Labels") or {}
    state = info.get("State") or {}
    if not state.get("Running"):
        raise ReattachUnavailable("sandbox_stopped", f"sandbox {record.name} is not running")
    expected = {L.REATTACH: labels.get(L.REATTACH) or "", L.RUN: record.run_id,
                L.INSTANCE: record.instance_id, L.RUN_ROOT: record.run_root}
    if not labels.get(L.REATTACH) or any(labels.get(k) != v for k, v in expected.items()) or \
            str(info.get("Name", "")).lstrip("/") != record.name:
        raise ReattachUnavailable("sandbox_mismatch", f"container {record.container_id[:12]} "
                                  "is not the recorded sandbox (name or labels differ)")
    # the engine's own account of its network and host folders (not the record's)
    spec = SandboxSpec(image=record.image, run_id=record.run_id, instance_id=record.instance_id,
                       run_root=Path(record.run_root), worker=record.worker,
                       ttl_s=record.ttl_s, user=record.user, workdir=record.workdir,
                       network=str((info.get("HostConfig") or {}).get("NetworkMode") or "none"),
                       binds=bind_mounts(info))
    sandbox = Sandbox(client, record.container_id, record.name, spec)
    _check_protected(sandbox, record)
    for p in record.protected:
        sandbox._record(ProtectedExecutable(
            launcher=p.launcher, target=p.target, sha256=p.sha256, size=p.size,
            launcher_sha256=p.launcher_sha256, launcher_size=p.launcher_size))
    return sandbox


def _check_protected(sandbox: Sandbox, record: SandboxRecord) -> None:
    """Every protected file and launcher still hashes to the record (hashed as root)."""
    want = {}
    for p in record.protected:
        want[p.target] = p.sha256
        want[p.launcher] = p.launcher_sha256
    if not want:
        return
    paths = " ".join(shlex.quote(path) for path in want)
    res = sandbox.exec(f"sha256sum -- {paths}", user="root", timeout=120, workdir="/")
    seen = {}
    for line in res.stdout.decode(errors="replace").splitlines():
        digest, _, path = line.partition("  ")
        seen[path.strip()] = digest.strip()
    changed = sorted(path for path, digest in want.items() if seen.get(path) != digest)
    if res.exit_code != 0 or changed:
        raise ReattachUnavailable("sandbox_protected_changed",
                                  f"sandbox {record.name}: protected file(s) missing or changed "
                                  f"since it was kept: {', '.join(changed) or 'unreadable'}")
