"""The host workspace of the specification's end-to-end mode.

The specification seeds a host workspace and mounts it into the cleanroom container: the
agent server (the source server on port 8770) works on the instance's workspace through its
host path, commands run in the container. Here:

1. :func:`seed`: the image's ``/workspace`` is streamed out of a created (never started)
   container of the task's image into ``<instance>/host_workspace/workspace/`` under the run
   root, without the reference program (by path, and by its bytes under any other name: the
   copy never writes them), then owned by the sandbox's agent user (uid 1000), links never
   followed. ``host_workspace/`` is the runner's, mode 0700: while the agent works there, no
   other host user reaches what it makes (a setuid file of uid 1000, say). The reference's
   own archive is kept in memory for step 3: its bytes never reach the host's disk.
2. The sandbox is created with that folder bind-mounted on ``/workspace``.
3. :func:`install_reference`: the reference goes into the sandbox's root filesystem
   (``/.harness-seed``, root's, 0700), where :func:`~benchmarks.programbench.workspace.\
prepare_cleanroom` protects it behind a setuid launcher that also lives on the root
   filesystem; ``/workspace/reference_executable`` is a link to that launcher. So the host
   folder never holds the program, nor a setuid file of this harness.
4. :func:`remove`: once the submission is collected (streamed from the sandbox, as without
   a host workspace), the folder goes: what the agent left there (setuid bits, a sparse
   terabyte, a tree deeper than any path) never stays in the run root. ``rm -rf
   --one-file-system``: no recursion limit, no link followed. A sandbox kept for a reattach
   keeps its folder (the task still works in it); ``--keep-sandboxes`` keeps it too.

The body then carries ``workspace_root`` and ``executor_ref.workspace_host_path``.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import tarfile
from collections.abc import Mapping
from pathlib import Path

import docker
from docker.errors import APIError, NotFound

from benchmarks.programbench.task_body import WORKSPACE_BACKEND_PATH as WORKSPACE
from benchmarks.programbench.workspace import REFERENCE_CANDIDATES
from harness.api import InfraError, Sandbox, extract_to

SEED_DIR = "/.harness-seed"
AGENT_UID = 1000
FOLDER = "workspace"


PRIVATE = "host_workspace"


def host_folder(instance_dir: Path) -> Path:
    return (Path(instance_dir) / PRIVATE / FOLDER).absolute()


def remove(folder: Path) -> None:
    """Remove a host workspace and its private parent (any depth, links not followed)."""
    private = Path(folder).parent
    if private.name != PRIVATE:
        raise ValueError(f"{folder} is not a host workspace")
    done = subprocess.run(["rm", "-rf", "--one-file-system", "--", str(private)],
                          capture_output=True, text=True, timeout=3600, check=False)
    if done.returncode != 0 and private.exists():
        raise InfraError(f"removing the host workspace {private} failed: "
                         f"{done.stderr.strip()[-300:]}", "workspace_remove_failed")


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    """Every entry under ``root`` (and it) to ``uid:gid``; links themselves, never followed."""
    os.chown(root, uid, gid, follow_symlinks=False)
    for top, dirs, files in os.walk(root, followlinks=False):
        for name in (*dirs, *files):
            os.chown(os.path.join(top, name), uid, gid, follow_symlinks=False)


def _reference_tar(api: docker.APIClient, container_id: str
                   ) -> tuple[bytes, dict[str, int]] | None:
    """The image's reference program as a one-member archive (memory only) and its bytes'
    sha256 -> size, or None."""
    for path in REFERENCE_CANDIDATES:
        try:
            stream, info = api.get_archive(container_id, path)
        except NotFound:
            continue
        if info.get("linkTarget"):
            continue
        data = b"".join(stream)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            members = tar.getmembers()
            if len(members) != 1 or not members[0].isfile():
                continue
            member = tar.extractfile(members[0])
            assert member is not None
            digest = hashlib.sha256(member.read()).hexdigest()
        return data, {digest: members[0].size}
    return None


def seed(client: docker.DockerClient, image: str, dest: Path,
         labels: Mapping[str, str]) -> bytes | None:
    """Seed ``dest`` from the image's workspace (step 1); the reference's archive, or None
    when the image has none (the protection then says so)."""
    private = dest.parent
    if private.exists() or private.is_symlink():  # an earlier try of this instance
        remove(dest)
    private.mkdir(parents=True, mode=0o700)
    os.chmod(private, 0o700)  # whatever the umask: other host users stay out
    api = client.api
    try:
        created = api.create_container(image, command=["true"], labels=dict(labels),
                                       host_config=api.create_host_config(network_mode="none"))
    except APIError as exc:
        raise InfraError(f"cannot create the seeding container of {image}: "
                         f"{exc.explanation or exc}", "workspace_seed_failed") from None
    try:
        dest.mkdir()
        found = _reference_tar(api, created["Id"])
        reference, hashes = found if found is not None else (None, {})
        extract_to(api, created["Id"], WORKSPACE, dest, protected=REFERENCE_CANDIDATES,
                   protected_hashes=hashes)  # a second copy in the image, by its bytes
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
    """The host folder a sandbox has on ``/workspace`` (an adopted one's too: its spec holds
    the mounts the engine reported), or None."""
    return next((Path(host) for host, inside in sandbox.spec.binds if inside == WORKSPACE),
                None)
