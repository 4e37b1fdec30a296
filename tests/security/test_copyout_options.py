"""The copy-out caps are options with documented defaults; a bad value is a usage error."""

from __future__ import annotations

from pathlib import Path

from tests.support.suite import run_pytest


def test_copy_out_caps_are_documented_and_validated(tmp_path: Path) -> None:
    helped = run_pytest("benchmarks/programbench", tmp_path / "help", "--help")
    assert helped.rc == 0, helped.out
    text = " ".join(helped.out.split())
    assert "--max-copy-out-mb=MB" in text and "(default 1024)" in text
    assert "--max-copy-out-files=N" in text and "(default 100000)" in text
    bad = run_pytest("benchmarks/programbench", tmp_path / "bad", "--max-copy-out-mb", "0",
                     "--dry-run")
    assert bad.rc == 4, bad.out
    bad.result.stdout.fnmatch_lines(["*--max-copy-out-mb: '0' is not a positive integer*"])
