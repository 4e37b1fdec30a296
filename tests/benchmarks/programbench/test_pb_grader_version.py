"""Issue 45: a ``programbench`` that can inflate scores (before 1.2.5: pytest-rerunfailures
16.6.1 writes a record per rerun, upstream issue 64) never scores a reportable run. A paid
run under it is refused before anything starts, unless waived; an unpaid one runs and is
not reportable, the reason on record. The older version is real metadata on the official
CLI's interpreter path (``$PROGRAMBENCH_PYTHON``), as a second install would give."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.programbench import FIXTURE_ID
from benchmarks.programbench.grader_version import grader_problem
from tests.support.suite import FORK_SERVER, REPO_ROOT, run_env

OLD = Path(__file__).resolve().parents[2] / "data" / "programbench_1_2_4"


def pytest_run(root: Path, *args: str, old: bool) -> subprocess.CompletedProcess[str]:
    env = run_env()
    if old:  # the CLI's interpreter sees programbench 1.2.4
        env |= {"PROGRAMBENCH_PYTHON": sys.executable, "PYTHONPATH": str(OLD)}
    argv = ["-p", "no:cacheprovider", "benchmarks/programbench", "-q", "--pb-fixtures",
            "-k", "calculator", "--run-root", str(root), *args]
    done = FORK_SERVER.run(argv, REPO_ROOT, env, 300)
    return subprocess.CompletedProcess(argv, done.returncode, done.output, "")


def manifest(root: Path) -> dict:
    return json.loads((root / "run_manifest.json").read_text())


@pytest.mark.parametrize(("version", "scores"), [
    ("1.2.5", True), ("1.3.0", True), ("1.2.5.post1", True), ("2.0", True),
    ("1.2.4", False), ("1.0.2", False), ("1.2.5rc1", False), ("not-a-version", False)])
def test_which_versions_score_correctly(version: str, scores: bool) -> None:
    problem = grader_problem(version)
    assert (problem is None) is scores
    if problem is not None:
        assert problem.startswith(f"programbench {version} can score a rerun test as passed")
        assert "install programbench>=1.2.5" in problem


def test_a_paid_run_under_an_old_grader_is_refused_before_anything_starts(
        tmp_path: Path) -> None:
    root = tmp_path / "paid"
    out = pytest_run(root, "--agent", "command", "--agent-command", "true", old=True)
    text = out.stdout
    assert out.returncode == 2, text[-3000:]
    line = next(x for x in text.splitlines() if "programbench 1.2.4 can score" in x)
    assert "install programbench>=1.2.5" in line and "--pb-allow-grader-version" in line
    m = manifest(root)
    assert m["refusal"]["reason"] == "grader_version"
    assert m["extra"]["programbench_grader"] == {"version": "1.2.4", "scores_correctly": False,
                                                 "waived": False}
    assert (root / "result_index.jsonl").read_text() == ""  # no instance ran


@pytest.mark.docker  # a paid run's admission asks the engine (engine_unreachable)
def test_the_waiver_admits_a_paid_run_that_is_then_not_reportable(tmp_path: Path) -> None:
    root = tmp_path / "waived"
    out = pytest_run(root, "--agent", "command", "--agent-command", "true",
                     "--pb-allow-grader-version", "-k", "nothing_is_named_so", old=True)
    m = manifest(root)
    assert m["refusal"] is None or m["refusal"]["reason"] != "grader_version", out.stdout[-2000:]
    assert m["outcome"] == "empty_selection"  # admitted: the selection was empty on purpose
    assert m["extra"]["programbench_grader"]["waived"] is True
    assert any("programbench 1.2.4 can score" in r and r.endswith(
        "(waived: --pb-allow-grader-version)") for r in m["not_reportable"])


def test_an_unpaid_run_under_an_old_grader_is_not_reportable(tmp_path: Path) -> None:
    root = tmp_path / "dry"
    out = pytest_run(root, "--agent", "gateway", "--dry-run", old=True)
    assert out.returncode == 0, out.stdout[-3000:]
    m = manifest(root)
    assert m["reportable"] is False
    assert any(r.startswith("programbench 1.2.4 can score a rerun test as passed")
               for r in m["not_reportable"])
    assert m["extra"]["programbench_grader"]["scores_correctly"] is False


def test_the_installed_grader_is_on_record(tmp_path: Path) -> None:
    root = tmp_path / "now"
    out = pytest_run(root, "--agent", "gateway", "--dry-run", old=False)
    assert out.returncode == 0, out.stdout[-3000:]
    m = manifest(root)
    grader = m["extra"]["programbench_grader"]
    assert grader["scores_correctly"] is True and grader["version"] == m[
        "benchmark_versions"]["programbench"].removeprefix("programbench==")
    assert not [r for r in m["not_reportable"] if "can score a rerun" in r]
    assert FIXTURE_ID in json.dumps(m["selection"])
