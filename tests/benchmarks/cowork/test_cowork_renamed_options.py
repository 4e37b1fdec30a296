"""Issue 42: every Cowork option carries the ``--cowork-`` prefix. An old spelling (a run's
``--allow-dirty-bench``, ``--build-image``, ..., or ``harness cowork qualify --build-image``)
is never read as something else, nor silently dropped: one line naming the new flag, exit
2, no run root. Real sessions in subprocesses, dry runs (no Docker)."""

from __future__ import annotations

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
