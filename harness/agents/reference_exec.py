"""Where the reference server runs a plan's steps: local subprocesses or ``docker exec``.

``local`` runs ``bash -c`` in the workspace with a minimal environment (never the server's
own, so none of its secrets reach a step). ``docker_exec`` runs in the named container
through the Docker API (``exec_create``/``exec_start``), under coreutils ``timeout``;
a cancel sends TERM to the step's process from a second exec.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from pydantic import BaseModel

from harness.agents.reference_config import WriteFile

OUTPUT_TAIL = 2000
STEP_READ_TIMEOUT_S = 7 * 3600
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
        target = (self.workspace / item.path).resolve()
        if self.workspace.resolve() not in target.parents:
            raise ValueError(f"plan file {item.path!r} escapes the workspace")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(item.content, encoding="utf-8")
        target.chmod(item.mode)

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


# Records its pid, then execs the step under `timeout` (args: pidfile, timeout, command).
_DOCKER_WRAPPER = (
    'echo $$ > "$1"; __t=$2; __c=$3; '
    'if [ "$__t" != 0 ] && command -v timeout >/dev/null 2>&1; then '
    'exec timeout -k 5 "$__t" bash -c "$__c"; fi; exec bash -c "$__c"'
)


class DockerExecExecutor:
    def __init__(self, container_name: str, workdir: str | None, user: str | None) -> None:
        try:
            from docker.errors import DockerException, NotFound

            from harness.sandbox.client import get_client
            from harness.sandbox.errors import DockerUnavailable
        except ImportError as exc:  # pragma: no cover - docker is a dependency
            raise ExecutorUnavailable("the docker SDK is not installed") from exc
        try:
            # The client's read timeout also bounds a step's exec_start read, so it must
            # outlast the longest step (a ProgramBench task may run 6 h); steps carry their
            # own `timeout` inside the container.
            self._client = get_client(timeout=STEP_READ_TIMEOUT_S)
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

    def _exec_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if self.workdir:
            kwargs["workdir"] = self.workdir
        if self.user:
            kwargs["user"] = self.user
        return kwargs

    def run(
        self, command: str, *, timeout_s: float, env: dict[str, str], stop: threading.Event
    ) -> StepRun:
        api = self._client.api
        pidfile = f"/tmp/.harness-ref-{uuid.uuid4().hex[:12]}.pid"
        exec_id = api.exec_create(
            self._container.id,
            ["bash", "-c", _DOCKER_WRAPPER, "ref-step", pidfile, f"{timeout_s:g}", command],
            stdout=True,
            stderr=True,
            environment=env or None,
            **self._exec_kwargs(),
        )["Id"]
        started = time.monotonic()
        box: dict[str, Any] = {}

        def _start() -> None:
            try:
                box["out"] = api.exec_start(exec_id)
            except Exception as exc:  # reported below
                box["error"] = exc

        worker = threading.Thread(target=_start, daemon=True)
        worker.start()
        cancelled = False
        while worker.is_alive():
            worker.join(_POLL_S)
            if stop.is_set() and not cancelled:
                cancelled = True
                self._container.exec_run(
                    ["sh", "-c", f'kill -TERM "$(cat {pidfile})" 2>/dev/null'], user="root"
                )
        self._container.exec_run(["rm", "-f", pidfile], user="root")
        if "error" in box:
            raise ExecutorUnavailable(f"docker exec failed: {type(box['error']).__name__}")
        exit_code = api.exec_inspect(exec_id).get("ExitCode")
        return StepRun(
            exit_code=exit_code,
            output_tail=_tail(box.get("out") or b""),
            timed_out=exit_code in (124, 137) and not cancelled,
            cancelled=cancelled,
            duration_s=time.monotonic() - started,
        )

    def write(self, item: WriteFile) -> None:
        from harness.sandbox.errors import CopyFailed
        from harness.sandbox.transfer import pack_bytes, put_archive

        path = str(PurePosixPath(self.workdir or "/") / item.path)
        data = pack_bytes(
            path,
            item.content.encode("utf-8"),
            mode=item.mode,
            uid=0,
            gid=0,
            mtime=int(time.time()),
        )
        try:
            put_archive(self._client.api, self._container.id, path, data)
        except CopyFailed as exc:
            raise ExecutorUnavailable(f"could not write {item.path!r} into the container") from exc

    def close(self) -> None:
        self._client.close()
