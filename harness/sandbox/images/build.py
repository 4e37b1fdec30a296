"""Local images, no registry: debootstrap base images and Dockerfile layers on top.

Nothing can be pulled on our machines, so every image is built here from Debian
packages and tagged by a content hash of its recipe::

    from harness.sandbox.images.build import BaseRecipe, LayerRecipe, base_recipe, ensure_image

    base = ensure_image(base_recipe())            # debootstrap + docker import, ~1 min once
    pg = LayerRecipe(
        name="harness/postgres15",
        base=base_recipe(),
        dockerfile_body="RUN apt-get update && apt-get install -y postgresql-15\n",
    )
    built = ensure_image(pg, retag="cowork/pg:15")  # BuiltImage(tag=..., image_id="sha256:...")

API
  :class:`BaseRecipe`  a ``debootstrap --variant=minbase`` rootfs (suite, ``--include``
                       packages, mirror, shell ``setup`` commands run in a chroot
                       afterwards), imported with ``ENV`` changes (a sane ``PATH``).
  :class:`LayerRecipe` Dockerfile lines after ``FROM <base>`` plus build-context files.
  ``content_hash()``   sha256 of the recipe (a layer's includes its base's hash); the image
                       is tagged ``<name>:<first 24 hex>``.
  :func:`ensure_image` build the image unless its tag exists; returns :class:`BuiltImage`
                       with the immutable ``image_id`` (``sha256:...``) that manifests pin.
                       ``retag`` also tags the result with a fixed name.
  :func:`base_recipe`  THE shared base recipe of the project (bash, coreutils, git,
                       python3 with pytest/xdist/timeout, strace, iproute2, ..., user
                       ``agent`` uid 1000, ``/workspace`` owned by it).

Build once: a second call with the same recipe is a no-op (the tag is the "done"
marker). Concurrent callers (xdist workers, processes) serialize on a
``filelock.FileLock`` in the cache folder and re-check the tag after taking it, so
the image is built once. The cache folder is ``cache_dir``, else
``$HARNESS_CACHE_DIR/images``, else ``~/.cache/harness/images``; it holds the locks,
the build logs (``logs/``) and ``builds.jsonl``, one line per real build.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.errors import ImageNotFound
from docker.utils import parse_repository_tag
from filelock import FileLock, Timeout

from harness.core.cache import cache_root
from harness.core.fsutil import append_line
from harness.sandbox import placement
from harness.sandbox.client import get_client
from harness.sandbox.errors import ImageBuildFailed
from harness.sandbox.images import builders
from harness.sandbox.images.recipes import (
    AGENT_UID,
    AGENT_USER,
    BASE_PACKAGES,
    BASE_SETUP,
    DEFAULT_PATH,
    RECIPE_SCHEMA,
    WORKSPACE,
    BaseRecipe,
    LayerRecipe,
    Recipe,
    base_recipe,
)
from harness.sandbox.images.transfer import controller_client, ensure_on_engine, same_engine

# Recipes live in harness.sandbox.images.recipes (pure data); re-exported for existing callers.
__all__ = [
    "AGENT_UID",
    "AGENT_USER",
    "BASE_PACKAGES",
    "BASE_SETUP",
    "DEFAULT_PATH",
    "RECIPE_SCHEMA",
    "WORKSPACE",
    "BaseRecipe",
    "BuiltImage",
    "LayerRecipe",
    "Recipe",
    "base_recipe",
    "build_count",
    "cache_dir_for",
    "ensure_image",
    "image_id_of",
]

BUILD_LOCK_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class BuiltImage:
    tag: str
    image_id: str  # sha256:..., immutable: pin this in manifests


def cache_dir_for(cache_dir: Path | str | None = None) -> Path:
    if cache_dir is not None:
        return Path(cache_dir)
    return cache_root() / "images"


def image_id_of(client: docker.DockerClient, ref: str) -> str | None:
    """The image ID of a local tag or ID, or None if there is no such image."""
    try:
        info = client.api.inspect_image(ref)
    except ImageNotFound:
        return None
    return str(info["Id"])


def ensure_image(
    recipe: Recipe,
    *,
    client: docker.DockerClient | None = None,
    cache_dir: Path | str | None = None,
    retag: str | None = None,
) -> BuiltImage:
    """Build ``recipe`` unless its content-hash tag already exists; return its ID.

    Raises :class:`~harness.sandbox.errors.ImageBuildFailed` (one line naming the fix)
    when the build fails, or :class:`~harness.sandbox.errors.DockerUnavailable`.
    """
    client = client or get_client()
    cache = cache_dir_for(cache_dir)
    tag = recipe.tag
    image_id = image_id_of(client, tag)
    if image_id is None and placement.active() is not None:
        image_id = _from_controller(recipe, client, cache)
    if image_id is None:
        if isinstance(recipe, LayerRecipe):
            # Outside this recipe's lock: locks are always taken child before parent.
            ensure_image(recipe.base, client=client, cache_dir=cache)
        (cache / "locks").mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(cache / "locks" / f"{recipe.content_hash()[:24]}.lock"))
        try:
            with lock.acquire(timeout=BUILD_LOCK_TIMEOUT_S):
                image_id = image_id_of(client, tag)  # built by another process meanwhile?
                if image_id is None:
                    image_id = _build(recipe, client, cache)
        except Timeout as exc:
            raise ImageBuildFailed(
                f"waited {BUILD_LOCK_TIMEOUT_S:.0f}s for another process building {tag} "
                f"(lock {lock.lock_file}); if none is running, delete the lock file"
            ) from exc
    if retag:
        repo, rtag = parse_repository_tag(retag)
        client.api.tag(image_id, repo, rtag or "latest", force=True)
    return BuiltImage(tag=tag, image_id=image_id)


def _from_controller(recipe: Recipe, client: docker.DockerClient, cache: Path) -> str | None:
    """An instance placed on another engine: build on the controller's engine, then move."""
    source = controller_client()
    if same_engine(source, client):
        source.close()
        return None  # this is the controller's engine: build here
    try:
        ensure_image(recipe, client=source, cache_dir=cache)
    finally:
        source.close()
    return ensure_on_engine(recipe.tag, client) or image_id_of(client, recipe.tag)


def _build(recipe: Recipe, client: docker.DockerClient, cache: Path) -> str:
    started = time.monotonic()
    log = cache / "logs" / f"{recipe.name.replace('/', '_')}-{recipe.content_hash()[:24]}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(recipe, BaseRecipe):
        image_id = builders.build_base(recipe, client, cache, log)
    else:
        image_id = builders.build_layer(recipe, client, log)
    append_line(
        cache / "builds.jsonl",
        json.dumps(
            {
                "ts_unix": time.time(),
                "tag": recipe.tag,
                "image_id": image_id,
                "recipe_hash": recipe.content_hash(),
                "seconds": round(time.monotonic() - started, 3),
                "pid": os.getpid(),
                "log": str(log),
            }
        ),
    )
    return image_id


def build_count(tag: str, cache_dir: Path | str | None = None) -> int:
    """How many real builds of ``tag`` ``builds.jsonl`` records (0 if none)."""
    path = cache_dir_for(cache_dir) / "builds.jsonl"
    if not path.exists():
        return 0
    count = 0
    for line in path.read_text().splitlines():
        try:
            count += json.loads(line).get("tag") == tag
        except json.JSONDecodeError:
            continue
    return count
