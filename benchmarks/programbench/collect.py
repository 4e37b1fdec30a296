"""From the sandbox's ``/workspace`` to ``submission.tar.gz``, without running anything on it.

The workspace is the agent's: the host never materialises it, never runs git (or anything)
on it, and never resolves its links (DESIGN.md section 8). Two steps:

1. :func:`freeze_and_probe`, one exec as the agent user: kill every process the agent left
   behind, so nothing changes the tree while it streams (the shell that kills is the one
   process of the agent user that survives its own ``kill -1``; the exec's wrapper dies
   with the rest, its stream stays open while the shell writes), then probe, with a
   timeout and bounded output, which top-level build dirs git tracks files in (git with
   ``core.fsmonitor`` and hooks off: an agent-set fsmonitor command would only run in its
   own sandbox anyway) and which directories hold a valid ``CACHEDIR.TAG``.
2. :func:`export_submission`: the daemon's archive of ``/workspace`` streamed straight into
   the submission (:func:`~benchmarks.programbench.submission.pack_members`), bounded by the
   sandbox's copy-out caps, protected artifacts dropped by path and by content.

Over a cap, or an archive that breaks twice while the sandbox is alive, raises
:class:`~harness.sandbox.transfer.CopyRefused`: the agent's failure, with its reason code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.programbench.submission import (
    BUILD_OUTPUT_DIRS,
    CACHEDIR_SIGNATURE,
    PackRules,
    SubmissionInfo,
    normalise_protected,
    pack_members,
)
from harness.api import ArchiveBroken, Budget, CopyRefused

if TYPE_CHECKING:
    from harness.api import Sandbox

WORKSPACE = "/workspace"
PROBE_TIMEOUT_S = 300
MAX_PROBE_LINES = 10_000


_FREEZE_THEN = "kill -KILL -1 2>/dev/null\n"  # then the probe, in the same shell

# $1 = workspace, $2 = CACHEDIR.TAG signature. One line per fact: "git", "tracked NAME",
# "cachedir ./REL". Names with a newline are not understood: such a dir is simply kept.
_PROBE = r"""
cd "$1" || exit 0
g() { git -c core.fsmonitor=false -c core.hooksPath=/dev/null -c safe.directory='*' "$@"; }
if [ -d .git ] && command -v git >/dev/null 2>&1 \
   && g rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo git
  for d in """ + " ".join(BUILD_OUTPUT_DIRS) + r"""; do
    [ -d "$d" ] && [ ! -L "$d" ] && g ls-files --error-unmatch -- "$d" >/dev/null 2>&1 \
      && echo "tracked $d"
  done
fi
find . -name .git -prune -o -type f -name CACHEDIR.TAG -print 2>/dev/null \
  | head -n 10000 | while IFS= read -r f; do
  [ "$(head -c ${#2} "$f" 2>/dev/null)" = "$2" ] && printf 'cachedir %s\n' "${f%/CACHEDIR.TAG}"
done
exit 0
"""


@dataclass
class WorkspaceFacts:
    """What the probe learnt inside the sandbox (agent-controlled, so only ever used to
    leave more of the agent's own files out, never to reach anything else)."""

    tracked_build_dirs: set[str] | None = None  # None: no readable git repository
    cache_dirs: set[str] = field(default_factory=set)
    probe_error: str | None = None


def freeze_and_probe(sandbox: Sandbox, workspace: str = WORKSPACE) -> WorkspaceFacts:
    """Kill the agent user's leftover processes, then the tracked build dirs and cache
    dirs, asked inside the sandbox, in one exec as the agent user (the kill is instant: the
    probe's timeout bounds both)."""
    return _probe(sandbox, _FREEZE_THEN + _PROBE, workspace)


def probe_only(sandbox: Sandbox, workspace: str = WORKSPACE) -> WorkspaceFacts:
    """The probe alone, as the agent user: for a container this runner does not own
    (``harness programbench prepare``), whose processes are left running."""
    return _probe(sandbox, _PROBE, workspace)


def _probe(sandbox: Sandbox, script: str, workspace: str) -> WorkspaceFacts:
    res = sandbox.exec(["/bin/sh", "-c", script, "sh", workspace, CACHEDIR_SIGNATURE.decode()],
                       user="agent", timeout=PROBE_TIMEOUT_S, workdir="/")  # fmt: skip
    if res.timed_out:
        return WorkspaceFacts(probe_error=f"the workspace probe timed out after "
                                          f"{PROBE_TIMEOUT_S}s: build and cache dirs kept")
    return parse_probe(res.stdout)


def parse_probe(stdout: bytes) -> WorkspaceFacts:
    facts = WorkspaceFacts()
    tracked: set[str] = set()
    git = False
    for line in stdout.decode("utf-8", "surrogateescape").splitlines()[:MAX_PROBE_LINES]:
        word, _, rest = line.partition(" ")
        if word == "git" and not rest:
            git = True
        elif word == "tracked" and rest in BUILD_OUTPUT_DIRS:
            tracked.add(rest)
        elif word == "cachedir" and rest.startswith("./") and len(rest) > 2:
            facts.cache_dirs.add(rest[2:])
    facts.tracked_build_dirs = tracked if git else None
    return facts


def export_submission(
    sandbox: Sandbox,
    dest: Path,
    *,
    facts: WorkspaceFacts,
    protected_paths: list[str],
    workspace: str = WORKSPACE,
) -> SubmissionInfo:
    """Stream ``workspace`` into ``dest``; one retry if the daemon's stream breaks midway.

    A second break while the sandbox still runs is put on the agent's content (a file
    shrinking under the daemon's tar: ``workspace_unexportable``); a daemon or sandbox that
    is gone, or an archive the daemon refuses to start, stays infrastructure.
    """
    rules = PackRules(protected=normalise_protected(protected_paths),
                      tracked_build_dirs=facts.tracked_build_dirs,
                      is_cache_dir=facts.cache_dirs.__contains__)
    for attempt in (1, 2):
        budget = Budget(sandbox.copy_limits, f"{workspace} of {sandbox.name}")
        try:
            with sandbox.stream_out(workspace, budget, spool_dir=dest.parent) as members:
                return pack_members(members, dest, rules=rules, budget=budget)
        except ArchiveBroken as exc:
            if attempt == 2 and sandbox.is_running():
                raise CopyRefused(f"the workspace could not be exported: {exc}",
                                  "workspace_unexportable") from exc
            if not sandbox.is_running():
                raise
    raise AssertionError("unreachable")
