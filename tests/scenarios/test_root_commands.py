"""Scenario (issue 23 item 11): the mission's own commands, from the repository root, exactly
as written (no path, no ``--run-root``).

* ``pytest --dry-run`` dry-runs every benchmark that can be listed: ProgramBench's 200, and
  Cowork too once its checkout is given; without ``--cowork-root`` Cowork is named in one
  line with the flag, never a traceback.
* ``pytest benchmarks --dry-run`` does the same.
* ``pytest --resume-from RUN`` resumes RUN's own benchmark (a fixture run stays a fixture
  run without ``--pb-fixtures``; a ProgramBench run stays ProgramBench although Cowork is
  listable; a Cowork run without its checkout says which flag is missing). RUN here is
  outside the repository (``$BENCH_RUNS_ROOT``), so it is written ``--resume-from=RUN``:
  pytest looks for its configuration in the paths of the command line before any plugin
  has added ``--resume-from``, so the two-word form takes RUN for a path to collect and
  leaves the project's pyproject.toml unread; that form is refused in one line naming the
  fix, never collecting the whole project.
* The project's own tests still run by their path (``python3 -m pytest tests -n 2``, which
  is exactly what CI's ``.ci/run`` calls).

The commands run from the repository root (a fork of the tests' warm pytest server: ``python
-m pytest`` with the arguments as written, one test through the real ``pytest`` script). Run
roots go to ``$BENCH_RUNS_ROOT`` (a temporary folder) and pytest's cache and temporary folders
there too through ``$PYTEST_ADDOPTS``: nothing is written into the repository. Dry runs need
no Docker (``DOCKER_HOST`` points nowhere for them); the one real run is marked ``docker``.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.programbench import FIXTURE_ID
from tests.support.suite import FORK_SERVER, REPO_ROOT, pytest_result

COWORK_MINI = "tests/fixtures/cowork_mini"
_SCRATCH = itertools.count()


class RootRun:
    def __init__(self, rc: int, out: str, runs: Path, before: set[Path]) -> None:
        self.rc, self.out = rc, out
        self.roots = sorted(p for p in runs.iterdir() if p.is_dir() and p not in before
                            and (p / "run_manifest.json").exists())

    @property
    def result(self) -> pytest.RunResult:
        return pytest_result(self.rc, self.out)

    @property
    def root(self) -> Path:
        assert len(self.roots) == 1, (self.roots, self.out[-3000:])
        return self.roots[0]

    @property
    def manifest(self) -> dict[str, Any]:
        return json.loads((self.root / "run_manifest.json").read_text())


def root_env(runs: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}
    env["BENCH_RUNS_ROOT"] = str(runs)
    scratch = runs.parent / "pytest-scratch"
    env["PYTEST_ADDOPTS"] = (f"-o cache_dir={scratch / 'cache'} "
                             f"--basetemp={scratch / f'basetemp-{next(_SCRATCH)}'}")
    return env


def from_root(runs: Path, *args: str, timeout: float = 600) -> RootRun:
    """``pytest ARGS`` run in the repository root."""
    runs.mkdir(parents=True, exist_ok=True)
    before = set(runs.iterdir())
    done = FORK_SERVER.run(list(args), REPO_ROOT, root_env(runs), timeout)
    return RootRun(done.returncode, done.output, runs, before)


def by_benchmark(manifest: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for key in manifest["selection"]["instance_ids"]:
        name = key.split("/", 1)[0]
        counts[name] = counts.get(name, 0) + 1
    return counts


def assert_clean(run: RootRun) -> None:
    run.result.stdout.no_fnmatch_line("*Traceback*")
    run.result.stdout.no_fnmatch_line("INTERNALERROR*")


def cowork_line(out: str) -> list[str]:
    return [line for line in out.splitlines() if "cowork" in line.lower()
            and "--cowork-root" in line]


@pytest.fixture(autouse=True)
def _no_run_root_in_the_repository() -> Any:
    """The commands' run roots go to $BENCH_RUNS_ROOT, never into the repository."""
    def state() -> set[str]:
        folder = REPO_ROOT / "bench_runs"
        return set(os.listdir(folder)) if folder.is_dir() else set()
    before = state()
    yield
    assert state() <= before


def test_pytest_dry_run_lists_programbench_and_names_the_cowork_flag(tmp_path: Path) -> None:
    run = from_root(tmp_path / "runs", "--dry-run")
    assert run.rc == 0, run.out[-4000:]
    assert_clean(run)
    m = run.manifest
    assert m["benchmarks"] == ["programbench"] and m["dry_run"]
    assert by_benchmark(m) == {"programbench": 200}
    assert m["subset_notice"] is None
    assert not any(k.split("/", 1)[1].startswith("testorg__")
                   for k in m["selection"]["instance_ids"])
    assert len(cowork_line(run.out)) == 1, run.out[-4000:]
    assert (run.root / "programbench").is_dir()  # the 200 task bodies were prepared


def test_pytest_dry_run_with_the_cowork_checkout_lists_both(tmp_path: Path) -> None:
    run = from_root(tmp_path / "runs", "--dry-run", "--cowork-root", COWORK_MINI)
    assert run.rc == 0, run.out[-4000:]
    assert_clean(run)
    m = run.manifest
    assert m["benchmarks"] == ["cowork_bench", "programbench"]
    counts = by_benchmark(m)
    assert counts["programbench"] == 200 and counts["cowork_bench"] >= 1
    assert cowork_line(run.out) == []


def test_pytest_benchmarks_dry_run(tmp_path: Path) -> None:
    run = from_root(tmp_path / "runs", "benchmarks", "--dry-run")
    assert run.rc == 0, run.out[-4000:]
    assert_clean(run)
    assert by_benchmark(run.manifest) == {"programbench": 200}
    assert len(cowork_line(run.out)) == 1
    both = from_root(tmp_path / "runs", "benchmarks", "--dry-run", "--cowork-root", COWORK_MINI)
    assert both.rc == 0, both.out[-4000:]
    assert set(by_benchmark(both.manifest)) == {"cowork_bench", "programbench"}


def test_the_pytest_script_itself_from_the_root(tmp_path: Path) -> None:
    """The same command through the installed ``pytest`` script, not ``python -m``."""
    script = shutil.which("pytest") or pytest.skip("no pytest script on PATH")
    runs = tmp_path / "runs"
    runs.mkdir()
    done = subprocess.run([script, "--dry-run", "-k", "cmatrix"], cwd=REPO_ROOT,
                          env=root_env(runs), capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    run = RootRun(done.returncode, out, runs, set())
    assert run.manifest["selection"]["instance_ids"] == [
        "programbench/abishekvashok__cmatrix.5c082c6"]


def test_pytest_resume_from_resumes_the_runs_own_benchmark(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    first = from_root(runs, "benchmarks/programbench", "--dry-run", "-k", "zoxide or cmatrix")
    assert first.rc == 0, first.out[-3000:]
    # Cowork is listable here, yet the resume is of the ProgramBench run only.
    again = from_root(runs, f"--resume-from={first.root}", "--dry-run",
                      "--cowork-root", COWORK_MINI)
    assert again.rc == 0, again.out[-4000:]
    assert_clean(again)
    m = again.manifest
    assert m["benchmarks"] == ["programbench"]
    assert m["resume"]["ancestors"] == [str(first.root)]
    assert m["selection"]["source"] == "ancestor"
    assert sorted(m["selection"]["instance_ids"]) == sorted(
        first.manifest["selection"]["instance_ids"])


def test_pytest_resume_from_a_cowork_run(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    first = from_root(runs, "benchmarks/cowork_bench", "--cowork-root", COWORK_MINI,
                      "--dry-run")
    assert first.rc == 0, first.out[-3000:]
    missing = from_root(runs, f"--resume-from={first.root}", "--dry-run")
    assert missing.rc == 2, missing.out[-3000:]
    assert_clean(missing)
    assert missing.roots == []
    missing.result.stdout.fnmatch_lines([f"*--resume-from {first.root} ran cowork_bench*"])
    assert len(cowork_line(missing.out)) == 1  # the flag to add
    again = from_root(runs, f"--resume-from={first.root}", "--dry-run",
                      "--cowork-root", COWORK_MINI)
    assert again.rc == 0, again.out[-4000:]
    assert again.manifest["benchmarks"] == ["cowork_bench"]
    assert by_benchmark(again.manifest) == by_benchmark(first.manifest)


def test_a_run_outside_the_project_in_two_words_is_refused_naming_the_fix(
        tmp_path: Path) -> None:
    """``pytest --resume-from /elsewhere/RUN`` (and any option whose value is a path outside
    the project) would make pytest collect the whole project with no configuration: refused,
    exit 2, one line naming ``--resume-from=RUN``; nothing is written."""
    runs = tmp_path / "runs"
    first = from_root(runs, "benchmarks/programbench", "--dry-run", "-k", "cmatrix")
    assert first.rc == 0, first.out[-3000:]
    refused = from_root(runs, "--resume-from", str(first.root), "--dry-run")
    assert refused.rc == 2, refused.out[-3000:]
    assert_clean(refused)
    refused.result.stdout.fnmatch_lines([f"*write --resume-from={first.root} as one word*"])
    refused.result.stdout.no_fnmatch_line("*tests/*")
    assert refused.roots == []
    listed = tmp_path / "gate.txt"
    listed.write_text("abishekvashok__cmatrix.5c082c6\n")
    refused = from_root(runs, "--dry-run", "--task-file", str(listed))
    assert refused.rc == 2, refused.out[-3000:]
    refused.result.stdout.fnmatch_lines([f"*write --task-file={listed}*"])
    ok = from_root(runs, "--dry-run", f"--task-file={listed}")
    assert ok.rc == 0, ok.out[-3000:]
    assert ok.manifest["selection"]["instance_ids"] == [
        "programbench/abishekvashok__cmatrix.5c082c6"]


def test_the_printed_resume_command_works_from_the_root(tmp_path: Path) -> None:
    """The resume command a run prints (and records) runs as printed from the root, even
    with the run root outside the project."""
    runs = tmp_path / "runs"
    first = from_root(runs, "--dry-run", "-k", "cmatrix or zoxide")
    assert first.rc == 0, first.out[-3000:]
    command = shlex.split(first.manifest["resume_command"])
    assert command[0] == "pytest" and command[-1] == f"--resume-from={first.root}"
    again = from_root(runs, *command[1:])
    assert again.rc == 0, again.out[-3000:]
    assert again.manifest["resume"]["ancestors"] == [str(first.root)]
    assert again.manifest["selection"]["count"] == 2


def test_the_projects_tests_run_by_their_path(tmp_path: Path) -> None:
    """``pytest`` from the root no longer collects the project's tests (``testpaths`` is
    ``benchmarks``); ``python3 -m pytest tests`` does, with the project's conftest and
    ``addopts`` (``--ignore=tests/perf``), and CI calls exactly the README's command."""
    runs = tmp_path / "runs"
    listed = from_root(runs, "--collect-only", "-q")
    assert listed.rc == 0, listed.out[-3000:]
    listed.result.stdout.fnmatch_lines(["benchmarks/programbench/test_programbench.py::*"])
    listed.result.stdout.no_re_match_line(rf".*tests/(?!{re.escape(COWORK_MINI[len('tests/'):])})")
    tests = from_root(runs, "tests", "--collect-only", "-q", "-m", "not docker")
    assert tests.rc == 0, tests.out[-3000:]
    tests.result.stdout.fnmatch_lines(["tests/scenarios/test_root_commands.py::*"])
    tests.result.stdout.no_fnmatch_line("*tests/perf/*")
    tests.result.stdout.no_fnmatch_line("*benchmarks/programbench/test_programbench.py::*")
    readme = (REPO_ROOT / "README.md").read_text()
    command = readme.split("Run the tests:\n\n```bash\n", 1)[1].split("\n", 1)[0]
    assert command.startswith("python3 -m pytest tests -n ")
    ci = (REPO_ROOT / ".ci" / "run").read_text().splitlines()
    assert command in ci  # CI runs exactly the README's test command


@pytest.mark.docker
def test_pytest_resume_from_a_fixture_run_keeps_the_fixture_tasks(tmp_path: Path) -> None:
    """The README's first command, then ``pytest --resume-from RUN`` from the root with the
    run's configuration (``--agent oracle``: a resume repeats it, as the specification's
    recovery does): the resume is of the fixture task although ``--pb-fixtures`` is not
    repeated, carried, nothing run."""
    runs = tmp_path / "runs"
    first = from_root(runs, "benchmarks/programbench", "--pb-fixtures", "-k", "calculator",
                      "--agent", "oracle")
    assert first.rc == 0, first.out[-4000:]
    rows = [json.loads(line) for line in (first.root / "result_index.jsonl").read_text()
            .splitlines()]
    assert [r["instance_id"] for r in rows] == [FIXTURE_ID] and rows[0]["score"] == 1.0
    again = from_root(runs, f"--resume-from={first.root}", "--agent", "oracle")
    assert again.rc == 0, again.out[-4000:]
    m = again.manifest
    assert m["benchmarks"] == ["programbench"]
    assert m["config"]["programbench.fixtures"] is True
    assert m["selection"]["instance_ids"] == [f"programbench/{FIXTURE_ID}"]
    assert m["resume"]["carried"] == 1 and m["resume"]["to_run"] == 0
    assert m["outcome"] == "nothing_remaining"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
