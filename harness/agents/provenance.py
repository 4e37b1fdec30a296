"""Provenance of the agent's source checkout (``--agent-repo``) and the seed gate.

:func:`repo_provenance` records HEAD, ``git describe``, branch, the dirty flag and SHA-256
digests of ``git status --porcelain`` and of the tracked diff (``repo_provenance.v1``).
:func:`seed_gate` decides whether a run may start from that checkout: dirty refuses unless
``allow_dirty_seed``; ``expect`` (``--expect-agent-commit``) refuses any other HEAD.
Pure functions over a path: git runs as a subprocess, with a clean git environment.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel, Field

from harness.core.errors import RefusalError

_GIT_ENV_DROP = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_CEILING_DIRECTORIES",
)
# A git commit SHA, full or abbreviated (lower case).
SHA_RE = re.compile(r"^[0-9a-f]{7,40}$")


class RepoProvenance(BaseModel):
    schema_: str = Field(default="repo_provenance.v1", alias="schema")
    repo_dir: str
    python: str = Field(default_factory=lambda: sys.version.split()[0])
    version: str | None = None
    git_available: bool = False
    git_error: str | None = None
    head: str | None = None
    branch: str | None = None
    describe: str | None = None
    status_available: bool = False
    tracked_diff_available: bool = False
    dirty: bool | None = None
    status_entries: int | None = None
    status_sha256: str | None = None
    tracked_diff_sha256: str | None = None


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


class _GitFailed(Exception):
    pass


def _git(repo: Path, *args: str, timeout: float = 30.0) -> bytes:
    env = {k: v for k, v in os.environ.items() if k not in _GIT_ENV_DROP}
    env["GIT_OPTIONAL_LOCKS"] = "0"  # reading status must not take the index lock
    env["LC_ALL"] = "C"
    try:
        proc = subprocess.run(
            ["git", "-C", str(repo), *args],
            capture_output=True,
            env=env,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise _GitFailed(f"git {args[0]}: {exc}") from exc
    if proc.returncode != 0:
        message = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise _GitFailed(f"git {args[0]}: {message[-1] if message else proc.returncode}")
    return proc.stdout


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def repo_provenance(repo_dir: Path | str) -> RepoProvenance:
    """Read what identifies the checkout; every failure is recorded, never raised."""
    repo = Path(repo_dir).resolve()
    prov = RepoProvenance(repo_dir=str(repo))
    version_file = repo / "VERSION"
    if version_file.is_file():
        prov.version = version_file.read_text(encoding="utf-8", errors="replace").strip()[:200]
    try:
        prov.head = _git(repo, "rev-parse", "--verify", "HEAD^{commit}").decode().strip()
        prov.git_available = True
    except _GitFailed as exc:
        prov.git_error = str(exc)[:500]
        return prov
    try:
        branch = _git(repo, "symbolic-ref", "--quiet", "--short", "HEAD").decode().strip()
        prov.branch = branch or None
    except _GitFailed:
        prov.branch = None  # detached HEAD
    try:
        prov.describe = (
            _git(repo, "describe", "--always", "--tags", "--dirty", "--abbrev=12").decode().strip()
        )
    except _GitFailed as exc:
        prov.git_error = str(exc)[:500]
    try:
        status = _git(repo, "status", "--porcelain", "--untracked-files=normal")
        prov.status_available = True
        prov.status_entries = len([line for line in status.splitlines() if line.strip()])
        prov.status_sha256 = _sha256(status)
        prov.dirty = prov.status_entries > 0
    except _GitFailed as exc:
        prov.git_error = str(exc)[:500]
    try:
        diff = _git(repo, "diff", "HEAD", "--binary", "--no-color", "--no-ext-diff")
        prov.tracked_diff_available = True
        prov.tracked_diff_sha256 = _sha256(diff)
    except _GitFailed as exc:
        prov.git_error = str(exc)[:500]
    return prov


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

