"""Provenance of the agent's source checkout (``--agent-repo``) and the seed gate.

:func:`repo_provenance` (:mod:`harness.core.git`) records the checkout's git state;
:func:`seed_gate` decides whether a run may start from that checkout: dirty refuses unless
``allow_dirty_seed``; ``expect`` (``--expect-agent-commit``) refuses any other HEAD.
Pure functions over a path.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from harness.core.errors import RefusalError
from harness.core.git import RepoProvenance

__all__ = ["SHA_RE", "SeedGate", "require_seed", "seed_gate"]

# A git commit SHA, full or abbreviated (lower case).
SHA_RE = re.compile(r"^[0-9a-f]{7,40}$")


class SeedGate(BaseModel):
    require_clean: bool = True
    allow_dirty_seed: bool = False
    expect: str | None = None
    git_available: bool = False
    status_available: bool = False
    dirty: bool | None = None
    describe: str | None = None
    head: str | None = None
    reason: str | None = None
    ok: bool = False


def seed_gate(
    prov: RepoProvenance, *, allow_dirty_seed: bool = False, expect: str | None = None
) -> SeedGate:
    """Decide whether a run may start from this checkout (pure)."""
    gate = SeedGate(
        allow_dirty_seed=allow_dirty_seed,
        require_clean=not allow_dirty_seed,
        expect=expect,
        git_available=prov.git_available,
        status_available=prov.status_available,
        dirty=prov.dirty,
        describe=prov.describe,
        head=prov.head,
    )
    wanted = expect.strip().lower() if expect else None
    if wanted is not None and not SHA_RE.match(wanted):
        gate.reason = "seed_expect_invalid"
    elif not prov.git_available or not prov.head:
        gate.reason = "seed_identity_unavailable"
    elif wanted and not prov.head.startswith(wanted):
        gate.reason = "seed_mismatch"
    elif not prov.status_available:
        gate.reason = None if allow_dirty_seed else "seed_status_unavailable"
    elif prov.dirty and not allow_dirty_seed:
        gate.reason = "seed_dirty"
    gate.ok = gate.reason is None
    return gate


def require_seed(gate: SeedGate, prov: RepoProvenance) -> SeedGate:
    """Raise the refusal (exit 2, stage ``seed_gate``) for a closed gate."""
    if gate.ok:
        return gate
    messages = {
        "seed_identity_unavailable": f"cannot read the HEAD of agent repo {prov.repo_dir} "
        f"({prov.git_error})",
        "seed_expect_invalid": f"--expect-agent-commit {gate.expect!r} is not a commit SHA "
        "(7 to 40 hex digits)",
        "seed_mismatch": f"agent repo {prov.repo_dir} is at {prov.head}, expected "
        f"{gate.expect} (--expect-agent-commit)",
        "seed_status_unavailable": f"cannot read git status of agent repo {prov.repo_dir}; "
        "pass --allow-dirty-seed to run anyway",
        "seed_dirty": f"agent repo {prov.repo_dir} has {prov.status_entries} uncommitted "
        "change(s); commit them or pass --allow-dirty-seed",
    }
    reason = gate.reason or "seed_identity_unavailable"
    raise RefusalError(
        f"seed gate: {messages.get(reason, reason)}", stage="seed_gate", reason=reason, exit_code=2
    )

