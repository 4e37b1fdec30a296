"""Issue 23 item 11 (Cowork's part): without ``--cowork-root`` a run over a wider folder
(``pytest benchmarks``) lists ProgramBench and says in one line that Cowork is not listed
and which flag lists it: no traceback, no failed run. Naming Cowork's folder without the
flag stays a one-line refusal (exit 2). Real ``pytest`` sessions in subprocesses, dry runs
(no Docker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.suite import run_pytest

LINE = "cowork_bench: not listed: pass --cowork-root PATH (a Cowork Bench checkout"


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["single", "n2"])
def test_a_wider_dry_run_without_the_checkout_names_cowork_in_one_line(
        tmp_path: Path, workers: tuple[str, ...]) -> None:
    run = run_pytest("benchmarks", tmp_path / "dry", "--dry-run", *workers)
    assert run.rc == 0, run.out
    assert run.out.count(LINE) == 1, run.out[-3000:]
    run.result.stdout.no_fnmatch_line("*Traceback*")
    run.result.stdout.no_fnmatch_line("*ERROR*")
    assert run.manifest["benchmarks"] == ["programbench"]
    assert run.manifest["outcome"] == "dry_run" and run.manifest["selection"]["count"] > 0
    assert {row["benchmark"] for row in run.rows} == {"programbench"}


def test_naming_cowork_without_the_checkout_is_a_one_line_refusal(tmp_path: Path) -> None:
    run = run_pytest("benchmarks/cowork_bench", tmp_path / "named", "--dry-run")
    assert run.rc == 2, run.out
    run.result.stdout.fnmatch_lines(["*--cowork-root PATH is required: point it at a Cowork Bench checkout*"])
    run.result.stdout.no_fnmatch_line("*Traceback*")
    run.result.stdout.no_fnmatch_line(f"*{LINE}*")
