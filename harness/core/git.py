"""The git state of a checkout: HEAD, ``git describe``, branch, the dirty flag and SHA-256
digests of ``git status --porcelain`` and of the tracked diff (``repo_provenance.v1``).

Read for the runner's own checkout (the run manifest's ``source``) and for the agent's
(``--agent-repo``, :mod:`harness.agents.provenance`). Git runs as a subprocess, with a clean
git environment; every failure is recorded, never raised.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel, Field

_GIT_ENV_DROP = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_CEILING_DIRECTORIES",
)


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
