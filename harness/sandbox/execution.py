"""Run a command in a container: stdin, env, user, workdir, and a timeout that kills.

The SDK's ``exec_run`` blocks without a timeout, so this drives the exec endpoints
directly: ``exec_create``, ``exec_start(socket=True)`` (a hijacked connection carrying
the multiplexed stdout/stderr frames), ``exec_inspect`` for the exit code.

Every command runs as ``sh -c 'echo $$ > "$1"; shift; exec "$@"' sh PGIDFILE CMD...``. runc
starts each exec'd process as the leader of a new session and process group, so
``$$`` is the group id of the command's whole tree; the command also carries a random
``HARNESS_EXEC_TOKEN`` in its environment. On timeout a second exec, as the same
user, kills that process group and every process still carrying the token (children
that moved to a new group keep their environment), then checks ``/proc`` again until
none is left (zombies aside). The same user, not root, because with ``SYS_PTRACE``
dropped root may not read another user's ``/proc/<pid>/environ``. The container stays
usable. A process that both leaves the group and clears its environment can escape
the kill; the container's TTL and removal still end it.
"""

from __future__ import annotations

import contextlib
import secrets
import select
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import docker
from docker.errors import APIError, NotFound

from harness.sandbox.errors import ExecFailed, ExecTimeout

MAX_OUTPUT_BYTES = 64 << 20  # per stream; the rest is counted as truncated
_AFTER_KILL_GRACE_S = 5.0
TOKEN_VAR = "HARNESS_EXEC_TOKEN"

# $1 is the pgid file, then the command: sh (the session/group leader) writes its pid,
# which is the group id, then execs the command in place (exit codes pass through).
_WRAP = '{ echo $$ > "$1"; } 2>/dev/null; shift; exec "$@"'

# Run on timeout as the command's user: $1 = token. Kills the group and the token carriers, then
# verifies through /proc (zombies, already dead, are ignored). Exit 1 if any survive.
_KILL = r"""
tok=$1; pf=/tmp/.harness-exec-$tok.pgid; pg=$(cat "$pf" 2>/dev/null)
i=0
while [ $i -lt 50 ]; do
  [ -n "$pg" ] && kill -KILL "-$pg" 2>/dev/null  # dash: no "--"
  left=""
  for d in /proc/[0-9]*; do
    st=$(cat "$d/stat" 2>/dev/null) || continue
    st=${st##*) }; set -- $st
    [ "$1" = Z ] && continue
    if [ -n "$pg" ] && [ "$3" = "$pg" ]; then left="$left ${d#/proc/}"; continue; fi
    if grep -qzx "HARNESS_EXEC_TOKEN=$tok" "$d/environ" 2>/dev/null; then
      kill -KILL "${d#/proc/}" 2>/dev/null; left="$left ${d#/proc/}"
    fi
  done
  [ -z "$left" ] && break
  i=$((i+1)); sleep 0.1
done
rm -f "$pf"
[ -z "$left" ] || { echo "survivors:$left"; exit 1; }
"""


@dataclass(frozen=True)
class ExecResult:
    exit_code: int | None  # None only if Docker never reported one
    stdout: bytes
    stderr: bytes
    wall_s: float
    timed_out: bool = False
    truncated: bool = False  # output beyond MAX_OUTPUT_BYTES per stream was dropped

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def check(self) -> ExecResult:
        """Raise on timeout (``exec_timeout``) or a non-zero exit (``exec_failed``)."""
        if self.timed_out:
            raise ExecTimeout(f"command timed out after {self.wall_s:.1f}s")
        if self.exit_code != 0:
            tail = self.stderr[-300:].decode(errors="replace").strip()
            raise ExecFailed(f"command exited {self.exit_code}: {tail}")
        return self


def wrap_argv(cmd: str | Sequence[str], token: str, shell: Sequence[str]) -> list[str]:
    argv = [*shell, cmd] if isinstance(cmd, str) else list(cmd)
    if not argv:
        raise ValueError("empty command")
    return ["/bin/sh", "-c", _WRAP, "sh", f"/tmp/.harness-exec-{token}.pgid", *argv]


class _Demux:
    """Split Docker's multiplexed stream: 8-byte header (stream id, size) + payload."""

    def __init__(self, limit: int) -> None:
        self.buf = bytearray()
        self.out = bytearray()
        self.err = bytearray()
        self.limit = limit
        self.truncated = False

    def feed(self, data: bytes) -> None:
        self.buf += data
        while len(self.buf) >= 8:
            size = int.from_bytes(self.buf[4:8], "big")
            if len(self.buf) < 8 + size:
                return
            target = self.err if self.buf[0] == 2 else self.out
            room = self.limit - len(target)
            payload = self.buf[8 : 8 + size]
            if room < size:
                self.truncated = True
                payload = payload[: max(room, 0)]
            target += payload
            del self.buf[: 8 + size]


def _raw_socket(sock: Any) -> socket.socket:
    raw = getattr(sock, "_sock", sock)
    if not isinstance(raw, socket.socket):
        raise ExecFailed(f"unsupported exec transport {type(raw).__name__}")
    return raw


def _buffered_ahead(sock: Any) -> bytes:
    """Stream bytes the HTTP client already read past the response headers.

    http.client parses the headers through a buffered reader that may pull in the
    start of the hijacked stream when headers and output arrive together (a busy
    client). docker-py then hands out the raw socket and those bytes would be lost.
    Call with the socket non-blocking: an empty buffer then costs no wait.
    """
    try:
        reader = sock._response.raw._fp.fp
    except AttributeError:
        return b""
    try:
        ahead = reader.peek()
    except (BlockingIOError, OSError, ValueError):
        return b""
    return bytes(reader.read(len(ahead))) if ahead else b""


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
) -> ExecResult:
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
    demux = _Demux(max_output)
    raw.setblocking(False)
    demux.feed(_buffered_ahead(sock))
    deadline = None if timeout is None else started + timeout
    timed_out = False
    try:
        timed_out = _pump(raw, demux, stdin, deadline)
        if timed_out:
            _kill_tree(api, container_id, token, user)
            _pump(raw, demux, None, time.monotonic() + _AFTER_KILL_GRACE_S)
    finally:
        raw.close()
    exit_code = _exit_code(api, exec_id)
    return ExecResult(
        exit_code=exit_code,
        stdout=bytes(demux.out),
        stderr=bytes(demux.err),
        wall_s=time.monotonic() - started,
        timed_out=timed_out,
        truncated=demux.truncated,
    )


def _pump(raw: socket.socket, demux: _Demux, stdin: bytes | None, deadline: float | None) -> bool:
    """Move data until EOF (returns False) or the deadline (returns True)."""
    raw.setblocking(False)
    pending = memoryview(stdin) if stdin is not None else None
    if pending is not None and not pending:
        raw.shutdown(socket.SHUT_WR)  # empty stdin: EOF at once
        pending = None
    while True:
        wait = None if deadline is None else deadline - time.monotonic()
        if wait is not None and wait <= 0:
            return True
        readable, writable, _ = select.select([raw], [raw] if pending is not None else [], [], wait)
        if writable and pending is not None:
            try:
                sent = raw.send(pending[: 1 << 16])
            except BlockingIOError:
                sent = 0
            except OSError:  # the command exited without reading all of stdin
                sent, pending = 0, memoryview(b"")
            pending = pending[sent:]
            if not pending:
                with contextlib.suppress(OSError):
                    raw.shutdown(socket.SHUT_WR)
                pending = None
        if readable:
            try:
                data = raw.recv(1 << 16)
            except BlockingIOError:
                continue
            except ConnectionResetError:
                data = b""
            if not data:
                return False
            demux.feed(data)


def _kill_tree(api: docker.APIClient, container_id: str, token: str, user: str) -> None:
    try:
        argv = ["/bin/sh", "-c", _KILL, "sh", token]
        exec_id = api.exec_create(container_id, argv, user=user)["Id"]
        output = api.exec_start(exec_id)
        code = api.exec_inspect(exec_id).get("ExitCode")
    except (APIError, NotFound) as exc:
        raise ExecFailed(
            f"could not kill a timed-out command in {container_id[:12]}: {exc}"
        ) from exc
    if code != 0:
        text = output.decode(errors="replace").strip() if isinstance(output, bytes) else str(output)
        raise ExecFailed(
            f"a timed-out command in {container_id[:12]} left processes behind ({text})",
            reason_code="exec_kill_failed",
        )


def _exit_code(api: docker.APIClient, exec_id: str) -> int | None:
    # The stream can end a moment before the daemon records the exit code.
    for _ in range(200):
        info = api.exec_inspect(exec_id)
        if not info.get("Running"):
            code = info.get("ExitCode")
            return int(code) if code is not None else None
        time.sleep(0.01)
    return None
