"""How the runner presents a cleanroom workspace to the agent.

A ``task_cleanroom_v6`` image ships the reference program as ``/workspace/executable``,
owned by root, mode 0111, in the agent-owned ``/workspace`` (where the agent could rename
it, and, for a dynamically linked program, dump it with ``LD_PRELOAD``). Before the agent
starts, :func:`prepare_cleanroom` (as root, inside the sandbox, one exec) adapts a real
image's layout (an agent user, an agent-owned ``/workspace``), then:

* moves the program out of the workspace into a directory only a dedicated uid can enter,
  and puts a setuid launcher at ``/workspace/reference_executable`` (the name the
  instruction and the gateway's protected artifact use, which leaves ``./executable`` free
  for the agent's build); see :mod:`harness.sandbox.protected` for what the kernel then
  refuses. The program's sha256 and size, hashed there as root, go to
  ``sandbox.protected_hashes`` so no copy of its bytes is exported;
* keeps both names out of git through ``.git/info/exclude`` (invisible to the submission,
  which never ships ``.git``).

An image whose ``reference_executable`` is already the real program (not a launcher) is
handled the same way. Idempotent; no program at all raises
:class:`~harness.sandbox.protected.ProtectedMissing`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from benchmarks.programbench.task_body import REFERENCE_NAME, WORKSPACE_BACKEND_PATH
from harness.api import PROTECT_TIMEOUT_S, ProtectedExecutable, ProtectedInstallFailed

if TYPE_CHECKING:
    from harness.api import ExecResult, Sandbox

AGENT_USER = "agent"
LAUNCHER_PATH = f"{WORKSPACE_BACKEND_PATH}/{REFERENCE_NAME}"
REFERENCE_CANDIDATES = (f"{WORKSPACE_BACKEND_PATH}/executable", LAUNCHER_PATH)

# Run as root after the launcher is in place (POSIX sh; runuser only without a repository).
GIT_EXCLUDE_SCRIPT = f"""\
set -eu
cd {WORKSPACE_BACKEND_PATH}
if [ ! -d .git ]; then
  if command -v git >/dev/null 2>&1; then
    git init -q {WORKSPACE_BACKEND_PATH} && chown -R {AGENT_USER}: .git
  else
    mkdir -p .git
  fi
fi
mkdir -p .git/info
touch .git/info/exclude
for name in executable {REFERENCE_NAME}; do
  grep -qxF "/$name" .git/info/exclude || printf '/%s\\n' "$name" >> .git/info/exclude
done
chown {AGENT_USER}: .git/info .git/info/exclude
"""


# Run as root before anything else: real cleanroom images may have no agent user, a
# root-owned /workspace and no runuser. POSIX sh + coreutils only; prints what it changed.
ADAPT_LAYOUT_SCRIPT = f"""\
set -eu
uid=1000
if ! grep -q '^{AGENT_USER}:' /etc/passwd; then
  if grep -q "^[^:]*:[^:]*:$uid:" /etc/passwd; then echo "agent_user_aliases_uid_$uid"; fi
  echo "{AGENT_USER}:x:$uid:$uid:{AGENT_USER}:/home/{AGENT_USER}:/bin/sh" >> /etc/passwd
  grep -q "^[^:]*:[^:]*:$uid:" /etc/group || echo "{AGENT_USER}:x:$uid:" >> /etc/group
  mkdir -p /home/{AGENT_USER} && chown $uid:$uid /home/{AGENT_USER}
  echo created_agent_user
fi
owner=$(find {WORKSPACE_BACKEND_PATH} -maxdepth 0 -printf %U)
if [ "$owner" != "$uid" ]; then
  find {WORKSPACE_BACKEND_PATH} -xdev -path {WORKSPACE_BACKEND_PATH}/executable -prune \\
    -o -exec chown -h $uid:$uid {{}} +
  echo "workspace_owner_${{owner}}_to_$uid"
fi
if ! command -v runuser >/dev/null 2>&1; then echo no_runuser; fi
"""


ADAPT_ARGV = ["sh", "-c", ADAPT_LAYOUT_SCRIPT]
EXCLUDE_ARGV = ["sh", "-c", GIT_EXCLUDE_SCRIPT]
ADAPT_TIMEOUT_S = 120
EXCLUDE_TIMEOUT_S = 60


class ReferencePresentFailed(ProtectedInstallFailed):
    reason_code = "reference_present_failed"


# A host workspace (benchmarks.programbench.host_workspace): the reference arrives in the
# root filesystem, its launcher stays there, the workspace holds a link to it.
SEEDED_CANDIDATES = ("/.harness-seed/executable", "/.harness-seed/reference_executable")
ROOTFS_LAUNCHER = f"/.harness-launch/{REFERENCE_NAME}"
LINK_SCRIPT = f"""\
set -eu
rm -f {LAUNCHER_PATH}
ln -s {ROOTFS_LAUNCHER} {LAUNCHER_PATH}
chown -h 1000:1000 {LAUNCHER_PATH}
chmod 0755 /.harness-launch
"""


def prepare_cleanroom(sandbox: Sandbox, *, host_workspace: bool = False
                      ) -> tuple[list[str], ProtectedExecutable]:
    """Adapt the layout, protect the reference behind the launcher, exclude both names from
    git: one exec as root (the protection's helpers copied in first), each step's failure
    raised as its own (:class:`ReferencePresentFailed`, the protection's errors); the
    layout's changes and the protected reference. ``host_workspace``: ``/workspace`` is a
    host folder, so the launcher lives on the root filesystem and the workspace links to it
    (no program and no setuid file in the host folder)."""
    if host_workspace:
        plan = sandbox.plan_protection(SEEDED_CANDIDATES, ROOTFS_LAUNCHER)
        stages = [ADAPT_ARGV, plan.argv, ["sh", "-c", LINK_SCRIPT], EXCLUDE_ARGV]
    else:
        plan = sandbox.plan_protection(REFERENCE_CANDIDATES, LAUNCHER_PATH)
        stages = [ADAPT_ARGV, plan.argv, EXCLUDE_ARGV]
    results = sandbox.exec_stages(
        stages, user="root",
        timeout=ADAPT_TIMEOUT_S + PROTECT_TIMEOUT_S + 2 * EXCLUDE_TIMEOUT_S,
    )
    changes = layout_changes(results[0])
    prot = sandbox.finish_protection(plan, results[1])
    if host_workspace and results[2].exit_code != 0:
        err = results[2].stderr.decode(errors="replace").strip()[-300:]
        raise ReferencePresentFailed(f"linking the reference into the workspace failed: {err}")
    check_excluded(results[-1])
    return changes, prot


def layout_changes(res: ExecResult) -> list[str]:
    """The changes :data:`ADAPT_LAYOUT_SCRIPT` reported; raises when it failed."""
    if res.exit_code != 0:
        err = res.stderr.decode(errors="replace").strip()[-300:]
        raise ReferencePresentFailed(f"adapting the image layout failed: {err}")
    return res.stdout.decode(errors="replace").split()


def check_excluded(res: ExecResult) -> None:
    """Raise when :data:`GIT_EXCLUDE_SCRIPT` failed."""
    if res.exit_code != 0:
        err = res.stderr.decode(errors="replace").strip()[-300:]
        raise ReferencePresentFailed(f"excluding the reference from git failed: {err}")
