"""Kill what an exec started: its process tree on a timeout or a stop, a user's leftover
processes, every process of a container but those kept. Small execs of builtin-only
shell scripts do it, never reading a file the command could write.

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

Processes that survive are reported in :attr:`~harness.sandbox.execution.ExecResult.survivors`, never raised: a
command that escapes the kill is the command's doing, not an infrastructure failure. A
process that both leaves the session (after its parent died) and clears its environment
can escape; the container's TTL and removal still end it.
"""

from __future__ import annotations

import re
import time

import docker
from docker.errors import APIError, NotFound

from harness.sandbox.errors import ExecFailed

_START_TRIES = 20

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
