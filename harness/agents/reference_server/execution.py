"""Where the reference server runs a plan's steps: local subprocesses or ``docker exec``.

``local`` runs ``bash -c`` in the workspace with a minimal environment (never the server's
own, so none of its secrets reach a step). ``docker_exec`` runs in the named container
through the Docker API as an unprivileged user (``executor_ref.user``, else the server's
``docker_user``, ``agent`` by default; root is refused), with the harness's exec
(:func:`harness.sandbox.execution.run_exec`): a timeout or cancel kills the step's tree.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Collection
from pathlib import Path, PurePosixPath
from typing import Protocol

from pydantic import BaseModel

from harness.agents.gateway.models import is_root_user
from harness.agents.reference_server.config import WriteFile
from harness.agents.reference_server.host_files import MAX_READ_BYTES, HostFileRefused, HostFiles
from harness.sandbox.execution import ExecResult, run_exec

OUTPUT_TAIL = 2000  # characters of a step's output reported in the task's steps
OUTPUT_TAIL_BYTES = 8 * OUTPUT_TAIL  # bytes of it kept in memory while the step runs
_POLL_S = 0.05


class ExecutorUnavailable(Exception):
    """The executor named by ``executor_ref`` cannot be used (container gone, no Docker)."""


class StepRun(BaseModel):
    exit_code: int | None
    output_tail: str = ""
    timed_out: bool = False
    cancelled: bool = False
    duration_s: float = 0.0


class StepExecutor(Protocol):
    def run(
        self, command: str, *, timeout_s: float, env: dict[str, str], stop: threading.Event
    ) -> StepRun: ...

    def write(self, item: WriteFile) -> None: ...

    def read(self, rel: str) -> bytes: ...

    def close(self) -> None: ...


def _tail(data: bytes) -> str:
    return data[-OUTPUT_TAIL:].decode("utf-8", "replace")


class LocalExecutor:
    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        workspace.mkdir(parents=True, exist_ok=True)

    def run(
        self, command: str, *, timeout_s: float, env: dict[str, str], stop: threading.Event
    ) -> StepRun:
        full_env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "HOME": str(self.workspace),
            **env,
        }
        started = time.monotonic()
        proc = subprocess.Popen(
            ["bash", "-c", command],
            cwd=self.workspace,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        timed_out = cancelled = False
        chunks: list[bytes] = []
        while True:
            try:
                out, _ = proc.communicate(timeout=_POLL_S)
                chunks.append(out or b"")
                break
            except subprocess.TimeoutExpired:
                if stop.is_set():
                    cancelled = True
                elif time.monotonic() - started > timeout_s:
                    timed_out = True
                else:
                    continue
                _kill_group(proc)
        return StepRun(
            exit_code=proc.returncode,
            output_tail=_tail(b"".join(chunks)),
            timed_out=timed_out,
            cancelled=cancelled,
            duration_s=time.monotonic() - started,
        )

    def write(self, item: WriteFile) -> None:
        HostFiles(self.workspace.absolute()).write(item.path, item.content.encode(), item.mode)

    def read(self, rel: str) -> bytes:
        return HostFiles(self.workspace.absolute()).read(rel)

    def close(self) -> None:
        pass


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    for sig, grace in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


class DockerExecExecutor:
    """Steps as ``docker exec -u <user>`` in the named container: never root.

    Through :func:`harness.sandbox.execution.run_exec`: a timeout or a cancel kills the
    step's whole tree without trusting any file the step could write, and only the last
    bytes of its output are kept in memory. Plan files are written by the same user.
    """

    def __init__(self, container_name: str, workdir: str | None, user: str) -> None:
        if is_root_user(user):
            raise ExecutorUnavailable("docker_exec steps may not run as root")
        try:
            from docker.errors import DockerException, NotFound

            from harness.sandbox.client import get_client
            from harness.sandbox.errors import DockerUnavailable
        except ImportError as exc:  # pragma: no cover - docker is a dependency
            raise ExecutorUnavailable("the docker SDK is not installed") from exc
        try:
            self._client = get_client()
            self._container = self._client.containers.get(container_name)
        except NotFound as exc:
            raise ExecutorUnavailable(f"container {container_name!r} not found") from exc
        except (DockerUnavailable, DockerException) as exc:
            cause = exc.__cause__ if isinstance(exc, DockerUnavailable) else exc
            raise ExecutorUnavailable(f"docker unavailable: {type(cause).__name__}") from exc
        if self._container.status != "running":
            raise ExecutorUnavailable(
                f"container {container_name!r} is {self._container.status}, not running"
            )
        self.workdir = workdir
        self.user = user

    def _exec(
        self,
        argv: list[str],
        *,
        timeout_s: float | None,
        env: dict[str, str] | None = None,
        stdin: bytes | None = None,
        stop: threading.Event | None = None,
    ) -> ExecResult:
        from harness.sandbox.errors import SandboxError

        try:
            return run_exec(
                self._client.api,
                self._container.id,
                argv,
                user=self.user,
                timeout=timeout_s,
                env=env,
                stdin=stdin,
                workdir=self.workdir,
                max_output=0,
                tail_output=OUTPUT_TAIL_BYTES,
                stop=stop,
            )
        except SandboxError as exc:
            raise ExecutorUnavailable(f"docker exec failed: {exc}") from exc

    def run(
        self, command: str, *, timeout_s: float, env: dict[str, str], stop: threading.Event
    ) -> StepRun:
        started = time.monotonic()
        res = self._exec(["bash", "-c", command], timeout_s=timeout_s, env=env, stop=stop)
        return StepRun(
            exit_code=res.exit_code,
            output_tail=_tail(res.stdout + res.stderr),
            timed_out=res.timed_out,
            cancelled=res.stopped,
            duration_s=time.monotonic() - started,
        )

    def write(self, item: WriteFile) -> None:
        path = str(PurePosixPath(self.workdir or "/") / item.path)
        script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1" && chmod "$2" "$1"'
        res = self._exec(
            ["/bin/sh", "-c", script, "sh", path, f"{item.mode:o}"],
            timeout_s=60,
            stdin=item.content.encode("utf-8"),
        )
        if res.exit_code != 0:
            raise ExecutorUnavailable(
                f"could not write {item.path!r} as {self.user}: {_tail(res.stderr)[-200:]}"
            )

    def read(self, rel: str) -> bytes:
        path = str(PurePosixPath(self.workdir or "/") / rel)
        res = self._exec(["head", "-c", str(MAX_READ_BYTES), "--", path], timeout_s=60)
        if res.exit_code != 0:
            raise HostFileRefused(f"could not read {rel!r} as {self.user}: "
                                  f"{_tail(res.stderr)[-200:]}", "io_error")
        return res.stdout

    def close(self) -> None:
        self._client.close()


class HostWorkspaceExecutor(DockerExecExecutor):
    """The specification's end-to-end mode: commands in the container (``docker exec`` as
    its unprivileged user), files through the workspace's host path
    (:class:`~harness.agents.reference_server.host_files.HostFiles`), which the container
    mounts on ``workspace_backend_path``."""

    def __init__(self, container_name: str, workdir: str | None, user: str,
                 host_path: str, denied: Collection[str]) -> None:
        super().__init__(container_name, workdir, user)
        root = Path(host_path)
        if not root.is_absolute() or not root.is_dir() or root.is_symlink():
            raise ExecutorUnavailable(f"workspace_host_path {host_path!r} is not a folder")
        self.files = HostFiles(root, denied)

    def write(self, item: WriteFile) -> None:
        self.files.write(item.path, item.content.encode(), item.mode)

    def read(self, rel: str) -> bytes:
        return self.files.read(rel)
