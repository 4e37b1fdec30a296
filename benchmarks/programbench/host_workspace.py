"""The host workspace of the specification's end-to-end mode.

The specification seeds a host workspace and mounts it into the cleanroom container: the
agent server (the source server on port 8770) works on the instance's workspace through its
host path, commands run in the container. Here:

1. :func:`seed`: the image's ``/workspace`` is streamed out of a created (never started)
   container of the task's image into ``<instance>/workspace/`` under the run root, without
   the reference program (by path: the copy never writes it), then owned by the sandbox's
   agent user (uid 1000), links never followed. The reference's own archive is kept in
   memory for step 3: its bytes never reach the host's disk.
2. The sandbox is created with that folder bind-mounted on ``/workspace``.
3. :func:`install_reference`: the reference goes into the sandbox's root filesystem
   (``/.harness-seed``, root's, 0700), where :func:`~benchmarks.programbench.workspace.\
prepare_cleanroom` protects it behind a setuid launcher that also lives on the root
   filesystem; ``/workspace/reference_executable`` is a symlink to that launcher. So the host
   folder never holds the program, nor a setuid file of this harness.
4. :func:`scrub`: when the agent is done, setuid and setgid bits the agent set on its own
   files in the folder are cleared (the folder is on the host).

The body then carries ``workspace_root`` and ``executor_ref.workspace_host_path``.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import tarfile
from collections.abc import Mapping
from pathlib import Path

import docker
from docker.errors import APIError, NotFound

from harness.core.errors import InfraError
from harness.sandbox.container import Sandbox
from harness.sandbox.transfer import extract_to

WORKSPACE = "/workspace"
SEED_DIR = "/.harness-seed"
REFERENCE_IN_IMAGE = (f"{WORKSPACE}/executable", f"{WORKSPACE}/reference_executable")
AGENT_UID = 1000
FOLDER = "workspace"


def host_folder(instance_dir: Path) -> Path:
    return (Path(instance_dir) / FOLDER).absolute()


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    """Every entry under ``root`` (and it) to ``uid:gid``; links themselves, never followed."""
    os.chown(root, uid, gid, follow_symlinks=False)
    for top, dirs, files in os.walk(root, followlinks=False):
        for name in (*dirs, *files):
            os.chown(os.path.join(top, name), uid, gid, follow_symlinks=False)


def _reference_tar(api: docker.APIClient, container_id: str) -> bytes | None:
    """The image's reference program as a one-member archive (memory only), or None."""
    for path in REFERENCE_IN_IMAGE:
        try:
            stream, info = api.get_archive(container_id, path)
        except NotFound:
            continue
        if info.get("linkTarget"):
            continue
        data = b"".join(stream)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            members = tar.getmembers()
        if len(members) == 1 and members[0].isfile():
            return data
    return None


def seed(client: docker.DockerClient, image: str, dest: Path,
         labels: Mapping[str, str]) -> bytes | None:
    """Seed ``dest`` from the image's workspace (step 1); the reference's archive, or None
    when the image has none (the protection then says so)."""
    if dest.exists() or dest.is_symlink():  # an earlier try of this instance
        shutil.rmtree(dest)  # rmtree never follows the agent's links
    api = client.api
    try:
        created = api.create_container(image, command=["true"], labels=dict(labels),
                                       host_config=api.create_host_config(network_mode="none"))
    except APIError as exc:
        raise InfraError(f"cannot create the seeding container of {image}: "
                         f"{exc.explanation or exc}", "workspace_seed_failed") from None
    try:
        dest.mkdir(parents=True)
        extract_to(api, created["Id"], WORKSPACE, dest, protected=REFERENCE_IN_IMAGE)
        reference = _reference_tar(api, created["Id"])
    except (APIError, OSError) as exc:
        raise InfraError(f"seeding the host workspace {dest} failed: {exc}",
                         "workspace_seed_failed") from None
    finally:
        api.remove_container(created["Id"], force=True)
    _chown_tree(dest, AGENT_UID, AGENT_UID)
    os.chmod(dest, 0o755)
    return reference


def install_reference(sandbox: Sandbox, reference: bytes | None) -> None:
    """Step 3: the reference into the sandbox's root filesystem (root's, 0700 folder)."""
    if reference is None:
        return
    sandbox.exec(["sh", "-c", f"mkdir -p {SEED_DIR} && chmod 0700 {SEED_DIR}"], user="root",
                 timeout=60, workdir="/")
    sandbox.put_archive(SEED_DIR, reference)


def bind_source(sandbox: Sandbox) -> Path | None:
    """The host folder a sandbox has on ``/workspace`` (an adopted one's too), or None."""
    info = sandbox.api.inspect_container(sandbox.id)
    for mount in info.get("Mounts") or []:
        if mount.get("Type") == "bind" and mount.get("Destination") == WORKSPACE:
            return Path(mount["Source"])
    return None


def scrub(root: Path) -> list[str]:
    """Step 4: clear the setuid and setgid bits of regular files under ``root`` (links and
    other kinds untouched, never followed); the relative paths changed."""
    changed = []
    for top, _dirs, files in os.walk(root, followlinks=False):
        for name in files:
            path = os.path.join(top, name)
            try:
                st = os.lstat(path)
                if not stat.S_ISREG(st.st_mode) or not st.st_mode & (stat.S_ISUID | stat.S_ISGID):
                    continue
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                now = os.fstat(fd)
                if stat.S_ISREG(now.st_mode) and (now.st_ino, now.st_dev) == (st.st_ino, st.st_dev):
                    os.fchmod(fd, stat.S_IMODE(now.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))
                    changed.append(os.path.relpath(path, root))
            finally:
                os.close(fd)
    return changed
