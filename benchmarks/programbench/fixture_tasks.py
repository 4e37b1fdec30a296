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
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

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


def install_fixture_tasks(tasks_dir: Path | None = None) -> list[str]:
    """Write every extra fixture task into the package's task folder (``TASKS_DIR``), where
    ``programbench eval``, ``programbench info`` and the runner's task list find them.

    Idempotent and safe across processes (a file lock); a task is staged beside the folder
    and renamed into place, so no reader sees half a task. Returns the ids written now.
    """
    if tasks_dir is None:
        from benchmarks.programbench.tasks import tasks_dir as package_tasks_dir

        tasks_dir = package_tasks_dir()
    missing = [t for t in EXTRA_TASKS if not _installed(tasks_dir / t.instance_id, t.files())]
    if not missing:
        return []
    staging = tasks_dir.parent / ".harness-fixture-staging"
    try:
        staging.mkdir(exist_ok=True)
        written: list[str] = []
        with FileLock(str(staging / "install.lock")).acquire(timeout=LOCK_TIMEOUT_S):
            for task in missing:
                target = tasks_dir / task.instance_id
                if _installed(target, task.files()):
                    continue  # another process installed it meanwhile
                tmp = staging / f"{task.instance_id}.{os.getpid()}"
                shutil.rmtree(tmp, ignore_errors=True)
                for rel, data in task.files().items():
                    (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                    (tmp / rel).write_bytes(data)
                    (tmp / rel).chmod(0o755 if rel.endswith(".sh") else 0o644)
                old = staging / f"{task.instance_id}.old.{os.getpid()}"
                with contextlib.suppress(FileNotFoundError):
                    target.rename(old)
                tmp.rename(target)
                shutil.rmtree(old, ignore_errors=True)
                written.append(task.instance_id)
    except OSError as exc:
        raise FixtureInstallError(
            f"cannot install the offline fixture tasks into {tasks_dir}: {exc}; run "
            f"`python3 -m benchmarks.programbench.fixture` as the user who installed programbench"
        ) from None
    _forget_task_list()
    return written


def _forget_task_list() -> None:
    """This process's cached task list predates the new tasks: load it again when asked."""
    from benchmarks.programbench import tasks

    tasks._load_cached.cache_clear()
