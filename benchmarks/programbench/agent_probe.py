"""The cleanroom as the agent user sees it before the agent starts: one exec, one script.

As the agent user, in ``/workspace`` (POSIX sh; ``timeout`` when the image has it), in order:

1. ``/proc/self/status`` of a process the agent user starts (its capability sets);
2. the reference's owner and mode (``stat -c '%u %a'``);
3. the reference probes (:data:`PROBE_ARGS`), each bounded by :data:`PROBE_TIMEOUT_S`,
   until one exits 0; a launcher failure (exit 126, a message starting with
   :data:`~harness.sandbox.protected.LAUNCHER_FAILED_PREFIX`) ends the script. In an image
   without ``timeout`` a hanging probe runs into the exec's timeout: the probes that did
   not answer count as run without a 0 ("launched").

Stdout, one fact a line: ``status KEY:\tVALUE``, ``mode UID MODE``, ``probe ARG RC``,
``launcher_failed ARG`` (the launcher's message on stderr).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from harness.api import LAUNCHER_FAILED_PREFIX

if TYPE_CHECKING:
    from harness.api import Sandbox

PROBE_ARGS = ("--version", "--help", "-h")
PROBE_TIMEOUT_S = 30
CAP_KEYS = ("CapPrm", "CapEff", "CapBnd", "NoNewPrivs")

# $1 = the reference (relative to /workspace), $2 = the launcher's message prefix,
# $3 = the per-probe timeout (s), then the probe arguments.
_SCRIPT = r"""
ref=$1 prefix=$2 limit=$3
shift 3
run() {
  if command -v timeout >/dev/null 2>&1; then timeout -s KILL "$limit" "$@"; else "$@"; fi
}
cat /proc/self/status | while IFS= read -r line; do printf 'status %s\n' "$line"; done
printf 'mode %s\n' "$(stat -c '%u %a' "$ref" 2>/dev/null)"
for arg in "$@"; do
  err=$(run "$ref" "$arg" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" = 126 ]; then
    case "$err" in
      "$prefix"*) printf 'launcher_failed %s\n' "$arg"; printf '%s' "$err" >&2; exit 0;;
    esac
  fi
  printf 'probe %s %s\n' "$arg" "$rc"
  [ "$rc" = 0 ] && break
done
exit 0
"""


@dataclass
class AgentView:
    """What the probe script reported (see the module docstring)."""

    probe: str | None = None  # the first probe command that exited 0
    launcher_error: str | None = None  # the launcher's message when it could not run
    mode: str = ""  # "UID MODE" of the reference as the agent sees it
    capabilities: dict[str, str] = field(default_factory=dict)


def probe_as_agent(sandbox: Sandbox, reference: str, workspace: str) -> AgentView:
    """Run the probe script as the agent user in ``workspace``; ``reference`` relative."""
    argv = [
        "sh",
        "-c",
        _SCRIPT,
        "sh",
        reference,
        LAUNCHER_FAILED_PREFIX.decode(),
        str(PROBE_TIMEOUT_S),
        *PROBE_ARGS,
    ]
    res = sandbox.exec(
        argv, user="agent", timeout=PROBE_TIMEOUT_S * (len(PROBE_ARGS) + 1), workdir=workspace
    )
    return parse_view(res.stdout, res.stderr, reference)


def parse_view(stdout: bytes, stderr: bytes, reference: str) -> AgentView:
    view = AgentView()
    for line in stdout.decode(errors="replace").splitlines():
        word, _, rest = line.partition(" ")
        if word == "probe" and view.probe is None and rest.endswith(" 0"):
            view.probe = f"{reference} {rest[:-2]}"
        elif word == "launcher_failed":
            view.launcher_error = stderr.decode(errors="replace").strip()[-300:]
        elif word == "mode":
            view.mode = rest.strip()
        elif word == "status":
            key, _, value = rest.partition(":")
            if key in CAP_KEYS:
                view.capabilities[key] = value.strip()
    return view
