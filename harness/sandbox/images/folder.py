"""An image from a folder with a Dockerfile (a task's own environment), tagged by content.

The folder is the build context as it is, except that a ``FROM`` naming an image of
``from_map`` is built from its mapped image instead (a machine without a registry builds a
task's ``FROM ubuntu:24.04`` from a local image it names). The tag is
``<name>:<24 hex of the content hash>`` over the context's files and the Dockerfile as
built, so a second run reuses the image and a changed task is built again. The classic
builder never pulls; builds of one tag serialize on a lock in the image cache.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from collections.abc import Mapping
from pathlib import Path

import docker
from filelock import FileLock, Timeout

from harness.sandbox.errors import ImageBuildFailed
from harness.sandbox.images.build import BUILD_LOCK_TIMEOUT_S, cache_dir_for, image_id_of
from harness.sandbox.images.builders import classic_build

BUILD_TIMEOUT_S = 3600
MAX_CONTEXT_BYTES = 512 << 20
_FROM = re.compile(r"^(\s*FROM\s+)((?:--platform=\S+\s+)?)(\S+)(.*)$", re.IGNORECASE)


def mapped_dockerfile(text: str, from_map: Mapping[str, str]) -> str:
    """The Dockerfile with each ``FROM <image>`` of ``from_map`` naming its mapped image."""
    lines = []
    for line in text.splitlines():
        m = _FROM.match(line)
        if m and m.group(3) in from_map:
            line = f"{m.group(1)}{m.group(2)}{from_map[m.group(3)]}{m.group(4)}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def _context(folder: Path, dockerfile: str) -> tuple[bytes, str]:
    """(the context as a tar, its content hash); links are kept as links."""
    buf = io.BytesIO()
    digest = hashlib.sha256()
    total = 0
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in sorted(folder.rglob("*")):
            rel = path.relative_to(folder).as_posix()
            if rel == "Dockerfile":
                continue
            info = tar.gettarinfo(str(path), arcname=rel)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            digest.update(json.dumps([rel, info.type.decode(), info.mode, info.linkname]).encode())
            if info.isfile():
                total += info.size  # known before a byte is read (a sparse giant is not)
                if total > MAX_CONTEXT_BYTES:
                    raise ImageBuildFailed(f"the build context {folder} is over "
                                           f"{MAX_CONTEXT_BYTES >> 20} MiB; make it smaller")
                data = path.read_bytes()
                digest.update(hashlib.sha256(data).digest())
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
        data = dockerfile.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    digest.update(data)
    return buf.getvalue(), digest.hexdigest()


def ensure_folder_image(folder: Path, name: str, *, client: docker.DockerClient,
                        from_map: Mapping[str, str] | None = None,
                        timeout_s: float = BUILD_TIMEOUT_S) -> tuple[str, str]:
    """(tag, image ID) of ``folder``'s image, built unless its tag exists."""
    dockerfile_path = folder / "Dockerfile"
    if dockerfile_path.is_symlink() or not dockerfile_path.is_file():
        raise ImageBuildFailed(f"{folder}: no Dockerfile; a task's environment needs one")
    dockerfile = mapped_dockerfile(dockerfile_path.read_text(), from_map or {})
    context, digest = _context(folder, dockerfile)
    tag = f"{name}:{digest[:24]}"
    image_id = image_id_of(client, tag)
    if image_id is not None:
        return tag, image_id
    cache = cache_dir_for()
    (cache / "locks").mkdir(parents=True, exist_ok=True)
    (cache / "logs").mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(cache / "locks" / f"folder-{digest[:24]}.lock"))
    try:
        with lock.acquire(timeout=BUILD_LOCK_TIMEOUT_S):
            image_id = image_id_of(client, tag)
            if image_id is None:
                log = cache / "logs" / f"{name.replace('/', '_')}-{digest[:24]}.log"
                image_id = _build(client, context, tag, log, timeout_s)
    except Timeout as exc:
        raise ImageBuildFailed(f"waited {BUILD_LOCK_TIMEOUT_S:.0f}s for another process "
                               f"building {tag}; if none runs, delete {lock.lock_file}") from exc
    return tag, image_id


def _build(client: docker.DockerClient, context: bytes, tag: str, log: Path,
           timeout_s: float) -> str:
    error = classic_build(client, io.BytesIO(context), tag, log, int(timeout_s))
    if error is not None:
        one_line = " ".join(error.split())[:300]
        raise ImageBuildFailed(f"docker build of {tag} failed: {one_line}; fix the task's "
                               f"environment/Dockerfile (a FROM this engine lacks: map it "
                               f"to a local image); full log: {log}")
    return str(client.api.inspect_image(tag)["Id"])
