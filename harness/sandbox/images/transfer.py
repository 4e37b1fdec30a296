"""Move an image from the controller's engine to an instance's engine (``save | load``).

Used when a run places instances on other engines and an image exists only where the
controller built (or pulled) it: local builds (:func:`harness.sandbox.images.build.ensure_image`)
and the images a sandbox is created from. Once per image per engine: a file lock per
(engine, image) under the run's state dir, and a check that the image is already there
(by ID) inside the lock. The image's tags on the controller are set on the target too,
so tools that name the image (the official ``programbench eval``) find it.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import docker
from docker.errors import DockerException, ImageNotFound
from filelock import FileLock

from harness.core.errors import InfraError
from harness.sandbox import placement
from harness.sandbox.client import EngineClient, long_timeout

TRANSFER_TIMEOUT_S = 3600
CHUNK = 1 << 20


def controller_client() -> docker.DockerClient:
    """A client of the controller's engine (the environment the run started with)."""
    env = placement.controller_environment()
    return EngineClient.from_env(timeout=120, environment=env)


def _image_id(client: docker.DockerClient, ref: str) -> str | None:
    try:
        return str(client.api.inspect_image(ref)["Id"])
    except ImageNotFound:
        return None


def _identity(client: docker.DockerClient) -> tuple[str, str, str]:
    info = client.api.info()
    return str(info.get("ID")), str(info.get("Name")), str(info.get("DockerRootDir"))


def same_engine(a: docker.DockerClient, b: docker.DockerClient) -> bool:
    """Both clients talk to one engine. Not the base URL (every unix socket has the same),
    nor the engine ID alone (daemons sharing a ``key.json``, or cloned hosts, share it)."""
    return _identity(a) == _identity(b)


def transfer(
    ref: str, source: docker.DockerClient, target: docker.DockerClient, lock_path: str
) -> dict[str, Any]:
    """Copy ``ref`` (tag or ID) from ``source`` to ``target`` unless there; return a record."""
    info = source.api.inspect_image(ref)
    image_id, tags = str(info["Id"]), list(info.get("RepoTags") or [])
    with FileLock(lock_path):
        started = time.monotonic()
        moved = _image_id(target, image_id) is None
        if moved:
            with long_timeout(source, TRANSFER_TIMEOUT_S), long_timeout(target, TRANSFER_TIMEOUT_S):
                stream = source.api.get_image(image_id, chunk_size=CHUNK)
                for _ in target.api.load_image(stream):
                    pass
            if _image_id(target, image_id) is None:
                raise InfraError(
                    f"image {ref} is not on engine {target.api.base_url} after docker load",
                    "image_transfer_failed",
                )
        for tag in tags:
            repo, _, name = tag.rpartition(":")
            target.api.tag(image_id, repo, name, force=True)
    return {
        "ref": ref,
        "id": image_id,
        "transferred": moved,
        "seconds": round(time.monotonic() - started, 3),
    }


def ensure_on_engine(ref: str, target: docker.DockerClient) -> str | None:
    """When this instance is placed on another engine: make ``ref`` present there.

    Returns the image ID on the target, or None when no placement is active, the target is
    the controller's engine, or the controller does not have ``ref`` either.
    """
    slot = placement.active()
    if slot is None:
        return None
    source = controller_client()
    try:
        if same_engine(source, target) or _image_id(source, ref) is None:
            return None
        key = hashlib.sha256(f"{slot.engine.index}:{ref}".encode()).hexdigest()[:24]
        lock = placement.engines_dir(slot.run_root) / f"image-{key}.lock"
        record = transfer(ref, source, target, str(lock))
    except DockerException as exc:
        raise InfraError(
            f"moving image {ref} to engine {slot.engine.url} failed: {exc}"[:500],
            "image_transfer_failed",
        ) from exc
    finally:
        source.close()
    return str(record["id"])


__all__ = ["controller_client", "ensure_on_engine", "same_engine", "transfer"]
