"""Seed provenance and the seed gate, on real temporary git repositories."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from harness.agents.provenance import require_seed, seed_gate
from harness.core.errors import RefusalError
from harness.core.git import repo_provenance

GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_SYSTEM": "/dev/null",
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], env=GIT_ENV, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "agent"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "VERSION").write_text("6.97.2\n")
    (path / "agent.py").write_text("print('hi')\n")
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "seed")
    git(path, "tag", "v6.97.2")
    return path


def test_clean_repo_provenance(repo):
    prov = repo_provenance(repo)
    assert prov.git_available and prov.status_available and prov.tracked_diff_available
    assert prov.head == git(repo, "rev-parse", "HEAD")
    assert prov.branch == "main" and prov.describe == "v6.97.2" and prov.version == "6.97.2"
    assert prov.dirty is False and prov.status_entries == 0
    assert prov.status_sha256 == "sha256:" + hashlib.sha256(b"").hexdigest()
    dumped = prov.model_dump(by_alias=True)
    assert dumped["schema"] == "repo_provenance.v1" and dumped["repo_dir"] == str(repo)
    gate = seed_gate(prov)
    assert gate.ok and gate.reason is None
    assert require_seed(gate, prov).ok


def test_dirty_repo_refuses_unless_allowed(repo):
    (repo / "agent.py").write_text("print('changed')\n")
    (repo / "new.txt").write_text("untracked\n")
    prov = repo_provenance(repo)
    assert prov.dirty and prov.status_entries == 2
    assert prov.describe == "v6.97.2-dirty"
    porcelain = subprocess.run(
        ["git", "-C", str(repo), "status", "--porcelain"],
        capture_output=True,
        env=GIT_ENV,
        check=True,
    ).stdout
    assert prov.status_sha256 == "sha256:" + hashlib.sha256(porcelain).hexdigest()
    diff = subprocess.run(
        ["git", "-C", str(repo), "diff", "HEAD", "--binary"],
        capture_output=True,
        env=GIT_ENV,
        check=True,
    ).stdout
    assert prov.tracked_diff_sha256 == "sha256:" + hashlib.sha256(diff).hexdigest()
    gate = seed_gate(prov)
    assert not gate.ok and gate.reason == "seed_dirty"
    with pytest.raises(RefusalError) as info:
        require_seed(gate, prov)
    assert info.value.exit_code == 2 and info.value.stage == "seed_gate"
    assert "--allow-dirty-seed" in str(info.value)
    allowed = seed_gate(prov, allow_dirty_seed=True)
    assert allowed.ok and allowed.dirty and not allowed.require_clean


def test_different_diffs_have_different_digests(repo):
    (repo / "agent.py").write_text("a\n")
    first = repo_provenance(repo).tracked_diff_sha256
    (repo / "agent.py").write_text("b\n")
    assert repo_provenance(repo).tracked_diff_sha256 != first


def test_expect_agent_commit(repo):
    head = git(repo, "rev-parse", "HEAD")
    prov = repo_provenance(repo)
    assert seed_gate(prov, expect=head).ok
    assert seed_gate(prov, expect=head[:10].upper()).ok
    (repo / "agent.py").write_text("x\n")
    git(repo, "commit", "-qam", "next")
    moved = repo_provenance(repo)
    with pytest.raises(RefusalError) as info:
        require_seed(seed_gate(moved, expect=head), moved)
    assert info.value.reason == "seed_mismatch" and head in str(info.value)
    with pytest.raises(RefusalError) as bad:
        require_seed(seed_gate(moved, expect="main"), moved)
    assert bad.value.reason == "seed_expect_invalid"


def test_detached_head_has_no_branch(repo):
    git(repo, "checkout", "-q", "--detach")
    prov = repo_provenance(repo)
    assert prov.branch is None and prov.head and seed_gate(prov).ok


def test_not_a_repository_is_identity_unavailable(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    prov = repo_provenance(plain)
    assert not prov.git_available and prov.git_error and prov.head is None
    gate = seed_gate(prov, allow_dirty_seed=True)
    assert gate.reason == "seed_identity_unavailable"
    with pytest.raises(RefusalError):
        require_seed(gate, prov)


def test_git_environment_of_the_caller_is_ignored(repo, tmp_path, monkeypatch):
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    assert repo_provenance(repo).head == git(
        repo, "--git-dir", str(repo / ".git"), "rev-parse", "HEAD"
    )
