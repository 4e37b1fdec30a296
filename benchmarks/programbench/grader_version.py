"""Which ``programbench`` versions score correctly (issue 45: the grader drifts).

``pytest-rerunfailures`` 16.6.1 (2026-09-03) writes an extra ``<testcase/>`` per rerun,
which the eval reads as a pass: a test failing after 2 reruns scores 2/3 instead of 0/1
(upstream ProgramBench issue 64). ``programbench`` 1.2.5 pins the older plugin; every
earlier version, run after that date, can inflate a score. A run under such a version is
not reportable; a paid run under it is refused at admission unless waived
(``--pb-allow-grader-version``, recorded with the reason).

Every eval's JUnit records are also checked whatever the version
(:func:`benchmarks.programbench.official_eval.check_unique_records`).
"""

from __future__ import annotations

from pydantic import BaseModel

SCORES_CORRECTLY_FROM = "1.2.5"
SECTION = "programbench_grader"  # the manifest's extra section


class GraderRecord(BaseModel):
    """``extra.programbench_grader``: the version that scores the run, and its standing."""

    version: str
    scores_correctly: bool
    waived: bool = False  # run anyway under --pb-allow-grader-version
WAIVER = "--pb-allow-grader-version"


def grader_problem(version: str) -> str | None:
    """Why scores from ``programbench`` ``version`` cannot be published (None: they can;
    a pre-release of 1.2.5 cannot, nor a version that does not parse)."""
    from packaging.version import InvalidVersion, Version

    try:
        if Version(version) >= Version(SCORES_CORRECTLY_FROM):
            return None
    except InvalidVersion:
        pass
    return (f"programbench {version} can score a rerun test as passed (pytest-rerunfailures "
            f"16.6.1 writes a record per rerun; upstream ProgramBench issue 64): install "
            f"programbench>={SCORES_CORRECTLY_FROM}")


def scoring_version() -> str:
    """The ``programbench`` version that scores this run: the one ``$PROGRAMBENCH_PYTHON``
    runs when that is set (the official CLI's interpreter), else the installed one."""
    import os
    import shutil
    import subprocess

    from benchmarks.programbench import programbench_version

    other = os.environ.get("PROGRAMBENCH_PYTHON", "").strip()
    path = shutil.which(other) if other else None
    if path is None:  # unset, or not executable: the CLI's own refusal names that
        return programbench_version()
    probe = "import importlib.metadata as m; print(m.version('programbench'))"
    try:
        done = subprocess.run([path, "-c", probe], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({other}: {type(exc).__name__})"
    lines = done.stdout.strip().splitlines()
    return lines[-1] if done.returncode == 0 and lines else f"unknown ({other} has no programbench)"
