"""Review of the host workspace (``--pb-workspace host``): what an adversarial gateway agent
can leave in, or do through, the host folder the sandbox mounts on ``/workspace``.

Each test here demonstrates one weakness and fails until it is fixed:

* a setuid file at a path longer than ``PATH_MAX`` on the host escapes :func:`scrub`
  (``os.walk`` silently skips the directory ``scandir`` cannot open);
* a deeply nested tree makes :func:`scrub` raise ``RecursionError`` after the agent: the
  agent turns its own run into a harness error;
* the same tree, left in the folder, breaks the ``shutil.rmtree`` of :func:`seed` on a retry;
* a second copy of the reference in the image's ``/workspace`` is seeded into the host folder,
  owned by the agent (the protection's ``find / -xdev`` no longer sees ``/workspace``);
* a sparse 1 TB file stays in the host folder after the run;
* other host users reach the agent's setuid files while it works.

Fixed (issue 43): the folder lives in a private ``host_workspace/`` (0700, the runner's) and
is removed with ``rm -rf --one-file-system`` once the submission is collected; the seeding
copy drops the reference by its bytes too.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench.fixture import ensure_fixture
from tests.agents.agents_support import start_server
from tests.security.agentexec_support import TARGET
from tests.support.suite import run_pytest

pytestmark = pytest.mark.docker

LONG = "d" * 250


@pytest.fixture
def rm_deep(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Deep trees break pytest's own (recursive) clean-up of old base temps: removed here
    with ``rm -rf``, which is not recursive."""
    yield
    subprocess.run(["rm", "-rf", "--", str(tmp_path)], check=False, timeout=300)


def step(**kw: Any) -> dict[str, Any]:
    return {"continue_on_error": True, **kw}


def oracle_steps() -> list[dict[str, Any]]:
    files = ensure_fixture().oracle_contents()
    return [step(write={"path": rel, "content": data.decode(),
                        "mode": 0o755 if rel.endswith(".sh") else 0o644})
            for rel, data in sorted(files.items())]


def run_with(tmp_path: Path, steps: list[dict[str, Any]], *extra: str) -> tuple[Any, Path]:
    root = tmp_path / "run"
    server = start_server(tmp_path / "server", {"default_plan": {"steps": steps}})
    try:
        run = run_pytest(TARGET, root, "--pb-fixtures", "-k", "calculator", "--agent",
                         "gateway", "--gateway-url", server.url, "--gateway-poll-sec", "0.2",
                         *extra)
    finally:
        server.stop()
    return run, root / "programbench" / FIXTURE_ID / "host_workspace" / "workspace"


def fd_walk(folder: Path) -> list[tuple[str, os.stat_result]]:
    """Every entry under ``folder`` with its lstat, through directory descriptors (so paths
    longer than PATH_MAX are seen), iteratively (so depth is no limit)."""
    out: list[tuple[str, os.stat_result]] = []
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    stack = [(os.open(folder, flags), "")]
    while stack:
        fd, rel = stack.pop()
        try:
            for name in os.listdir(fd):
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                out.append((f"{rel}/{name}", st))
                if stat.S_ISDIR(st.st_mode):
                    stack.append((os.open(name, flags, dir_fd=fd), f"{rel}/{name}"))
        finally:
            os.close(fd)
    return out


def deep_tree(levels: int, name: str = "a") -> str:
    """A shell command making ``levels`` nested folders named ``name`` under ``deep``."""
    return (f"mkdir deep && cd deep && i=0; while [ $i -lt {levels} ]; do mkdir {name} && "
            f"cd {name} || exit 1; i=$((i+1)); done; cp /bin/true suid_deep && "
            f"chmod 4755 suid_deep && echo made")


@pytest.mark.slow  # deep trees: a minute each on fuse-overlayfs
def test_a_setuid_file_beyond_path_max_does_not_stay(tmp_path: Path, rm_deep: None) -> None:
    """(c) 20 folders of 250-character names put a setuid file at a host path of over
    5000 characters: the folder is gone after the run, whatever its depth, and the oracle's
    work is scored."""
    steps = [*oracle_steps(), step(run=deep_tree(20, LONG))]
    run, folder = run_with(tmp_path, steps)
    row = run.latest[FIXTURE_ID]
    assert row["score"] == 1.0, (row.get("reason_code"), str(row.get("error"))[-300:])
    assert not folder.parent.exists(), "the host workspace outlived the instance"


@pytest.mark.slow  # deep trees: a minute each on fuse-overlayfs
def test_a_deep_tree_does_not_turn_the_agents_run_into_a_harness_error(
        tmp_path: Path, rm_deep: None) -> None:
    """(d) 1200 nested folders: no RecursionError turns the agent's run into a harness error;
    the oracle's files are scored 1.0 and the folder is removed."""
    steps = [*oracle_steps(), step(run=deep_tree(1200))]
    run, folder = run_with(tmp_path, steps)
    row = run.latest[FIXTURE_ID]
    assert row["outcome"] not in ("infra_failed", "error", "errored"), (
        row["outcome"], row.get("reason_code"), str(row.get("error"))[-300:])
    assert row.get("score") == 1.0, (row.get("reason_code"), str(row.get("error"))[-300:])
    assert not folder.parent.exists()


@pytest.fixture(scope="module")
def fixture_image() -> str:
    import docker

    fixture = ensure_fixture(image=True)
    return str(docker.from_env().images.get(fixture.image).id)


def test_a_retry_reseeds_over_a_deep_tree(tmp_path: Path, fixture_image: str,
                                          rm_deep: None) -> None:
    """(d) what the agent left in the folder is removed by :func:`seed` on the next try of the
    instance with ``shutil.rmtree``, which recurses: 1200 nested folders make it raise
    ``RecursionError`` (not even an InfraError), so every retry of the instance fails."""
    import docker

    from benchmarks.programbench.host_workspace import seed

    dest = tmp_path / "inst" / "host_workspace" / "workspace"
    dest.mkdir(parents=True)
    fd = os.open(dest, os.O_RDONLY | os.O_DIRECTORY)
    try:  # 1200 nested folders through directory descriptors: the worker's cwd is untouched
        for _ in range(1200):
            os.mkdir("a", dir_fd=fd)
            nxt = os.open("a", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
    finally:
        os.close(fd)
    client = docker.from_env()
    label = {"harness.review": uuid.uuid4().hex}
    try:
        seed(client, fixture_image, dest, label)
    finally:
        for c in client.containers.list(all=True, filters={"label": "harness.review"}):
            c.remove(force=True)
    assert (dest / "README.md").exists()
    assert not (dest / "a").exists()


def test_a_second_copy_of_the_reference_in_the_image_reaches_the_host_folder(
        tmp_path: Path, fixture_image: str) -> None:
    """(a) a task image whose ``/workspace`` holds the reference under a second name (a hard
    link, a backup copy): without a host workspace the protection's ``find / -xdev`` makes it
    mode 0000, root's, and copy-out drops it by hash; :func:`seed` copies it into the host
    folder (protected only by path), owned by the agent, so the agent reads the program."""
    import docker

    from benchmarks.programbench.host_workspace import seed

    tag = f"harness-review-copy:{uuid.uuid4().hex[:8]}"
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(
        f"FROM {fixture_image}\nUSER root\n"
        "RUN ln /workspace/executable /workspace/.calc-linked && "
        "mkdir -p /workspace/bin && cp /workspace/executable /workspace/bin/calc.bak\n")
    subprocess.run(["docker", "build", "-q", "-t", tag, str(ctx)], check=True,
                   capture_output=True, timeout=300)
    client = docker.from_env()
    reference = client.containers.run(tag, ["sha256sum", "/workspace/executable"],
                                      user="root", remove=True).decode().split()[0]
    dest = tmp_path / "inst" / "host_workspace" / "workspace"
    try:
        seed(client, tag, dest, {"harness.review": uuid.uuid4().hex})
    finally:
        for c in client.containers.list(all=True, filters={"label": "harness.review"}):
            c.remove(force=True)
        client.images.remove(tag, force=True)
    leaked = []
    for rel, st in fd_walk(dest):
        if stat.S_ISREG(st.st_mode):
            data = (dest / rel.lstrip("/")).read_bytes()
            if hashlib.sha256(data).hexdigest() == reference:
                leaked.append((rel, st.st_uid, oct(st.st_mode & 0o7777)))
    assert leaked == [], f"the reference's bytes were seeded into the host folder: {leaked}"


def test_a_sparse_terabyte_file_does_not_stay_in_the_run_root(tmp_path: Path) -> None:
    """(c) ``truncate -s 1T``: copy-out refuses the workspace (``submission_too_large``) and
    the host folder, with the file, is removed after the run."""
    steps = [step(run="truncate -s 1T big.bin && fallocate -l 64M real.bin; ls -ls")]
    run, folder = run_with(tmp_path, steps)
    row = run.latest[FIXTURE_ID]
    assert row["reason_code"] == "submission_too_large", row.get("reason_code")
    assert not folder.parent.exists()


def test_other_host_users_cannot_reach_the_agents_setuid_files(tmp_path: Path) -> None:
    """(c) while the agent works (kept here with --keep-sandboxes, as a reattach keeps it)
    its ``chmod 4755`` files are setuid binaries of host uid 1000: the folder's private
    parent (0700, the runner's) keeps every other host user out."""
    steps = [step(run="cp /bin/true suid_now && chmod 4755 suid_now")]
    run, folder = run_with(tmp_path, steps, "--keep-sandboxes")
    try:
        row = run.latest[FIXTURE_ID]
        assert (folder / "suid_now").is_file(), row.get("reason_code")
        private = folder.parent
        assert private.stat().st_mode & 0o777 == 0o700 and private.stat().st_uid == os.getuid()
    finally:
        subprocess.run([sys.executable, "-m", "harness.cli", "sweep", "--run",
                        run.manifest["run_id"]], capture_output=True, timeout=300, check=False)
