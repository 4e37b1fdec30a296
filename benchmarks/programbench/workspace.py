"""How the runner presents a cleanroom workspace to the agent (pure: shell text, no Docker).

A ``task_cleanroom_v6`` image ships the reference program as ``/workspace/executable``,
owned by root, mode 0111. Before the agent starts, the runner runs
:data:`PRESENT_REFERENCE_SCRIPT` **as root** inside the sandbox. It renames the program to
``/workspace/reference_executable`` (the name the instruction and the gateway's protected
artifact use, and which leaves ``./executable`` free for the agent's build), keeps it
root-owned and execute-only (the agent user can run it but cannot read, copy or hash it;
reading is refused by the kernel, not by a command filter), and keeps both names out of
git through ``.git/info/exclude`` (invisible to the submission, which never ships ``.git``).
It is idempotent and fails (non-zero) when no reference program is present.
"""

from __future__ import annotations

from benchmarks.programbench.task_body import REFERENCE_NAME, WORKSPACE_BACKEND_PATH

AGENT_USER = "agent"

PRESENT_REFERENCE_SCRIPT = f"""\
set -eu
cd {WORKSPACE_BACKEND_PATH}
if [ -e executable ] && [ ! -e {REFERENCE_NAME} ]; then mv executable {REFERENCE_NAME}; fi
if [ ! -f {REFERENCE_NAME} ]; then
  echo "no reference program at {WORKSPACE_BACKEND_PATH}/{REFERENCE_NAME}" >&2; exit 3
fi
chown root:root {REFERENCE_NAME}
chmod 0111 {REFERENCE_NAME}
if [ ! -d .git ]; then runuser -u {AGENT_USER} -- git init -q {WORKSPACE_BACKEND_PATH}; fi
mkdir -p .git/info
touch .git/info/exclude
for name in executable {REFERENCE_NAME}; do
  grep -qxF "/$name" .git/info/exclude || printf '/%s\\n' "$name" >> .git/info/exclude
done
chown {AGENT_USER}: .git/info .git/info/exclude
"""


def present_reference_argv() -> list[str]:
    """``argv`` for ``docker exec -u root <container> ...`` that presents the reference."""
    return ["bash", "-c", PRESENT_REFERENCE_SCRIPT]
