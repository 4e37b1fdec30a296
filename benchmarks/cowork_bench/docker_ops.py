"""The Docker operations the Cowork phases need, on :mod:`harness.sandbox`.

Everything created here is a ``harness.sandbox`` resource: labelled with the run
(``harness.run``, ``harness.instance``, ``harness.worker``, ``harness.run_root``) plus
``harness.cowork.role`` (``pg``, ``agent``, ``eval-<attempt>``); containers run ``sleep
<ttl>`` under Docker's init and expire by themselves. Teardown removes by the exact run and
instance labels and lists again to prove nothing is left. A caller holds the run's lock
(``harness.sandbox.run_lock``) while it runs, so ``sweep_stale`` leaves it alone.

Every container drops all capabilities, sets ``no-new-privileges`` and has CPU, memory and
process limits (:class:`Limits`; options ``--cowork-cpus``, ``--cowork-memory``,
``--cowork-pids``). The agent container's own user is the unprivileged ``agent`` (so a
``docker exec`` without ``-u``, e.g. a gateway's process tools, is not root); the harness's
set-up steps that need another owner go through the daemon (``put_archive`` with owners in
the tar headers), never through a capability inside the container.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from docker.errors import APIError, NotFound

from harness.errors import InfraError
from harness.sandbox import Sandbox, SandboxSpec, create_internal_network, get_client
from harness.sandbox import labels as L
from harness.sandbox.images import AGENT_UID, AGENT_USER

ROLE_LABEL = "harness.cowork.role"
INSTANCE_LABEL = L.INSTANCE
AGENT = AGENT_USER  # the unprivileged user of the runtime image (uid AGENT_UID)
AGENT_IDS = (AGENT_UID, AGENT_UID)

DEFAULT_CPUS = 1.0  # per container (capped at the host's CPU count)
DEFAULT_MEMORY = "2g"  # per container, swap disabled
DEFAULT_PIDS = 1024  # per container


@dataclass(frozen=True)
class Limits:
    """Resource limits of every Cowork container (agent, eval, sidecar)."""

    cpus: float = DEFAULT_CPUS
    memory: str = DEFAULT_MEMORY
    pids: int = DEFAULT_PIDS


@dataclass(frozen=True)
class RunIdentity:
    """Whose resources these are: the run, the worker, the run root (for the labels)."""

    run_id: str
    run_root: Path
    worker: str = "main"

    def labels(self, instance_id: str) -> dict[str, str]:
        return L.run_labels(self.run_id, instance_id, self.worker, self.run_root)


@dataclass(frozen=True)
class ExecResult:
    exit_code: int  # 124 when the bound was hit (like coreutils timeout)
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False


def create_network(ident: RunIdentity, instance_id: str) -> str:
    """A labelled internal network (no route out); containers find each other by name."""
    return create_internal_network(ident.run_id, instance_id, ident.worker, ident.run_root)


def start(
    image: str,
    ident: RunIdentity,
    instance_id: str,
    *,
    network: str,
    role: str,
    env: Mapping[str, str] | None = None,
    ttl_s: int = 7200,
    limits: Limits | None = None,
    user: str = "0",
    runtime: str | None = None,
) -> Sandbox:
    """A container with no capabilities, ``no-new-privileges`` and ``limits``; ``user`` is
    its own user (``docker exec`` without ``-u``)."""
    limits = limits or Limits()
    spec = SandboxSpec(
        image=image,
        run_id=ident.run_id,
        instance_id=instance_id,
        run_root=ident.run_root,
        worker=ident.worker,
        ttl_s=ttl_s,
        network=network,
        cpus=limits.cpus,
        memory=limits.memory,
        pids_limit=limits.pids,
        cap_drop=("ALL",),
        no_new_privileges=True,
        user="root" if user == "0" else user,
        container_user=user,
        workdir="/",
        env=dict(env or {}),
        labels={ROLE_LABEL: role},
        runtime=runtime,
    )
    return Sandbox.create(spec)


def exec_in(
    sandbox: Sandbox,
    cmd: list[str],
    *,
    env: Mapping[str, str] | None = None,
    workdir: str | None = None,
    timeout_sec: float | None = None,
    user: str = "root",
    stdin: bytes | None = None,
) -> ExecResult:
    """Run ``cmd`` as ``user`` (root has no capabilities here); secrets go in ``stdin``."""
    res = sandbox.exec(
        cmd, user=user, timeout=timeout_sec, env=env, workdir=workdir or "/", stdin=stdin
    )
    code = 124 if res.timed_out else (res.exit_code if res.exit_code is not None else -1)
    return ExecResult(
        exit_code=code,
        stdout=res.stdout.decode("utf-8", "replace"),
        stderr=res.stderr.decode("utf-8", "replace"),
        seconds=res.wall_s,
        timed_out=res.timed_out,
    )


def put_archive(sandbox: Sandbox, dest: str, data: bytes | IO[bytes]) -> None:
    """Unpack the tar ``data`` into the existing directory ``dest`` of the container."""
    try:
        ok = sandbox.api.put_archive(sandbox.id, dest, data)
    except (APIError, NotFound) as exc:
        raise InfraError(f"copy into {sandbox.name}:{dest}: {exc}", "copy_failed") from exc
    if not ok:
        raise InfraError(f"copy into {sandbox.name}:{dest} refused", reason_code="copy_failed")


def make_dirs(sandbox: Sandbox, dirs: list[tuple[str, int, int]]) -> None:
    """Create (or re-own) absolute directories ``(path, uid, mode)`` through the daemon."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, uid, mode in dirs:
            info = tarfile.TarInfo(path.strip("/"))
            info.type, info.mode, info.uid, info.gid = tarfile.DIRTYPE, mode, uid, uid
            tar.addfile(info)
    put_archive(sandbox, "/", buf.getvalue())


def tar_tree(
    entries: list[tuple[Path, str]],
    *,
    exclude_names: frozenset[str] = frozenset(),
    owner: tuple[int, int] = (0, 0),
) -> bytes:
    """A tar of trusted host paths (the checkout), each placed at an archive name; skips
    names in ``exclude_names``; every entry owned by ``owner`` (uid, gid)."""

    def _filter(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if set(PurePosixPath(info.name).parts) & exclude_names:
            return None
        info.uid, info.gid = owner
        info.uname = info.gname = ""
        return info

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for src, arcname in entries:
            tar.add(str(src), arcname=arcname, recursive=True, filter=_filter)
    return buf.getvalue()


def copy_out(sandbox: Sandbox, src: str, dest: Path) -> None:
    """Copy the contents of directory ``src`` into host directory ``dest`` (created)."""
    dest.mkdir(parents=True, exist_ok=True)
    sandbox.copy_out(src, dest)


def remove(sandbox: Sandbox | None) -> None:
    if sandbox is not None and not sandbox.removed:
        sandbox.remove(verify=True, missing_ok=True)


def remove_labelled(labels: Mapping[str, str]) -> dict[str, Any]:
    """Remove every container and network carrying all ``labels``; list again to prove it.

    Returns ``{removed_containers, removed_networks, remaining: []}``; raises ``InfraError``
    (``cleanup_failed``) if anything is left.
    """
    api = get_client().api
    filters = {"label": [f"{k}={v}" for k, v in labels.items()]}
    removed_c: list[str] = []
    removed_n: list[str] = []
    deadline = time.monotonic() + 30
    while True:
        try:
            for item in api.containers(all=True, filters=filters):
                with contextlib.suppress(NotFound, APIError):  # APIError: removal in progress
                    api.remove_container(item["Id"], force=True, v=True)
                removed_c.append(str((item.get("Names") or [item["Id"]])[0]).lstrip("/"))
            for item in api.networks(filters=filters):
                with contextlib.suppress(NotFound, APIError):  # APIError: still in use
                    api.remove_network(item["Id"])
                removed_n.append(str(item["Name"]))
            remaining = [
                str((c.get("Names") or [c["Id"]])[0])
                for c in api.containers(all=True, filters=filters)
            ] + [str(n["Name"]) for n in api.networks(filters=filters)]
        except APIError as exc:
            raise InfraError(f"cleanup by labels {dict(labels)}: {exc}", "cleanup_failed") from exc
        if not remaining or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if remaining:
        raise InfraError(f"still present after cleanup: {remaining}", reason_code="cleanup_failed")
    return {
        "removed_containers": sorted(set(removed_c)),
        "removed_networks": sorted(set(removed_n)),
        "remaining": [],
    }
