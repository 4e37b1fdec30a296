"""Run a command in a container: stdin, env, user, workdir, and a timeout that kills.

The SDK's ``exec_run`` blocks without a timeout, so this drives the exec endpoints
directly: ``exec_create``, ``exec_start(socket=True)`` (a hijacked connection carrying
the multiplexed stdout/stderr frames), ``exec_inspect`` for the exit code.

Every command runs under a small ``/bin/sh`` wrapper whose ``$0`` is
``harness-exec-<token>`` (a random token per exec): the wrapper stays alive as the parent of
the command, so its ``/proc/<pid>/cmdline`` names the exec. runc starts each exec'd process
as the leader of a new session, so the wrapper's pid is also the session id of the whole
tree. The command also carries the token in its environment as ``HARNESS_EXEC_TOKEN``.

On timeout (or when ``stop`` is set) two execs kill the tree; neither reads a file the
command could write, so nothing the command does can redirect the kill:

1. as root: find the processes whose cmdline carries the marker, take their sessions and
   process groups and every descendant (from ``/proc/<pid>/stat``, world-readable), keep
   only processes whose *real uid* is the command's uid (a forged marker can only name the
   command's own processes: never root's, never the harness's), stop them, then kill them;
   repeat until none is left;
2. as the command's user: kill every process still carrying the token in its environment
   (children that left the session; root without ``SYS_PTRACE`` may not read another
   user's ``/proc/<pid>/environ``).

Processes that survive are reported in :attr:`ExecResult.survivors`, never raised: a
command that escapes the kill is the command's doing, not an infrastructure failure. A
process that both leaves the session (after its parent died) and clears its environment
can escape; the container's TTL and removal still end it.

Output is captured per stream into a bounded head (``max_output`` bytes) and, with
``tail_output``, a ring buffer of the last bytes: memory stays bounded whatever the command
prints, and :attr:`ExecResult.stdout_total` records how much it printed.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import select
import shlex
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import docker
from docker.errors import APIError, NotFound

from harness.sandbox.errors import ExecFailed, ExecTimeout

MAX_OUTPUT_BYTES = 64 << 20  # per stream, the head kept by default; the rest is counted
_AFTER_KILL_GRACE_S = 5.0
_STOP_POLL_S = 0.2
_START_TRIES = 20
TOKEN_VAR = "HARNESS_EXEC_TOKEN"
MARK_PREFIX = "harness-exec-"

# $0 is the marker. The command runs as a child (not exec'd in place) so the wrapper, the
# session leader, keeps the marker in its cmdline; its exit status passes through.
_WRAP = '"$@"; __hx_rc=$?; exit $__hx_rc'

# Root pass. $1 = token, $2 = the command's numeric uid (the marker itself never appears in
# this script's argv, nor in a helper's: it must not match itself). Prints "survivors: ..." and exits 3
# if processes of the tree are left after 20 rounds. Zombies are ignored.
_KILL_ROOT = r"""
mark="harness-exec-$1"; want=$2; groups=" "; nl='
'
snap() {
  for d in /proc/[0-9]*; do
    st=$(cat "$d/stat" 2>/dev/null) || continue
    st=${st##*) }; set -- $st
    [ "$1" = Z ] && continue
    echo "${d#/proc/} $2 $3 $4"
  done
}
ruid() { sed -n 's/^Uid:[[:space:]]*\([0-9]*\).*/\1/p' "/proc/$1/status" 2>/dev/null; }
targets() {
  all=$(snap)
  marked=$(grep -lsaF -f - /proc/[0-9]*/cmdline <<EOF
$mark
EOF
)
  for f in $marked; do
    d=${f%/cmdline}; p=${d#/proc/}
    [ "$(ruid "$p")" = "$want" ] || continue
    st=$(cat "$d/stat" 2>/dev/null) || continue
    st=${st##*) }; set -- $st
    for g in "$p" "$3" "$4"; do
      case "$groups" in *" $g "*) ;; *) groups="$groups$g ";; esac
    done
  done
  found=" "; more=1
  while [ $more = 1 ]; do
    more=0
    rest=$all
    while [ -n "$rest" ]; do
      line=${rest%%"$nl"*}
      case "$rest" in *"$nl"*) rest=${rest#*"$nl"};; *) rest="";; esac
      set -- $line
      [ $# = 4 ] || continue
      case "$found" in *" $1 "*) continue;; esac
      hit=0
      case "$groups" in *" $1 "*|*" $3 "*|*" $4 "*) hit=1;; esac
      case "$found" in *" $2 "*) hit=1;; esac
      [ $hit = 1 ] || continue
      [ "$(ruid "$1")" = "$want" ] || continue
      found="$found$1 "; more=1
    done
  done
  echo $found
}
i=0; left=""
while [ $i -lt 20 ]; do
  left=$(targets)
  [ -z "$left" ] && break
  kill -STOP $left 2>/dev/null
  left=$(targets)
  [ -n "$left" ] && kill -KILL $left 2>/dev/null
  i=$((i+1)); sleep 0.05
done
left=$(targets)
[ -z "$left" ] || { echo "survivors: $left"; exit 3; }
"""

# User pass, as the command's user: $1 = token. Kills the processes carrying the token in
# their environment (they may have left the session).
_KILL_ENV = r"""
tok=$1; i=0; left=""
while [ $i -lt 20 ]; do
  left=""
  for d in /proc/[0-9]*; do
    [ "${d#/proc/}" = $$ ] && continue
    st=$(cat "$d/stat" 2>/dev/null) || continue
    st=${st##*) }; set -- $st
    [ "$1" = Z ] && continue
    if grep -qzx "HARNESS_EXEC_TOKEN=$tok" "$d/environ" 2>/dev/null; then
      kill -KILL "${d#/proc/}" 2>/dev/null; left="$left ${d#/proc/}"
    fi
  done
  [ -z "$left" ] && break
  i=$((i+1)); sleep 0.05
done
[ -z "$left" ] || { echo "survivors:$left"; exit 3; }
"""

# As root: $1 = a numeric uid whose processes go ("" for every uid), $2 = pids kept (PID 1
# and this shell always are). Stops each (a stopped process cannot fork), then kills them,
# until none is left. Builtins only (no fork), so it works while the processes it ends
# exhaust the pids limit.
_KILL_PROCS = r"""
want=$1; keep=" 1 $2 $$ "; i=0; left=""
[ "$want" = 0 ] && exit 2
uid_of() {
  u=""
  while read -r k a rest; do
    if [ "$k" = "Uid:" ]; then u=$a; break; fi
  done < "$1/status"
} 2>/dev/null
while [ $i -lt 50 ]; do
  left=""
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    case "$keep" in *" $p "*) continue;; esac
    if [ -n "$want" ]; then uid_of "$d"; [ "$u" = "$want" ] || continue; fi
    st=""; read -r st < "$d/stat" 2>/dev/null
    st=${st##*) }; set -f; set -- $st; set +f
    [ "${1:-Z}" = Z ] && continue
    kill -STOP "$p" 2>/dev/null
    left="$left $p"
  done
  [ -z "$left" ] && break
  kill -KILL $left 2>/dev/null
  i=$((i+1))
done
[ -z "$left" ] || { echo "survivors:$left"; exit 3; }
"""

_UID = r"""
u=${1%%:*}
case "$u" in
  ''|*[!0-9]*)
    while IFS=: read -r n x id rest; do
      if [ "$n" = "$u" ]; then echo "$id"; exit 0; fi
    done < /etc/passwd
    exit 1;;
  *) echo "$u";;
esac
"""


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


class _Capture:
    """One stream: the first ``head`` bytes and the last ``tail`` bytes, plus the total."""

    def __init__(self, head: int, tail: int) -> None:
        self.head_limit = max(head, 0)
        self.tail_limit = max(tail, 0)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: memoryview) -> None:
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data and self.tail_limit:
            self.tail += data
            if len(self.tail) > 2 * self.tail_limit:  # trim now and then: amortised O(1)
                del self.tail[: len(self.tail) - self.tail_limit]

    def finish(self) -> tuple[bytes, int | None]:
        if len(self.tail) > self.tail_limit:
            del self.tail[: len(self.tail) - self.tail_limit]
        kept = len(self.head) + len(self.tail)
        cut = len(self.head) if kept < self.total else None
        return bytes(self.head) + bytes(self.tail), cut


class _Demux:
    """Split Docker's multiplexed stream (8-byte header: stream id, size; then the payload)
    as it arrives: a frame's payload is never buffered whole."""

    def __init__(self, head: int, tail: int = 0) -> None:
        self.out = _Capture(head, tail)
        self.err = _Capture(head, tail)
        self._header = bytearray()
        self._remaining = 0
        self._target = self.out

    def feed(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self._remaining == 0:
                need = 8 - len(self._header)
                self._header += view[:need]
                view = view[need:]
                if len(self._header) == 8:
                    self._target = self.err if self._header[0] == 2 else self.out
                    self._remaining = int.from_bytes(self._header[4:8], "big")
                    self._header.clear()
                continue
            chunk = view[: self._remaining]
            self._target.add(chunk)
            self._remaining -= len(chunk)
            view = view[len(chunk) :]


def _raw_socket(sock: Any) -> socket.socket:
    # docker-py's SocketIO hands out no public accessor: major version pinned in pyproject,
    # the reach checked by tests/sandbox/test_docker_private_reaches.py
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
    try:  # docker-py/urllib3 private attributes: pinned and tested like _raw_socket's
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


def _pump(
    raw: socket.socket,
    demux: _Demux,
    stdin: bytes | None,
    deadline: float | None,
    stop: threading.Event | None,
) -> str:
    """Move data until EOF (``"eof"``), the deadline (``"deadline"``) or ``stop``."""
    raw.setblocking(False)
    pending = memoryview(stdin) if stdin is not None else None
    if pending is not None and not pending:
        raw.shutdown(socket.SHUT_WR)  # empty stdin: EOF at once
        pending = None
    while True:
        if stop is not None and stop.is_set():
            return "stop"
        wait = None if deadline is None else deadline - time.monotonic()
        if wait is not None and wait <= 0:
            return "deadline"
        if stop is not None:
            wait = _STOP_POLL_S if wait is None else min(wait, _STOP_POLL_S)
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
                return "eof"
            demux.feed(data)


def _run_small(
    api: docker.APIClient, container_id: str, argv: list[str], user: str
) -> tuple[int | None, str]:
    exec_id = api.exec_create(container_id, argv, user=user)["Id"]
    output = api.exec_start(exec_id)
    code = api.exec_inspect(exec_id).get("ExitCode")
    text = output.decode(errors="replace") if isinstance(output, bytes) else str(output)
    return code, text.strip()[-500:]


_SURVIVORS_RE = re.compile(r"survivors:\s*([0-9 ]+)")
# Run as the user whose processes go: every one of its processes but this shell.
_STOP_ALL_MINE = "kill -STOP -1 2>/dev/null; kill -KILL -1 2>/dev/null; exit 0"


def kill_tree(api: docker.APIClient, container_id: str, token: str, user: str) -> str:
    """Kill the tree of the exec carrying ``token``, run as ``user`` (see the module doc).

    Returns the pids that survived ("" when none). Raises :class:`ExecFailed` only when
    Docker itself fails (the container is gone, the API errs).
    """
    try:
        code, text = _run_small(api, container_id, ["/bin/sh", "-c", _UID, "sh", user], "root")
        uid = text if code == 0 and text.isdigit() else None
        left: list[str] = []
        if uid is not None:
            argv = ["/bin/sh", "-c", _KILL_ROOT, "sh", token, uid]
            code, text = _run_small(api, container_id, argv, "root")
            if code != 0:
                left += _SURVIVORS_RE.findall(text) or [f"(root pass exit {code})"]
        code, text = _run_small(api, container_id, ["/bin/sh", "-c", _KILL_ENV, "sh", token], user)
        if code != 0:
            left += _SURVIVORS_RE.findall(text) or [f"(user pass exit {code})"]
    except (APIError, NotFound) as exc:
        raise ExecFailed(
            f"could not kill a timed-out command in {container_id[:12]}: {exc}"
        ) from exc
    return " ".join(s.strip() for s in left)


def kill_user_processes(api: docker.APIClient, container_id: str, user: str) -> str:
    """Kill every process of ``user``'s real uid in the container (an unprivileged agent's
    leftovers: daemons, children that left its session). Returns the survivors ("" if
    none). Refuses root. Raises :class:`ExecFailed` only when Docker itself fails."""
    try:
        # An exec may not even start while the user's processes hold every pid: retry.
        for _ in range(_START_TRIES):
            code, uid = _run_small(api, container_id, ["/bin/sh", "-c", _UID, "sh", user], "root")
            if code == 0 and uid.isdigit():
                break
            time.sleep(0.1)
        else:
            return f"(could not resolve user {user!r})"
        if uid == "0":
            raise ValueError("kill_user_processes refuses root")
        # First as the user itself: kill(-1) stops, then kills, every process of its uid in
        # one call each, faster than a fork bomb refills what a walk of /proc frees
        for _ in range(3):
            _run_small(api, container_id, ["/bin/sh", "-c", _STOP_ALL_MINE], uid)
        argv = ["/bin/sh", "-c", _KILL_PROCS, "sh", uid, ""]
        for _ in range(_START_TRIES):
            code, text = _run_small(api, container_id, argv, "root")
            if code == 0:
                break
            time.sleep(0.1)
    except (APIError, NotFound) as exc:
        raise ExecFailed(
            f"could not end the processes of {user} in {container_id[:12]}: {exc}"
        ) from exc
    return "" if code == 0 else " ".join(_SURVIVORS_RE.findall(text)) or f"(exit {code})"


def kill_all_but(api: docker.APIClient, container_id: str, keep: str) -> str:
    """Kill every process in the container but PID 1 and ``keep`` (space-separated pids):
    a root agent's leftovers before its judge runs. Returns the survivors ("" if none)."""
    if any(not p.isdigit() for p in keep.split()):
        raise ValueError(f"kill_all_but: {keep!r} is not a list of pids")
    argv = ["/bin/sh", "-c", _KILL_PROCS, "sh", "", keep]
    try:
        for _ in range(_START_TRIES):
            code, text = _run_small(api, container_id, argv, "root")
            if code == 0:
                return ""
            if code == 3:
                break
            time.sleep(0.1)
    except (APIError, NotFound) as exc:
        raise ExecFailed(f"could not end the processes in {container_id[:12]}: {exc}") from exc
    return " ".join(_SURVIVORS_RE.findall(text)) or f"(exit {code})"


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


@dataclass(frozen=True)
class ContainerExit:
    """Why a container stopped running, from the daemon's events (None fields: unknown)."""

    running: bool
    exit_code: int | None = None
    killed_via_api: bool = False  # a kill/stop/remove request reached the daemon
    oom: bool = False

    @property
    def from_inside(self) -> bool:
        """It ended from inside (its PID 1 exited or was killed from within, or ran out of
        memory), with no kill, stop or remove request from outside."""
        return not self.running and not self.killed_via_api and (
            self.oom or (self.exit_code is not None and self.exit_code != 0)
        )


# Requests from outside that precede a ``die`` (``destroy`` follows it, also with auto-remove).
_OUTSIDE_ACTIONS = frozenset({"kill", "stop"})


def container_exit(api: docker.APIClient, container_id: str, since: float) -> ContainerExit:
    """Is the container running; if not, how did it end since ``since`` (epoch seconds)?

    A container whose PID 1 exits on its own reports ``die`` (non-zero exit code) with no
    ``kill``; ``docker kill/stop/rm -f`` (the harness, an operator, a sweep) report ``kill``
    or ``stop`` first. A clean exit 0 is the sleep of PID 1 ending (the TTL): not inside.
    Raises :class:`ExecFailed` when Docker cannot answer.
    """
    try:
        info = api.inspect_container(container_id)
        if info.get("State", {}).get("Running"):
            return ContainerExit(running=True)
    except NotFound:
        pass
    except APIError as exc:
        raise ExecFailed(f"inspecting {container_id[:12]} failed: {exc}") from exc
    code: int | None = None
    outside = oom = False
    try:
        events = api.events(
            since=int(since) - 2,
            until=int(time.time()) + 1,
            filters={"container": container_id, "type": "container"},
            decode=True,
        )
        for event in events:
            action = str(event.get("Action") or event.get("status") or "").split(":")[0]
            if action in _OUTSIDE_ACTIONS and code is None:
                outside = True
            elif action == "oom":
                oom = True
            elif action == "die" and code is None:
                raw = (event.get("Actor") or {}).get("Attributes", {}).get("exitCode")
                code = int(raw) if raw is not None and str(raw).isdigit() else None
    except APIError as exc:
        raise ExecFailed(f"reading events of {container_id[:12]} failed: {exc}") from exc
    return ContainerExit(running=False, exit_code=code, killed_via_api=outside, oom=oom)
