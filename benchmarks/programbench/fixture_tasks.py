"""The offline fixture tasks beside ProgramBench's own ``testorg__calculator.abc1234``.

Carried and newly evaluated scores must meet in one run, so the offline fixture has three
tasks with three outcomes. Every one runs in the calculator's image (one build, one tag per
task name) and the oracle agent writes the same bundled calculator submission into each;
their tests differ, so the real ``programbench eval`` scores that submission:

=====================================  =====  ============================================
``testorg__calculator.abc1234``        1.0    the package's own task (solved)
``testorg__calcfloat.bcd2345``         0.75   also asks for decimals, which the bundled
                                              ``$((...))`` calculator lacks (partial)
``testorg__wordcount.cde3456``         0.0    a word counter's tests (failed)
=====================================  =====  ============================================

The official tools find a task only in the package's own ``programbench/data/tasks`` (its
``TASKS_DIR``; no setting moves it), so :func:`install_fixture_tasks` writes the two tasks
there, like the package ships its calculator: ``task.yaml``, ``tests.json`` and the test
branch ``tests/<branch>/eval/{run.sh,tests/...}``. The blob of each branch (what
``PROGRAMBENCH_BLOB_DIR`` serves ``programbench eval``) is made by
:func:`benchmarks.programbench.fixture.build_blob_dir`. Ids start with ``testorg__``, so they
are fixture tasks (``PBInstance.is_fixture``): they never join a real selection.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks.programbench import FIXTURE_ID

# The calculator's run.sh as the fixture serves it (``--rootdir=eval``: JUnit names match
# tests.json), for the new tasks too.
RUN_SH = """#!/bin/bash
set -e
cd "$(dirname "$0")/.."
pip install pytest --quiet 2>/dev/null || true
python3 -m pytest --rootdir=eval eval/tests/ --junitxml=eval/results.xml -v || true
"""

_RUN_HELPER = '''import subprocess


def _run(*args, stdin=""):
    result = subprocess.run(["./executable", *map(str, args)], input=stdin,
                            capture_output=True, text=True, timeout=10)
    return result.stdout.strip()
'''

CALCFLOAT_TESTS = _RUN_HELPER + '''

def test_addition():
    assert _run(2, "+", 3) == "5"
    assert _run(-1, "+", 1) == "0"


def test_subtraction():
    assert _run(10, "-", 3) == "7"


def test_multiplication():
    assert _run(4, "*", 3) == "12"


def test_decimals():
    assert _run("1.5", "+", "1") == "2.5"
'''

WORDCOUNT_TESTS = _RUN_HELPER + '''

def test_counts_words():
    assert _run("-w", stdin="one two three\\n") == "3"


def test_counts_lines():
    assert _run("-l", stdin="a\\nb\\n") == "2"
'''


@dataclass(frozen=True)
class FixtureTask:
    """One extra offline task: what ``task.yaml``, ``tests.json`` and its branch hold."""

    instance_id: str
    repository: str
    commit: str
    language: str
    difficulty: str
    branch: str  # the test branch: tests/<branch>/ here, <branch>.tar.gz in the blob dir
    test_file: str  # under eval/tests/
    test_source: str
    tests: tuple[str, ...]  # tests.json names (``tests.<module>.<function>``)
    oracle_score: float  # what the real eval gives the oracle's bundled submission
    summary: str = ""

    def files(self) -> dict[str, bytes]:
        """The task folder's files (relative path -> bytes), as the package lays out a task."""
        yaml = (f"repository: {self.repository}\ncommit: {self.commit}\n"
                f"language: {self.language}\ndifficulty: {self.difficulty}\n")
        tests_json = {"branches": {self.branch: {
            "ignored": False, "ignore_reason": "", "tests": list(self.tests),
            "ignored_tests": []}}}
        return {
            "task.yaml": yaml.encode(),
            "tests.json": (json.dumps(tests_json, indent=2, sort_keys=True) + "\n").encode(),
            **self.branch_files(prefix=f"tests/{self.branch}/"),
        }

    def branch_files(self, prefix: str = "") -> dict[str, bytes]:
        """The test branch's files (``eval/run.sh``, ``eval/tests/<file>``)."""
        return {f"{prefix}eval/run.sh": RUN_SH.encode(),
                f"{prefix}eval/tests/{self.test_file}": self.test_source.encode()}


def _names(module: str, source: str) -> tuple[str, ...]:
    return tuple(f"tests.{module}.{line[4:].split('(')[0]}" for line in source.splitlines()
                 if line.startswith("def test_"))


EXTRA_TASKS: tuple[FixtureTask, ...] = (
    FixtureTask(
        instance_id="testorg__calcfloat.bcd2345", repository="testorg/calcfloat",
        commit="bcd2345678901bcdef2345678901bcdef234567", language="bash", difficulty="easy",
        branch="5f0c1e2d3a4b", test_file="test_calcfloat.py", test_source=CALCFLOAT_TESTS,
        tests=_names("test_calcfloat", CALCFLOAT_TESTS), oracle_score=0.75,
        summary="partial: 3 of 4 tests pass (no decimals)"),
    FixtureTask(
        instance_id="testorg__wordcount.cde3456", repository="testorg/wordcount",
        commit="cde3456789012cdef3456789012cdef345678901", language="bash", difficulty="easy",
        branch="7a8b9c0d1e2f", test_file="test_wordcount.py", test_source=WORDCOUNT_TESTS,
        tests=_names("test_wordcount", WORDCOUNT_TESTS), oracle_score=0.0,
        summary="failed: a calculator is no word counter"),
)

# What the oracle agent scores on each fixture task (the real `programbench eval`).
ORACLE_SCORES: dict[str, float] = {FIXTURE_ID: 1.0,
                                   **{t.instance_id: t.oracle_score for t in EXTRA_TASKS}}
FIXTURE_TASK_IDS: tuple[str, ...] = tuple(sorted(ORACLE_SCORES))
LOCK_TIMEOUT_S = 120.0


def tasks_fingerprint() -> str:
    """Changes whenever an extra task's files change."""
    digest = hashlib.sha256()
    for task in EXTRA_TASKS:
        for rel, data in sorted(task.files().items()):
            digest.update(f"{task.instance_id}/{rel}\0".encode() + data + b"\0")
    return digest.hexdigest()[:16]


class FixtureInstallError(RuntimeError):
    """The package's task folder cannot take the fixture tasks (e.g. read-only)."""


def _installed(folder: Path, files: dict[str, bytes]) -> bool:
    try:
        return all((folder / rel).read_bytes() == data for rel, data in files.items())
    except OSError:
        return False


STAGING_PREFIX = ".harness-fixture-"  # beside the task folder, same filesystem (a rename)


@contextlib.contextmanager
def _install_lock(tasks_dir: Path, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """An exclusive lock on the task folder itself (flock on its descriptor): installers in
    other processes wait, and no lock file is left behind."""
    fd = os.open(tasks_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    message = f"another installer held the lock for {timeout:.0f} s"
                    raise TimeoutError(message) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # releases the lock


def _leftovers(tasks_dir: Path) -> list[Path]:
    """Staging folders beside the task folder (this installer's, or a killed one's, or the
    ``.harness-fixture-staging`` of an older one): only the lock holder has a live one."""
    with contextlib.suppress(OSError):
        return [p for p in tasks_dir.parent.iterdir() if p.name.startswith(STAGING_PREFIX)]
    return []


def _remove_leftovers(tasks_dir: Path) -> None:
    """Under the install lock: no other installer is running, so every staging folder is
    stale."""
    for old in _leftovers(tasks_dir):
        shutil.rmtree(old, ignore_errors=True)


def install_fixture_tasks(tasks_dir: Path | None = None) -> list[str]:
    """Write every extra fixture task into the package's task folder (``TASKS_DIR``), where
    ``programbench eval``, ``programbench info`` and the runner's task list find them.

    Idempotent (cheap when they are there) and safe across processes (a lock on the task
    folder); a task is staged beside the folder and renamed into place, so no reader sees
    half a task, and the staging folder is removed. Returns the ids written now.
    """
    if tasks_dir is None:
        from benchmarks.programbench.tasks import tasks_dir as package_tasks_dir

        tasks_dir = package_tasks_dir()
    missing = [t for t in EXTRA_TASKS if not _installed(tasks_dir / t.instance_id, t.files())]
    if not missing:
        if _leftovers(tasks_dir):  # an older installer's (or a killed one's): best effort
            with contextlib.suppress(OSError), _install_lock(tasks_dir, timeout=0):
                _remove_leftovers(tasks_dir)
        return []
    written: list[str] = []
    try:
        with _install_lock(tasks_dir):
            _remove_leftovers(tasks_dir)
            staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=tasks_dir.parent))
            try:
                for task in missing:
                    target = tasks_dir / task.instance_id
                    if _installed(target, task.files()):
                        continue  # another process installed it meanwhile
                    tmp = staging / task.instance_id
                    for rel, data in task.files().items():
                        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                        (tmp / rel).write_bytes(data)
                        (tmp / rel).chmod(0o755 if rel.endswith(".sh") else 0o644)
                    with contextlib.suppress(FileNotFoundError):
                        target.rename(staging / f"{task.instance_id}.old")
                    tmp.rename(target)
                    written.append(task.instance_id)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    except OSError as exc:
        raise FixtureInstallError(
            f"cannot install the offline fixture tasks into {tasks_dir}: {exc}; run "
            f"`python3 -m benchmarks.programbench.fixture` as the user who installed programbench"
        ) from None
    _forget_task_list()  # they were missing when this process looked (maybe when it listed)
    return written


def _forget_task_list() -> None:
    """This process's cached task list predates the new tasks: load it again when asked."""
    from benchmarks.programbench import tasks

    tasks._load_cached.cache_clear()
