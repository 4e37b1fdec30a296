"""Run a command in a container: stdin, env, user, workdir, and a timeout that kills.

The SDK's ``exec_run`` blocks without a timeout, so this drives the exec endpoints
directly: ``exec_create``, ``exec_start(socket=True)`` (a hijacked connection carrying
the multiplexed stdout/stderr frames), ``exec_inspect`` for the exit code.

Every command runs under a small ``/bin/sh`` wrapper whose ``$0`` is
``harness-exec-<token>`` (a random token per exec): the wrapper stays alive as the parent of
the command, so its ``/proc/<pid>/cmdline`` names the exec. runc starts each exec'd process
as the leader of a new session, so the wrapper's pid is also the session id of the whole
tree. The command also carries the token in its environment as ``HARNESS_EXEC_TOKEN``.

On timeout (or when ``stop`` is set) the tree is killed by two execs that read no file the
command could write (:mod:`harness.sandbox.exec_kill`, which also ends a user's leftover
processes); processes that survive are reported in :attr:`ExecResult.survivors`, never
raised.

Output is captured per stream into a bounded head (``max_output`` bytes) and, with
``tail_output``, a ring buffer of the last bytes: memory stays bounded whatever the command
prints, and :attr:`ExecResult.stdout_total` records how much it printed. The exec's
connection is driven by :mod:`harness.sandbox.exec_stream`; how a container ended is
:mod:`harness.sandbox.container_exit`'s. Their public names are importable from here too.
"""

from __future__ import annotations

import secrets
import shlex
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import docker
from docker.errors import APIError, NotFound

from harness.sandbox.container_exit import ContainerExit, container_exit  # noqa: F401  (re-exported)
from harness.sandbox.errors import ExecFailed, ExecTimeout
from harness.sandbox.exec_kill import (  # noqa: F401  (re-exported)
    kill_all_but,
    kill_tree,
    kill_user_processes,
)
from harness.sandbox.exec_stream import (  # noqa: F401  (re-exported)
    _buffered_ahead,
    _Capture,
    _Demux,
    _pump,
    _raw_socket,
)

MAX_OUTPUT_BYTES = 64 << 20  # per stream, the head kept by default; the rest is counted
_AFTER_KILL_GRACE_S = 5.0
TOKEN_VAR = "HARNESS_EXEC_TOKEN"
MARK_PREFIX = "harness-exec-"

# $0 is the marker. The command runs as a child (not exec'd in place) so the wrapper, the
# session leader, keeps the marker in its cmdline; its exit status passes through.
_WRAP = '"$@"; __hx_rc=$?; exit $__hx_rc'


@dataclass(frozen=True)
class ExecResult:
    exit_code: int | None  # None only if Docker never reported one
    stdout: bytes  # the kept head, then the kept tail (see stdout_cut)
    stderr: bytes
    wall_s: float
    timed_out: bool = False
    truncated: bool = False  # some output was dropped (head/tail limits)
    stdout_total: int = 0  # bytes the command wrote to the stream
    stderr_total: int = 0
    stdout_cut: int | None = None  # offset in stdout where dropped bytes were, if any
    stderr_cut: int | None = None
    stopped: bool = False  # ended by the caller's ``stop`` event
    survivors: str = ""  # processes of a killed tree that outlived the kill

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def exit_status(self) -> int:
        """The status a shell would report: 124 when the timeout killed the command (as
        coreutils ``timeout`` says), -1 when Docker reported none, else :attr:`exit_code`."""
        if self.timed_out:
            return 124
        return self.exit_code if self.exit_code is not None else -1

    @property
    def stdout_text(self) -> str:
        """:attr:`stdout` as UTF-8 text (undecodable bytes replaced)."""
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        """:attr:`stderr` as UTF-8 text (undecodable bytes replaced)."""
        return self.stderr.decode("utf-8", "replace")

    def check(self) -> ExecResult:
        """Raise on timeout (``exec_timeout``) or a non-zero exit (``exec_failed``)."""
        if self.timed_out:
            raise ExecTimeout(f"command timed out after {self.wall_s:.1f}s")
        if self.exit_code != 0:
            tail = self.stderr[-300:].decode(errors="replace").strip()
            raise ExecFailed(f"command exited {self.exit_code}: {tail}")
        return self


def marker(token: str) -> str:
    return f"{MARK_PREFIX}{token}"


def wrap_argv(cmd: str | Sequence[str], token: str, shell: Sequence[str]) -> list[str]:
    argv = [*shell, cmd] if isinstance(cmd, str) else list(cmd)
    if not argv:
        raise ValueError("empty command")
    return ["/bin/sh", "-c", _WRAP, marker(token), *argv]



def run_exec(
    api: docker.APIClient,
    container_id: str,
    cmd: str | Sequence[str],
    *,
    user: str = "root",
    timeout: float | None = None,
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
    workdir: str | None = None,
    shell: Sequence[str] = ("/bin/sh", "-c"),
    max_output: int = MAX_OUTPUT_BYTES,
    tail_output: int = 0,
    stop: threading.Event | None = None,
) -> ExecResult:
    """Run ``cmd``; keep the first ``max_output`` and last ``tail_output`` bytes per stream.

    ``stop`` (optional) ends the command early, like a timeout (``ExecResult.stopped``).
    """
    token = secrets.token_hex(8)
    environment = [f"{k}={v}" for k, v in (env or {}).items()] + [f"{TOKEN_VAR}={token}"]
    started = time.monotonic()
    try:
        exec_id = api.exec_create(
            container_id,
            wrap_argv(cmd, token, shell),
            stdout=True,
            stderr=True,
            stdin=stdin is not None,
            tty=False,
            user=user,
            environment=environment,
            workdir=workdir,
        )["Id"]
        sock = api.exec_start(exec_id, socket=True)
        raw = _raw_socket(sock)
    except (APIError, NotFound) as exc:
        raise ExecFailed(f"exec in {container_id[:12]} failed: {exc}") from exc
    demux = _Demux(max_output, tail_output)
    raw.setblocking(False)
    demux.feed(_buffered_ahead(sock))
    deadline = None if timeout is None else started + timeout
    ended = "eof"
    survivors = ""
    try:
        ended = _pump(raw, demux, stdin, deadline, stop)
        if ended != "eof":
            survivors = kill_tree(api, container_id, token, user)
            _pump(raw, demux, None, time.monotonic() + _AFTER_KILL_GRACE_S, None)
    finally:
        raw.close()
    exit_code = _exit_code(api, exec_id)
    stdout, stdout_cut = demux.out.finish()
    stderr, stderr_cut = demux.err.finish()
    return ExecResult(
        exit_code=exit_code,
        stdout=stdout,
        stderr=stderr,
        wall_s=time.monotonic() - started,
        timed_out=ended == "deadline",
        truncated=stdout_cut is not None or stderr_cut is not None,
        stdout_total=demux.out.total,
        stderr_total=demux.err.total,
        stdout_cut=stdout_cut,
        stderr_cut=stderr_cut,
        stopped=ended == "stop",
        survivors=survivors,
    )


# $1 = a random token, then one shell-quoted command line per stage. After each stage a
# line "<token> <index> <exit code>" (after a newline) on stdout and on stderr; a stage
# that fails ends the script.
_STAGES = r"""
tok=$1; shift; i=0
for stage in "$@"; do
  eval "$stage"
  rc=$?
  printf '\n%s %s %s\n' "$tok" "$i" "$rc"
  printf '\n%s %s %s\n' "$tok" "$i" "$rc" >&2
  [ "$rc" = 0 ] || exit 0
  i=$((i+1))
done
"""


def run_stages(
    api: docker.APIClient,
    container_id: str,
    stages: Sequence[Sequence[str]],
    *,
    user: str = "root",
    timeout: float | None = None,
    workdir: str | None = None,
) -> list[ExecResult]:
    """Run the argvs ``stages`` one after the other in one exec, stopping after the first
    that fails; one :class:`ExecResult` per stage, as if each had been its own exec
    (``timeout`` bounds them all). A stage the exec never finished gets the exec's end (its
    timeout, its exit code); a stage never started gets exit code None."""
    token = secrets.token_hex(8)
    argv = ["/bin/sh", "-c", _STAGES, "sh", token, *(shlex.join(s) for s in stages)]
    res = run_exec(api, container_id, argv, user=user, timeout=timeout, workdir=workdir)
    outs = _split_stages(res.stdout, token, len(stages))
    errs = _split_stages(res.stderr, token, len(stages))
    results: list[ExecResult] = []
    over = False  # a stage failed, or the exec ended inside one: the rest never started
    for (out, code), (err, _) in zip(outs, errs, strict=True):
        if over:
            results.append(ExecResult(exit_code=None, stdout=b"", stderr=b"", wall_s=0.0))
        elif code is None:
            results.append(replace(res, stdout=out, stderr=err))
            over = True
        else:
            results.append(ExecResult(exit_code=code, stdout=out, stderr=err, wall_s=res.wall_s))
            over = code != 0
    return results


def _split_stages(data: bytes, token: str, count: int) -> list[tuple[bytes, int | None]]:
    """Per stage: its bytes before its end line, and the exit code that line gives (None:
    no end line; the stage's bytes are then whatever followed the previous one)."""
    parts: list[tuple[bytes, int | None]] = []
    pos = 0
    for i in range(count):
        mark = f"\n{token} {i} ".encode()
        at = data.find(mark, pos)
        end = data.find(b"\n", at + len(mark)) if at >= 0 else -1
        if at < 0 or end < 0:
            parts.append((data[pos:], None))
            pos = len(data)
            continue
        code = data[at + len(mark) : end]
        parts.append((data[pos:at], int(code) if code.isdigit() else None))
        pos = end + 1
    return parts



def _exit_code(api: docker.APIClient, exec_id: str) -> int | None:
    # The stream can end a moment before the daemon records the exit code. None when the
    # daemon no longer knows the exec (its container is gone): the caller decides why.
    for _ in range(200):
        try:
            info = api.exec_inspect(exec_id)
        except (APIError, NotFound):
            return None
        if not info.get("Running"):
            code = info.get("ExitCode")
            return int(code) if code is not None else None
        time.sleep(0.01)
    return None
