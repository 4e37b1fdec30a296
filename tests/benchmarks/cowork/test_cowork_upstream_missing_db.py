"""A checkout without ``db/`` (upstream's sparse checkout, issue 26): by default each
instance is ``infra_failed`` ``pg_fail`` naming the missing dump, before any container; with
``--cowork-allow-missing-db`` the database starts empty, a file-only task is checked as usual, the
row names the missing dump and the run is not reportable."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.benchmarks.cowork.cowork_helpers import FIXTURE
from tests.support.suite import run_pytest

IID = "excel-sales-summary"  # file only: its preprocess and checker never use the database


def checkout_without_db(dest: Path) -> Path:
    shutil.copytree(FIXTURE, dest, ignore=shutil.ignore_patterns(".ruff_cache", "__pycache__"))
    shutil.rmtree(dest / "db")
    git = ["git", "-C", str(dest), "-c", "user.email=t@example.org", "-c", "user.name=t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "no db"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    return dest


@pytest.mark.slow
@pytest.mark.docker
def test_a_checkout_without_db_needs_allow_missing_db(tmp_path: Path) -> None:
    root = checkout_without_db(tmp_path / "bench")
    base = ["--cowork-root", str(root), "--cowork-allow-bench-commit-mismatch", "--instance", IID,
            "--agent", "oracle"]  # fmt: skip
    refused = run_pytest("benchmarks/cowork_bench", tmp_path / "refused", *base, timeout=600)
    row = refused.latest[IID]
    assert (row["status"], row["reason_code"]) == ("infra_failed", "pg_fail"), refused.out
    allowed = run_pytest("benchmarks/cowork_bench", tmp_path / "allowed", *base,
                         "--cowork-allow-missing-db", timeout=600)  # fmt: skip
    row = allowed.latest[IID]
    assert (row["status"], row["resolved"]) == ("passed", True), allowed.out[-2000:]
    assert row["details"]["cowork_bench"]["pg_seed_missing"] == str(root / "db" / "init.sql.gz")
    extra = allowed.manifest["extra"]
    assert extra["cowork"]["applied_config"]["allow_missing_db"] is True
    assert any("--cowork-allow-missing-db" in r for r in extra["not_reportable_by_benchmark"]["cowork_bench"])
