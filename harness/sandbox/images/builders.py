"""The two image builders behind :func:`harness.sandbox.images.build.ensure_image`.

* :func:`build_base`: ``debootstrap`` a rootfs into a folder, run the recipe's setup
  commands in a chroot, then stream ``tar`` of the folder into the daemon's image
  import (the SDK's ``import_image``, the same endpoint as ``docker import``).
* :func:`build_layer`: a classic-builder ``docker build`` from an in-memory context
  (Dockerfile ``FROM <base tag>`` + the recipe's files), never pulling.

Errors are :class:`ImageBuildFailed` with one line that names the cause, the fix and
the full log file.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING

import docker
from docker.errors import APIError, BuildError, DockerException

from harness.sandbox import labels as L
from harness.sandbox.client import long_timeout
from harness.sandbox.errors import ImageBuildFailed

if TYPE_CHECKING:
    from harness.sandbox.images.recipes import BaseRecipe, LayerRecipe

BUILD_TIMEOUT_S = 3600
_CHUNK = 1 << 20


def _last_line(log: Path) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    errors = [ln for ln in lines if ln.startswith(("E:", "W: Failure", "ERROR", "error"))]
    return (errors or lines or [""])[-1][:300]


def _run(argv: list[str], log: Path, what: str, fix: str) -> None:
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "LC_ALL": "C",
        "DEBIAN_FRONTEND": "noninteractive",
        "HOME": "/root",
    }
    with log.open("ab") as fh:
        fh.write(f"\n$ {' '.join(argv)}\n".encode())
        fh.flush()
        proc = subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, check=False)
    if proc.returncode != 0:
        raise ImageBuildFailed(
            f"{what} failed (exit {proc.returncode}): {_last_line(log)}; {fix}; full log: {log}"
        )


def build_base(recipe: BaseRecipe, client: docker.DockerClient, cache: Path, log: Path) -> str:
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise ImageBuildFailed(
            f"cannot build {recipe.tag}: debootstrap is not installed; "
            "fix: `apt-get install -y debootstrap`"
        )
    if os.geteuid() != 0:
        raise ImageBuildFailed(
            f"cannot build {recipe.tag}: debootstrap needs root; build it once as root "
            "(the image is then cached by its tag)"
        )
    log.write_bytes(b"")
    work_root = cache / "work"
    work_root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{recipe.content_hash()[:12]}-", dir=work_root))
    rootfs = work / "rootfs"
    try:
        argv = [debootstrap, f"--variant={recipe.variant}"]
        if recipe.include:
            argv.append(f"--include={','.join(recipe.include)}")
        argv += [recipe.suite, str(rootfs), recipe.mirror]
        _run(
            argv,
            log,
            f"debootstrap {recipe.suite} for {recipe.tag}",
            "check the mirror is reachable and the package names in the recipe's include list",
        )
        for command in recipe.setup:
            _run(
                ["chroot", str(rootfs), "/bin/sh", "-ec", command],
                log,
                f"setup command {command!r} of {recipe.tag}",
                "fix the recipe's setup commands",
            )
        _scrub(rootfs)
        return _import(recipe, client, rootfs, log)
    finally:
        _safe_rmtree(work)


def _scrub(rootfs: Path) -> None:
    """Drop apt indexes and caches: layers run ``apt-get update`` themselves."""
    for pattern in ("var/lib/apt/lists/*", "var/cache/apt/*.bin", "var/cache/apt/archives/*.deb"):
        for path in rootfs.glob(pattern):
            if path.is_file() and not path.is_symlink():
                path.unlink()


def _tar_chunks(stream: IO[bytes]) -> Iterator[bytes]:
    while chunk := stream.read(_CHUNK):
        yield chunk


def _imported_id(output: object) -> str | None:
    """The image ID from the import endpoint's JSON lines (``{"status": "sha256:..."}``)."""
    for line in reversed(str(output).splitlines()):
        try:
            status = json.loads(line).get("status", "")
        except (json.JSONDecodeError, AttributeError):
            continue
        if isinstance(status, str) and status.startswith("sha256:"):
            return status
    return None


def _import(recipe: BaseRecipe, client: docker.DockerClient, rootfs: Path, log: Path) -> str:
    """Stream the rootfs into the daemon; tag it only once tar has succeeded.

    The tag is the "done" marker, so a half-imported image must never carry it.
    """
    changes = [f"ENV {k}={v}" for k, v in recipe.env]
    changes += [f"LABEL {L.RECIPE}={recipe.content_hash()}", 'CMD ["/bin/bash"]']
    repo, tag = recipe.tag.rsplit(":", 1)
    # GNU tar (not the docker CLI) makes the stream: it keeps owners, devices and xattrs.
    argv = ["tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "-C", str(rootfs)]
    with log.open("ab") as log_fh:
        tar = subprocess.Popen([*argv, "-cf", "-", "."], stdout=subprocess.PIPE, stderr=log_fh)
        assert tar.stdout is not None
        try:
            with long_timeout(client, BUILD_TIMEOUT_S) as api:
                output = api.import_image(
                    src=_tar_chunks(tar.stdout), changes=changes, stream_src=True
                )
        except (APIError, DockerException, OSError) as exc:
            tar.kill()
            raise ImageBuildFailed(f"docker import of {recipe.tag} failed: {exc}") from exc
        finally:
            tar.stdout.close()
            tar_status = tar.wait()
        log_fh.write(f"\n$ docker import (SDK) -> {output}\n".encode())
    image_id = _imported_id(output)
    if tar_status != 0 or image_id is None:
        if image_id is not None:
            with contextlib.suppress(DockerException):
                client.api.remove_image(image_id, force=True)
        what = f"tar exited {tar_status}" if tar_status else str(output).strip()[:300]
        raise ImageBuildFailed(f"docker import of {recipe.tag} failed: {what}; full log: {log}")
    client.api.tag(image_id, repo, tag)
    return image_id


def _context_tar(dockerfile: str, files: dict[str, bytes]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in {**files, "Dockerfile": dockerfile.encode()}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def classic_build(client: docker.DockerClient, context: IO[bytes], tag: str, log: Path,
                  timeout_s: int, head: str = "") -> str | None:
    """A classic-builder ``docker build`` of ``context`` (a tar) as ``tag``, never pulling,
    its output in ``log``; None, or the build's error."""
    error: str | None = None
    with long_timeout(client, timeout_s) as api, log.open("w") as fh:
        fh.write(head)
        try:
            for event in api.build(fileobj=context, custom_context=True, tag=tag, rm=True,
                                   forcerm=True, pull=False, decode=True, timeout=timeout_s):
                if "stream" in event:
                    fh.write(str(event["stream"]))
                if "error" in event:
                    error = str(event.get("error", "")).strip()
                    fh.write(json.dumps(event) + "\n")
        except (BuildError, APIError, DockerException) as exc:
            error = str(exc)
    return error


def build_layer(recipe: LayerRecipe, client: docker.DockerClient, log: Path) -> str:
    if "Dockerfile" in recipe.files:
        raise ImageBuildFailed(f"recipe {recipe.name}: 'Dockerfile' is reserved in files")
    dockerfile = (
        f"FROM {recipe.base.tag}\n{recipe.dockerfile_body.rstrip()}\n"
        f"LABEL {L.RECIPE}={recipe.content_hash()}\n"
    )
    context = _context_tar(dockerfile, dict(recipe.files))
    error = classic_build(client, context, recipe.tag, log, BUILD_TIMEOUT_S,
                          head=dockerfile + "\n---\n")
    if error is not None:
        one_line = " ".join(error.split())[:300]
        raise ImageBuildFailed(
            f"docker build of {recipe.tag} failed: {one_line}; "
            f"fix the dockerfile_body of recipe {recipe.name!r}; full log: {log}"
        )
    return str(client.api.inspect_image(recipe.tag)["Id"])


def _mounts_below(path: Path) -> list[str]:
    root = str(path.resolve())
    found = []
    with open("/proc/self/mounts") as fh:
        for line in fh:
            point = line.split()[1].encode().decode("unicode_escape")
            if point == root or point.startswith(root + "/"):
                found.append(point)
    return sorted(found, key=len, reverse=True)


def _safe_rmtree(path: Path) -> None:
    """Remove a build folder, first unmounting anything debootstrap left mounted in it.

    Deleting through a left-over bind mount of /dev or /proc must never happen: if a
    mount cannot be removed, the folder is left in place.
    """
    for point in _mounts_below(path):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)
    if _mounts_below(path):
        return
    shutil.rmtree(path, ignore_errors=True)
