"""One sandbox: a labelled, limited, no-network container whose main process is ``sleep``.

::

    spec = SandboxSpec(image=built.image_id, run_id=..., instance_id=..., run_root=...,
                       user="agent", cap_drop=("SYS_PTRACE",))
    with Sandbox.create(spec) as sb:
        sb.copy_in(Path("seed"), "/workspace", uid=1000, gid=1000)
        sb.make_dirs([NewDir("/workspace/logs", uid=1000, gid=1000)])  # through the daemon
        sb.put_archive("/workspace", pack_tree([(Path("lib"), "lib")], exclude_names={".git"}))
        sb.install_protected(Path("ref-binary"), "/workspace/executable")  # a launcher
        result = sb.exec(["pytest", "-q"], timeout=600)
        sb.export_tar_gz("/workspace", out / "submission.tar.gz")
    # removed, and verified gone by listing

The container runs ``sleep <ttl_s>`` (under Docker's init, which reaps orphans of killed
commands) as root with ``auto_remove``: an orphaned sandbox stops and disappears by
itself when the TTL expires. ``spec.user`` is the default user of :meth:`Sandbox.exec`;
administrative steps (protected installs, directory creation) run as root.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO

import docker
from docker.errors import APIError, ImageNotFound, NotFound

from harness.sandbox import labels as L
from harness.sandbox import pack, transfer
from harness.sandbox.client import get_client
from harness.sandbox.errors import (
    CleanupFailed,
    ContainerStartFailed,
    CopyFailed,
    ImageMissing,
    ProtectedInstallFailed,
)
from harness.sandbox.execution import (
    MAX_OUTPUT_BYTES,
    ContainerExit,
    ExecResult,
    container_exit,
    kill_user_processes,
    run_exec,
    run_stages,
)
from harness.sandbox.protected import (
    ProtectedExecutable,
    ProtectPlan,
    install_protected,
    plan_protection,
    protect_executable,
    protection_result,
)

_REMOVE_WAIT_S = 30.0


@dataclass(frozen=True)
class SandboxSpec:
    image: str  # a local tag or, better, the pinned image ID (sha256:...)
    run_id: str
    instance_id: str
    run_root: Path
    worker: str = "main"
    ttl_s: int = 3600  # task timeout + margin: the container's life if nobody removes it
    network: str = "none"  # or the name of an internal network (create_internal_network)
    cpus: float | None = 1.0  # capped at the host's CPU count
    memory: str | int | None = "2g"  # swap is disabled: memswap = memory
    pids_limit: int | None = 1024
    cap_drop: tuple[str, ...] = ()
    cap_add: tuple[str, ...] = ()
    user: str = "root"  # default exec user, e.g. "agent"
    workdir: str | None = "/workspace"
    env: Mapping[str, str] = field(default_factory=dict, hash=False)
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    init: bool = True
    no_new_privileges: bool = False  # True disables a protected executable's launcher
    shm_size: str | None = None
    # The container's own user (main process, and ``docker exec`` without ``-u``, e.g. a
    # gateway's process tools); "0" keeps root. Sandbox.exec always passes a user.
    container_user: str = "0"
    ulimits: tuple[tuple[str, int, int], ...] = ()  # (name, soft, hard), e.g. ("core", 0, 0)
    runtime: str | None = None  # OCI runtime registered with dockerd, e.g. "runsc" (gVisor)
    # Host folders bind-mounted read-write: (host path, container path), e.g. a host
    # workspace an agent server works on through its host path.
    binds: tuple[tuple[str, str], ...] = ()


class Sandbox:
    """A running container created by :meth:`create`; remove it with :meth:`remove`."""

    def __init__(
        self, client: docker.DockerClient, container_id: str, name: str, spec: SandboxSpec
    ) -> None:
        self.client = client
        self.api: docker.APIClient = client.api
        self.id = container_id
        self.name = name
        self.spec = spec
        self.protected: set[str] = set()
        # sha256 hex -> size in bytes of every protected artifact, hashed inside the sandbox
        # as root: copy-out drops any file with these bytes, whatever its name or place.
        self.protected_hashes: dict[str, int] = {}
        self.protected_records: list[ProtectedExecutable] = []  # what was installed, in order
        self.copy_limits = transfer.CopyLimits()  # caps of every copy out of this sandbox
        self.removed = False

    # -- lifecycle ---------------------------------------------------------------
    @classmethod
    def create(cls, spec: SandboxSpec, client: docker.DockerClient | None = None) -> Sandbox:
        client = client or get_client()
        api = client.api
        name = L.resource_name("harness", spec.run_id, spec.instance_id)
        labels = {  # the run labels come last: spec.labels cannot override them
            **spec.labels,
            L.TTL: str(spec.ttl_s),
            **L.run_labels(spec.run_id, spec.instance_id, spec.worker, spec.run_root),
        }
        host_config = api.create_host_config(
            network_mode=spec.network,
            nano_cpus=_nano_cpus(spec.cpus),
            mem_limit=spec.memory,
            memswap_limit=spec.memory,
            pids_limit=spec.pids_limit,
            cap_drop=list(spec.cap_drop) or None,
            cap_add=list(spec.cap_add) or None,
            init=spec.init,
            auto_remove=True,
            security_opt=["no-new-privileges"] if spec.no_new_privileges else None,
            shm_size=spec.shm_size,
            ulimits=[
                docker.types.Ulimit(name=n, soft=soft, hard=hard) for n, soft, hard in spec.ulimits
            ]
            or None,
            runtime=spec.runtime,
            binds={host: {"bind": inside, "mode": "rw"} for host, inside in spec.binds} or None,
        )
        try:
            created = api.create_container(
                spec.image,
                command=["sleep", str(int(spec.ttl_s))],
                name=name,
                labels=labels,
                host_config=host_config,
                working_dir=spec.workdir,
                environment=dict(spec.env) or None,
                user=spec.container_user,
                detach=True,
            )
        except ImageNotFound as exc:
            raise ImageMissing(
                f"image {spec.image} is not on this machine and cannot be pulled: "
                "build it with harness.sandbox.images.build.ensure_image(...)"
            ) from exc
        except APIError as exc:
            raise ContainerStartFailed(
                f"creating sandbox {name} failed: {exc.explanation or exc}"
            ) from exc
        sandbox = cls(client, created["Id"], name, spec)
        try:
            api.start(sandbox.id)
        except APIError as exc:
            sandbox.remove(verify=False, missing_ok=True)
            raise ContainerStartFailed(
                f"starting sandbox {name} failed: {exc.explanation or exc}"
            ) from exc
        return sandbox

    def remove(self, *, verify: bool = True, missing_ok: bool = True) -> None:
        """Force-remove the container (and its anonymous volumes), then list to prove it."""
        try:
            self.api.remove_container(self.id, force=True, v=True)
        except NotFound:
            if not missing_ok:
                raise
        except APIError as exc:
            # 409 "removal already in progress": auto_remove won the race; verify below.
            if exc.status_code != 409:
                raise CleanupFailed(f"removing sandbox {self.name} failed: {exc}") from exc
        self.removed = True
        if verify:
            self.wait_gone()

    def wait_gone(self, timeout: float = _REMOVE_WAIT_S) -> None:
        deadline = time.monotonic() + timeout
        while self.api.containers(all=True, filters={"id": self.id}, quiet=True):
            if time.monotonic() > deadline:
                raise CleanupFailed(
                    f"sandbox {self.name} is still listed {timeout:.0f}s after removal"
                )
            time.sleep(0.05)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.remove()

    def is_running(self) -> bool:
        try:
            return bool(self.api.inspect_container(self.id)["State"]["Running"])
        except NotFound:
            return False

    # -- the sandbox contract (harness.sandbox.protocol) ---------------------------
    @property
    def user(self) -> str:
        """The default user of :meth:`exec` (``spec.user``)."""
        return self.spec.user

    @property
    def workdir(self) -> str | None:
        """The default directory of :meth:`exec` (``spec.workdir``)."""
        return self.spec.workdir

    def exit_state(self, since: float) -> ContainerExit | None:
        """Running, or how the container ended since ``since`` (epoch s): from inside, or
        killed from outside; None once the harness removed it (:meth:`remove`)."""
        if self.removed:
            return None
        return container_exit(self.api, self.id, since)

    def end_user_processes(self, user: str) -> str:
        """Kill every process of ``user`` (refuses root, ValueError); the survivors."""
        return kill_user_processes(self.api, self.id, user)

    # -- commands ----------------------------------------------------------------
    def exec(
        self,
        cmd: str | Sequence[str],
        *,
        user: str | None = None,
        timeout: float | None = None,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        shell: Sequence[str] = ("/bin/sh", "-c"),
        max_output: int = MAX_OUTPUT_BYTES,
        tail_output: int = 0,
    ) -> ExecResult:
        """Run ``cmd`` (argv list, or a string for ``shell``) and wait for it.

        On ``timeout`` the command's whole process tree is killed and the result has
        ``timed_out=True``; the sandbox stays usable. Secrets go in ``env`` or ``stdin``,
        never in ``cmd``.
        """
        return run_exec(
            self.api,
            self.id,
            cmd,
            user=user or self.spec.user,
            timeout=timeout,
            stdin=stdin,
            env=env,
            workdir=workdir or self.spec.workdir,
            shell=shell,
            max_output=max_output,
            tail_output=tail_output,
        )

    def exec_stages(
        self, stages: Sequence[Sequence[str]], *, user: str, timeout: float | None = None
    ) -> list[ExecResult]:
        """Run argvs one after the other in one exec, up to the first that fails; one
        result per stage (see :func:`~harness.sandbox.execution.run_stages`)."""
        return run_stages(self.api, self.id, stages, user=user, timeout=timeout,
                          workdir=self.spec.workdir)

    # -- files -------------------------------------------------------------------
    def _make_owned_dir(self, path: str, uid: int | None, gid: int | None) -> None:
        """Create ``path`` owned by uid:gid unless it exists (Docker would make it root's)."""
        script = '[ -d "$1" ] || { mkdir -p "$1" && chown "$2" "$1"; }'
        owner = f"{uid if uid is not None else 0}:{gid if gid is not None else 0}"
        res = self.exec(["/bin/sh", "-c", script, "sh", path, owner], user="root", timeout=60)
        if not res.ok:
            err = res.stderr.decode(errors="replace").strip()
            raise CopyFailed(f"cannot create {path} in {self.name}: {err}")

    def copy_in(
        self, src: Path, dest_dir: str, *, uid: int | None = None, gid: int | None = None
    ) -> None:
        """Copy a host file, or a directory's contents, into ``dest_dir`` (created if missing).

        Modes, symlinks (also ones pointing outside the tree) and empty directories are
        kept; ``uid``/``gid`` override the owners (and own ``dest_dir`` if it is created).
        """
        if uid is not None or gid is not None:
            self._make_owned_dir(dest_dir, uid, gid)
        with pack.pack_path(Path(src), dest_dir, uid=uid, gid=gid) as data:
            pack.put_archive(self.api, self.id, dest_dir, data)

    def write_file(
        self, path: str, data: bytes, *, mode: int = 0o644, uid: int = 0, gid: int = 0
    ) -> None:
        """Write ``data`` to absolute ``path`` (missing parents are created, root 0755)."""
        archive = pack.pack_bytes(path, data, mode=mode, uid=uid, gid=gid)
        pack.put_archive(self.api, self.id, path, archive)

    def write_files(self, files: Sequence[pack.NewFile]) -> None:
        """:meth:`write_file` for several files in one copy (one tar, the same entries)."""
        where = ", ".join(f.path for f in files)
        pack.put_archive(self.api, self.id, where, pack.pack_files(files))

    def put_archive(self, dest_dir: str, data: bytes | IO[bytes]) -> None:
        """Unpack the tar ``data`` (names relative to ``dest_dir``, e.g. from
        :func:`~harness.sandbox.pack.pack_tree`) into the existing directory ``dest_dir``.

        The daemon applies the headers' owners and modes: no capability inside the
        container is needed. Only for trusted tars (the harness's, a benchmark checkout's).
        """
        pack.put_archive(self.api, self.id, dest_dir, data, at=dest_dir)

    def make_dirs(self, dirs: Iterable[pack.NewDir]) -> None:
        """Create absolute directories with the owners and modes given (an existing one is
        re-owned), through the daemon: also in a container without ``CAP_CHOWN``."""
        dirs = list(dirs)
        where = ", ".join(d.path for d in dirs)
        pack.put_archive(self.api, self.id, where, pack.pack_dirs(dirs))

    def copy_out(
        self, src: str, dest: Path, *, exclude: transfer.Exclude | None = None
    ) -> list[str]:
        """Extract directory ``src``'s contents into host directory ``dest``, bounded.

        Protected artifacts (by path and by content) are never copied out; links are
        written as links and never followed; over :attr:`copy_limits` raises
        :class:`~harness.sandbox.transfer.CopyRefused` (an agent failure, not infra).
        """
        return transfer.extract_to(
            self.api, self.id, src, Path(dest), exclude=exclude, protected=self.protected,
            protected_hashes=self.protected_hashes, limits=self.copy_limits,
        )

    def export_tar_gz(
        self, src: str, dest_file: Path, *, exclude: transfer.Exclude | None = None
    ) -> list[str]:
        """Write directory ``src`` as a ``.tar.gz`` on the host, entries relative to ``src``.

        ``exclude(relative_path)`` drops an entry (and, for a directory, all below it).
        Protected artifacts are always left out; :attr:`copy_limits` apply.
        """
        return transfer.export_tar_gz(
            self.api, self.id, src, Path(dest_file), exclude=exclude, protected=self.protected,
            protected_hashes=self.protected_hashes, limits=self.copy_limits,
        )

    def stream_out(
        self, src: str, budget: transfer.Budget, *, spool_dir: Path | None = None
    ) -> AbstractContextManager[Iterator[transfer.Member]]:
        """``with sandbox.stream_out(src, budget) as members:`` the archive of ``src`` as
        :class:`~harness.sandbox.transfer.Member` records, protected artifacts already
        reduced to data-less ``protected`` members (see :func:`transfer.open_members`)."""
        return transfer.open_members(
            self.api, self.id, src, budget, protected=self.protected,
            protected_hashes=self.protected_hashes, spool_dir=spool_dir,
        )

    def install_protected(self, binary: Path | bytes, dest: str) -> ProtectedExecutable:
        """Install an executable the agent can run at ``dest`` but not read (a launcher).

        See :mod:`harness.sandbox.protected`; needs ``no_new_privileges`` off.
        """
        data = binary if isinstance(binary, bytes) else Path(binary).read_bytes()
        self._check_protectable(dest)
        return self._record(install_protected(self.api, self.id, data, dest))

    def protect_executable(self, candidates: Sequence[str], launcher: str) -> ProtectedExecutable:
        """Move the first existing of ``candidates`` out of reach; a launcher at ``launcher``."""
        self._check_protectable(launcher)
        return self._record(protect_executable(self.api, self.id, list(candidates), launcher))

    def plan_protection(self, candidates: Sequence[str], launcher: str) -> ProtectPlan:
        """:meth:`protect_executable` in two steps, to run its command among others (e.g.
        with :meth:`exec_stages`): this one copies its helpers in; then
        :meth:`finish_protection` with the command's result."""
        self._check_protectable(launcher)
        return plan_protection(self.api, self.id, list(candidates), launcher)

    def finish_protection(self, plan: ProtectPlan, result: ExecResult) -> ProtectedExecutable:
        """Check and record what the command of :meth:`plan_protection` did."""
        return self._record(protection_result(plan, result))

    def _check_protectable(self, dest: str) -> None:
        if self.spec.no_new_privileges:
            raise ProtectedInstallFailed(
                f"{dest}: a protected executable needs a sandbox without no_new_privileges "
                "(it disables the setuid launcher)"
            )

    def _record(self, prot: ProtectedExecutable) -> ProtectedExecutable:
        self.protected_records.append(prot)
        self.protected.add(prot.launcher)
        self.protected_hashes[prot.sha256] = prot.size
        self.protected_hashes[prot.launcher_sha256] = prot.launcher_size
        return prot


def _nano_cpus(cpus: float | None) -> int | None:
    if cpus is None:
        return None
    return int(min(cpus, float(os.cpu_count() or 1)) * 1e9)
