"""``harness report`` / ``harness compare`` as a user runs them: exit codes and messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from reports.cli import compare_command, report_command
from reports.figures import CompareReport


def test_report_writes_and_then_refuses_to_overwrite(programbench_run: Path, capsys) -> None:
    assert report_command([str(programbench_run)]) == 0
    assert "report.html" in capsys.readouterr().out
    html = (programbench_run / "report" / "report.html").read_bytes()

    assert report_command([str(programbench_run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert str(programbench_run / "report" / "report.html") in err[0]
    assert "--force" in err[0]
    assert (programbench_run / "report" / "report.html").read_bytes() == html

    assert report_command([str(programbench_run), "--force"]) == 0


def test_report_on_a_corrupt_ledger_names_the_line(make_run, make_row, capsys) -> None:
    root = make_run("corrupt", [make_row("pb/a"), make_row("pb/b"), make_row("pb/c")])
    ledger = root / "result_index.jsonl"
    lines = ledger.read_text().splitlines(keepends=True)
    ledger.write_text(lines[0] + lines[1][:40] + "\n" + lines[2])
    assert report_command([str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert "line 2" in err and str(ledger) in err
    assert not (root / "report").exists()


def test_report_on_a_directory_that_is_not_a_run(tmp_path: Path, capsys) -> None:
    assert report_command([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "not a run root" in err and str(tmp_path) in err
    assert list(tmp_path.iterdir()) == []


def test_report_usage_error_exits_2(capsys) -> None:
    assert report_command([]) == 2
    assert report_command(["x", "--resamples", "0"]) == 2


def test_compare_prints_a_table_and_writes_json(make_run, make_row, tmp_path: Path, capsys) -> None:
    a = make_run("a", [make_row("pb/x", "run-a", score=0.0), make_row("pb/y", "run-a", score=1.0)])
    b = make_run("b", [make_row("pb/x", "run-b", score=1.0), make_row("pb/y", "run-b", score=1.0)])
    out = tmp_path / "cmp.json"
    assert compare_command([str(a), str(b), "--json", str(out), "--resamples", "200"]) == 0
    text = capsys.readouterr().out
    assert "run-a (A) → run-b (B)" in text
    assert "pb/x" in text and "gained" in text
    assert "+0.500" in text  # mean difference B-A
    report = CompareReport.model_validate_json(out.read_bytes())
    assert report.shared == 2 and report.mcnemar.c == 1

    before = out.read_bytes()
    assert compare_command([str(a), str(b), "--json", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert out.read_bytes() == before


def test_compare_warns_about_infra_failures(make_run, make_row, capsys) -> None:
    from harness.core.models import Outcome

    a = make_run(
        "a",
        [
            make_row(
                "pb/x", "run-a", status="infra_failed", outcome=Outcome.INFRA_FAILED, infra=True
            )
        ],
    )
    b = make_run("b", [make_row("pb/x", "run-b", score=1.0)])
    assert compare_command([str(a), str(b), "--resamples", "50"]) == 0
    assert "run A has 1 infra_failed" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("which", ["a", "b"])
def test_compare_with_a_bad_run_exits_2(make_run, make_row, tmp_path, which, capsys) -> None:
    good = make_run("good", [make_row("pb/x")])
    bad = tmp_path / "missing"
    argv = [str(bad), str(good)] if which == "a" else [str(good), str(bad)]
    assert compare_command(argv) == 2
    assert str(bad) in capsys.readouterr().err
