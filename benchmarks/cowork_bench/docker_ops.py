"""The few Docker operations the Cowork phases need, on the docker SDK.

A stopgap with the shape of ``harness.sandbox`` (network, labelled containers that run
``sleep <ttl>`` as PID 1, exec with a bound, copy in and out, removal proven by listing)
until that package lands; then these calls move to it. Containers created here never carry
the ``harness.run`` label (the sweeper owns those): they carry ``harness.cowork.owner``.
"""

from __future__ import annotations

import io
import tarfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import Any

import docker
from docker.errors import APIError, DockerException, NotFound
from docker.models.containers import Container
from docker.models.networks import Network

from harness.errors import InfraError

OWNER_LABEL = "harness.cowork.owner"
INSTANCE_LABEL = "harness.instance"
ROLE_LABEL = "harness.cowork.role"


@lru_cache(maxsize=1)
def client() -> docker.DockerClient:
    try:
        return docker.from_env(timeout=300)
    except DockerException as exc:
        raise InfraError(
            f"Docker is not reachable: {exc}", reason_code="docker_unavailable"
        ) from exc


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str
    seconds: float


def create_network(name: str, labels: Mapping[str, str], internal: bool = True) -> Network:
    """A user-defined bridge network; ``internal`` gives it no route out."""
    try:
        return client().networks.create(
            name, driver="bridge", internal=internal, labels=dict(labels), check_duplicate=True
        )
    except (APIError, DockerException) as exc:
        raise InfraError(f"network {name}: {exc}", reason_code="network_create_failed") from exc


def run_container(
    image: str,
    name: str,
    *,
    network: str,
    labels: Mapping[str, str],
    env: Mapping[str, str] | None = None,
    ttl_sec: int = 3600,
    aliases: list[str] | None = None,
    mem_limit: str = "2g",
) -> Container:
    """Start ``sleep <ttl>`` as PID 1 (an orphan expires by itself) on ``network``."""
    try:
        api = client().api
        host_config = api.create_host_config(
            network_mode=network, mem_limit=mem_limit, pids_limit=512, init=True
        )
        networking = api.create_networking_config(
            {network: api.create_endpoint_config(aliases=aliases or [name])}
        )
        created = api.create_container(
            image,
            command=["sleep", str(ttl_sec)],
            name=name,
            environment=dict(env or {}),
            labels=dict(labels),
            host_config=host_config,
            networking_config=networking,
            working_dir="/",
        )
        api.start(created["Id"])
        return client().containers.get(created["Id"])
    except (APIError, DockerException) as exc:
        raise InfraError(f"container {name}: {exc}", reason_code="container_start_failed") from exc


def exec_in(
    container: Container,
    cmd: list[str],
    *,
    env: Mapping[str, str] | None = None,
    workdir: str | None = None,
    timeout_sec: float | None = None,
    user: str = "",
) -> ExecResult:
    """Run ``cmd`` in the container; ``timeout_sec`` wraps it in coreutils ``timeout``."""
    argv = list(cmd)
    if timeout_sec is not None:
        argv = ["timeout", "-k", "5", str(int(max(1, timeout_sec))), *argv]
    started = time.monotonic()
    try:
        result = container.exec_run(
            argv, environment=dict(env or {}), workdir=workdir, demux=True, user=user
        )
    except (APIError, DockerException) as exc:
        raise InfraError(f"exec in {container.name}: {exc}", reason_code="exec_failed") from exc
    out, err = result.output if result.output else (None, None)
    return ExecResult(
        exit_code=int(result.exit_code if result.exit_code is not None else -1),
        stdout=(out or b"").decode("utf-8", "replace"),
        stderr=(err or b"").decode("utf-8", "replace"),
        seconds=time.monotonic() - started,
    )


def put_archive(container: Container, dest: str, data: bytes) -> None:
    try:
        if not container.put_archive(dest, data):
            raise InfraError(
                f"copy into {container.name}:{dest} refused", reason_code="copy_failed"
            )
    except (APIError, DockerException) as exc:
        raise InfraError(f"copy into {container.name}: {exc}", reason_code="copy_failed") from exc


def tar_tree(
    entries: list[tuple[Path, str]], *, exclude_names: frozenset[str] = frozenset()
) -> bytes:
    """A tar of host paths, each placed at an archive name; skips names in ``exclude_names``."""

    def _filter(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if set(PurePosixPath(info.name).parts) & exclude_names:
            return None
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        return info

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for src, arcname in entries:
            tar.add(str(src), arcname=arcname, recursive=True, filter=_filter)
    return buf.getvalue()


def copy_out(container: Container, src: str, dest: Path) -> None:
    """Copy the directory ``src`` of the container to the host directory ``dest`` (created)."""
    try:
        stream, _stat = container.get_archive(src)
        data = b"".join(stream)
    except (APIError, DockerException) as exc:
        raise InfraError(f"copy out of {container.name}: {exc}", reason_code="copy_failed") from exc
    dest.mkdir(parents=True, exist_ok=True)
    prefix = PurePosixPath(src.rstrip("/")).name
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for member in tar.getmembers():
            parts = PurePosixPath(member.name).parts
            if not parts or parts[0] != prefix or ".." in parts:
                continue
            if not (member.isfile() or member.isdir()):
                continue  # no links or devices from a container on the host
            member.name = str(PurePosixPath(*parts[1:])) if len(parts) > 1 else "."
            tar.extract(member, dest, filter="data")


def remove_container(container: Container | None) -> None:
    if container is None:
        return
    try:
        container.remove(force=True, v=True)
    except NotFound:
        pass
    except (APIError, DockerException) as exc:
        raise InfraError(f"remove {container.name}: {exc}", reason_code="cleanup_failed") from exc


def container_exists(name_or_id: str) -> bool:
    try:
        client().containers.get(name_or_id)
        return True
    except NotFound:
        return False


def remove_labelled(labels: Mapping[str, str]) -> dict[str, Any]:
    """Remove every container and network carrying all ``labels``; list again to prove it.

    Returns ``{removed_containers, removed_networks, remaining}``; raises ``InfraError``
    (``cleanup_failed``) if anything is left.
    """
    filters = {"label": [f"{k}={v}" for k, v in labels.items()]}
    removed_c: list[str] = []
    removed_n: list[str] = []
    for cont in client().containers.list(all=True, filters=filters):
        remove_container(cont)
        removed_c.append(cont.name or cont.id or "?")
    for net in client().networks.list(filters=filters):
        try:
            net.remove()
        except NotFound:
            pass
        except (APIError, DockerException) as exc:
            raise InfraError(
                f"remove network {net.name}: {exc}", reason_code="cleanup_failed"
            ) from exc
        removed_n.append(net.name or net.id or "?")
    remaining = [c.name for c in client().containers.list(all=True, filters=filters)]
    remaining += [n.name for n in client().networks.list(filters=filters)]
    if remaining:
        raise InfraError(f"still present after cleanup: {remaining}", reason_code="cleanup_failed")
    return {"removed_containers": removed_c, "removed_networks": removed_n, "remaining": []}
