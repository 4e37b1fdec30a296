"""Issue 42: every Cowork option carries the ``--cowork-`` prefix. An old spelling (a run's
``--allow-dirty-bench``, ``--build-image``, ..., or ``harness cowork qualify --build-image``)
is never read as something else, nor silently dropped: one line naming the new flag, exit
2, no run root. Real sessions in subprocesses, dry runs (no Docker)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.benchmarks.cowork.cowork_helpers import FIXTURE
from tests.benchmarks.cowork.cowork_run_support import TARGET
from tests.support.suite import REPO_ROOT, run_pytest


def test_an_unprefixed_cowork_option_is_refused_naming_the_new_one(tmp_path: Path) -> None:
    """Issue 42: every Cowork option carries ``--cowork-``; an old spelling is one line
    naming the new flag, exit 2, no run root. The new spellings are read (the waivers let
    the fixture's dirty, unpinned checkout through a dry run)."""
    for old in ("--allow-dirty-bench", "--allow-bench-commit-mismatch",
                "--diagnostic-eval-on-truncation", "--allow-missing-tools",
                "--allow-missing-db", "--build-image"):  # fmt: skip
        new = "--cowork-" + old[2:]
        root = tmp_path / old.strip("-")
        run = run_pytest(TARGET, root, "--cowork-root", str(FIXTURE), old, "--dry-run")
        assert run.rc == 2, run.out
        assert f"{old}: renamed {new}; write {new}" in run.out and "Traceback" not in run.out
        assert not root.exists()
    fresh = run_pytest(TARGET, tmp_path / "new", "--cowork-root", str(FIXTURE),
                     "--cowork-allow-dirty-bench", "--cowork-allow-bench-commit-mismatch",
                     "--cowork-allow-missing-tools", "--cowork-diagnostic-eval-on-truncation",
                     "--instance", "excel-sales-summary", "--dry-run")  # fmt: skip
    assert fresh.rc == 0, fresh.out
    applied = fresh.manifest["extra"]["cowork"]
    assert applied["bench_gate"]["allow_dirty_bench"] is True
    assert applied["bench_gate"]["allow_bench_commit_mismatch"] is True
    qualify = subprocess.run(
        [sys.executable, "-m", "harness.cli", "cowork", "qualify", "--cowork-root", str(FIXTURE),
         "--build-image", "--task", "excel-sales-summary"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert qualify.returncode == 2, qualify.stderr
    assert "--build-image: renamed --cowork-build-image; write --cowork-build-image" in (
        qualify.stderr
    )


def test_a_bad_cowork_number_is_a_usage_error_of_one_line(tmp_path: Path) -> None:
    """Cowork's numbers and sizes are checked where they are parsed (their ``type=``): a bad
    value is a usage error (exit 4) naming the flag and an example, before any run root;
    a good one reaches the run's applied configuration."""
    for flag, value, said in (
            ("--cowork-task-timeout", "soon", "'soon' is not a positive number; pass e.g. "
                                              "--cowork-task-timeout 1800"),
            ("--cowork-max-steps", "0", "'0' is not a whole number of at least 1"),
            ("--cowork-cpus", "-1", "'-1' is not a positive number"),
            ("--cowork-memory", "lots", "'lots' is not a size; pass e.g. --cowork-memory 2g"),
            ("--cowork-pids", "1.5", "'1.5' is not a whole number of at least 1")):
        root = tmp_path / flag.strip("-")
        run = run_pytest(TARGET, root, "--cowork-root", str(FIXTURE), flag, value,
                         "--dry-run")
        assert run.rc == 4, run.out
        assert f"argument {flag}: {said}" in run.out and "Traceback" not in run.out
        assert not root.exists()
    good = run_pytest(TARGET, tmp_path / "good", "--cowork-root", str(FIXTURE),
                      "--cowork-allow-dirty-bench", "--cowork-allow-bench-commit-mismatch",
                      "--cowork-task-timeout", "900", "--cowork-memory", "3G",
                      "--instance", "excel-sales-summary", "--dry-run")  # fmt: skip
    assert good.rc == 0, good.out
    config = json.dumps(good.manifest)
    assert '"task_timeout_sec": 900.0' in config and '"memory": "3g"' in config
