"""The agent seed's copy, without Docker (issue 26 point 1): what the tar holds (the files
git lists, as in the working tree, root's and read-only for others, symlinks kept, ignored
files left out), that it is checked against the state the run recorded (the same digests as
``harness.core.git``), and that a checkout changed since admission is ``seed_changed``."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from benchmarks.cowork_bench.seed import SEED_PATH, agent_seed, checkout_state
from harness.core.errors import InfraError
from harness.core.git import repo_provenance
from tests.benchmarks.cowork.cowork_seed_support import git, make_repo

FILES = {"agent.py": "print('hi')\n", "lib/util.py": "X = 1\n", ".gitignore": "venv/\n*.log\n",
         "run.sh": "#!/bin/sh\nexec python3 agent.py\n"}  # fmt: skip


def members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: m for m in tar.getmembers()}


def recorded(repo: Path) -> dict[str, object]:
    return repo_provenance(repo).model_dump(mode="json", by_alias=True)


def test_a_clean_checkout_is_copied_as_git_lists_it(tmp_path: Path) -> None:
    repo = tmp_path / "seed"
    head = make_repo(repo, FILES, executable=("run.sh",))
    (repo / "venv").mkdir()
    (repo / "venv" / "big.bin").write_bytes(b"x" * 1000)  # ignored: not part of the seed
    (repo / "debug.log").write_text("ignored too")
    (repo / "link").symlink_to("lib/util.py")
    git(repo, "add", "link")
    git(repo, "commit", "-q", "-m", "link")
    head = git(repo, "rev-parse", "HEAD")
    now = checkout_state(repo)
    prov = repo_provenance(repo)
    assert (now["head"], now["status_sha256"], now["tracked_diff_sha256"]) == (
        prov.head,
        prov.status_sha256,
        prov.tracked_diff_sha256,
    )  # the admission's digests
    seed = agent_seed(repo, recorded(repo), allow_dirty=False)
    got = members(seed.data)
    prefix = SEED_PATH.strip("/")
    assert sorted(got) == sorted([prefix, f"{prefix}/lib", *(f"{prefix}/{n}" for n in
                                  [*FILES, "link"])])  # fmt: skip
    assert all(m.uid == 0 and m.gid == 0 for m in got.values())
    assert not any(m.mode & 0o022 for m in got.values() if not m.issym())  # read-only
    assert got[f"{prefix}/run.sh"].mode == 0o755 and got[f"{prefix}/agent.py"].mode == 0o644
    assert got[f"{prefix}/link"].issym() and got[f"{prefix}/link"].linkname == "lib/util.py"
    rec = seed.record
    assert (rec.commit, rec.dirty, rec.files, rec.path) == (head, False, 5, SEED_PATH)
    assert rec.tar_sha256.startswith("sha256:") and rec.summary()["commit"] == head
    assert agent_seed(repo, recorded(repo), allow_dirty=False) is seed  # built once


def test_a_checkout_changed_since_admission_is_not_the_recorded_seed(tmp_path: Path) -> None:
    repo = tmp_path / "seed"
    make_repo(repo, FILES)
    before = recorded(repo)
    (repo / "agent.py").write_text("print('edited')\n")  # dirty now
    with pytest.raises(InfraError) as dirty:
        agent_seed(repo, before, allow_dirty=False)
    assert dirty.value.reason_code == "seed_changed" and "status_sha256" in str(dirty.value)
    git(repo, "commit", "-q", "-am", "moved on")  # clean again, at another commit
    with pytest.raises(InfraError) as moved:
        agent_seed(repo, before, allow_dirty=False)
    assert moved.value.reason_code == "seed_changed" and "head" in str(moved.value)


def test_a_dirty_checkout_admitted_with_allow_dirty_seed_is_copied_as_it_is(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "seed"
    make_repo(repo, FILES)
    (repo / "agent.py").write_text("print('edited')\n")
    (repo / "new.py").write_text("NEW = 1\n")  # untracked, not ignored: part of a dirty seed
    (repo / "lib" / "util.py").unlink()  # deleted: left out
    state = recorded(repo)
    with pytest.raises(InfraError, match="--allow-dirty-seed"):
        agent_seed(repo, state, allow_dirty=False)
    seed = agent_seed(repo, state, allow_dirty=True)
    got = members(seed.data)
    prefix = SEED_PATH.strip("/")
    assert f"{prefix}/new.py" in got and f"{prefix}/lib/util.py" not in got
    with tarfile.open(fileobj=io.BytesIO(seed.data)) as tar:
        member = tar.extractfile(f"{prefix}/agent.py")
        assert member is not None and member.read() == b"print('edited')\n"
    assert seed.record.dirty is True


def test_links_out_of_the_checkout_copy_no_host_file_in(tmp_path: Path) -> None:
    """The seed is the agent's code: a link in it pointing out of the checkout (a tracked
    symlink, or a tracked folder turned into one in an admitted dirty tree) is copied as a
    link or left out, never followed: no byte of a host file outside the checkout is in
    the tar."""
    secret = b"HOST-SECRET-5e1f0a"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "util.py").write_bytes(secret)
    (outside / "key").write_bytes(secret)
    repo = tmp_path / "seed"
    make_repo(repo, FILES)
    (repo / "key").symlink_to(outside / "key")  # absolute, out of the checkout
    (repo / "up").symlink_to("../outside/key")  # relative, out of the checkout
    git(repo, "add", "key", "up")
    git(repo, "commit", "-q", "-m", "links")
    seed = agent_seed(repo, recorded(repo), allow_dirty=False)
    got = members(seed.data)
    prefix = SEED_PATH.strip("/")
    assert got[f"{prefix}/key"].issym() and got[f"{prefix}/up"].issym()
    assert secret not in seed.data
    # lib/ (tracked: lib/util.py) replaced by a link to a folder holding a util.py
    (repo / "lib" / "util.py").unlink()
    (repo / "lib").rmdir()
    (repo / "lib").symlink_to(outside)
    seed = agent_seed(repo, recorded(repo), allow_dirty=True)
    got = members(seed.data)
    assert f"{prefix}/lib/util.py" not in got and got[f"{prefix}/lib"].issym()
    assert "lib/util.py" in seed.record.skipped
    assert secret not in seed.data
