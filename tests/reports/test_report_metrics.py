"""Headline figures: the selection is the denominator, the last row wins, infra is apart."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from harness.core.models import Outcome, TaskRow
from reports.build import build_figures
from reports.errors import ReportInputError
from reports.metrics import headline, result_from_row
from reports.run import load_run

MakeRow = Callable[..., TaskRow]


def test_programbench_headline(programbench_run: Path) -> None:
    figures = build_figures(load_run(programbench_run))
    head = figures.headline
    # 8 ledger lines, 7 instances with a row, 9 selected: the denominator is 9.
    assert head.selected == 9
    assert head.attempted == 7
    assert head.not_attempted == 2
    assert head.infra_failed == 1  # vim; tmux's infra failure was retried and scored
    assert head.carried == 1
    # scores: 1.0 + 0.97 + 0.5 + 0 (agent failed) + 0.25 + 0 (infra) + 0.8 (carried) + 0 + 0
    assert head.raw.mean_score == pytest.approx(3.52 / 9)
    # beside it, over the 6 units with a verdict: the infra failure and the 2 units without
    # a row are left out, by reason (issue 45)
    assert head.with_verdict.denominator == 6
    assert head.with_verdict.mean_score == pytest.approx(3.52 / 6)
    assert head.excluded_reasons["not_attempted"] == 2 and sum(head.excluded_reasons.values()) == 3
    assert (head.raw.resolved, head.raw.near_resolved) == (1, 2)
    assert head.raw.resolved_rate == pytest.approx(1 / 9)
    assert head.with_verdict.near_resolved_rate == pytest.approx(2 / 6)
    assert head.counts == {
        "completed": 5,
        "not_attempted": 2,
        "failed": 1,
        "infra_failed": 1,
    }
    assert head.outcome_counts["carried_forward"] == 1
    assert not head.binary


def test_costs_split_known_unknown_and_carried(programbench_run: Path) -> None:
    cost = build_figures(load_run(programbench_run)).headline.cost
    assert cost.known_usd == pytest.approx(4.5)  # 1.25 + 2.5 + 0.75, carried 3.0 kept apart
    assert cost.known_rows == 3
    assert cost.unknown_rows == 3  # fd, tmux, vim
    assert cost.carried_usd == pytest.approx(3.0)


def test_durations_ignore_carried_and_missing(programbench_run: Path) -> None:
    dur = build_figures(load_run(programbench_run)).headline.duration
    # fd 3600, cmatrix 1800, kilo 2400, jq 900, tmux 1200 (retry), vim 3; not redis (carried)
    assert dur.count == 6
    assert dur.max_s == 3600
    assert dur.median_s == pytest.approx((1200 + 1800) / 2)
    assert dur.total_s == pytest.approx(9903)


def test_last_row_wins_and_retry_counts_once(programbench_run: Path) -> None:
    run = load_run(programbench_run)
    tmux = run.by_key["programbench/tmux__tmux.abc1234"]
    assert (tmux.status, tmux.score, tmux.infra, tmux.attempt) == ("completed", 0.25, False, 2)


def test_carried_row_stands_for_the_ancestor_verdict(make_run, make_row: MakeRow) -> None:
    carried = make_row(
        "programbench/a",
        status="skipped",
        outcome=Outcome.CARRIED,
        score=1.0,
        resolved=True,
        carried_from="run-0",
        details={"carried_status": "completed"},
    )
    run = load_run(make_run("resumed", [carried, make_row("programbench/b", score=0.0)]))
    result = run.by_key["programbench/a"]
    assert (result.status, result.resolved, result.carried_from) == ("completed", True, "run-0")
    assert headline(run.results, run.selected).raw.resolved == 1


def test_cowork_pass_fail_rows_give_pass_at_1(make_run, make_row: MakeRow) -> None:
    k = "cowork_bench/"
    rows = [
        # The verdict is the row's ``resolved`` (the adapter's), never the word "passed".
        make_row(k + "t1", status="passed", score=None, resolved=True),
        make_row(k + "t2", status="passed", score=1.0, resolved=True),
        make_row(k + "t3", status="failed", score=0.0, resolved=False),
        make_row(k + "t4", status="agent_failed", outcome=Outcome.AGENT_FAILED),
        make_row(k + "t5", status="infra_failed", outcome=Outcome.INFRA_FAILED, infra=True),
    ]
    keys = [r.key for r in rows] + [k + "t6"]
    head = build_figures(load_run(make_run("cowork", rows, keys))).headline
    assert head.binary
    assert head.raw.pass_at_1 == pytest.approx(2 / 6)
    assert head.with_verdict.pass_at_1 == pytest.approx(2 / 4)  # t5 infra, t6 without a row
    assert head.raw.mean_score == pytest.approx(2 / 6)
    unknown = make_row(k + "t7", status="passed", score=None, resolved=None)
    assert not result_from_row(unknown).resolved  # the report knows no benchmark's words


def test_near_resolved_is_the_benchmarks_verdict(make_row: MakeRow) -> None:
    # The threshold is the benchmark adapter's (recorded on the row), not the report's.
    assert result_from_row(make_row("pb/x", score=0.95, near_resolved=True)).near_resolved
    assert not result_from_row(make_row("pb/x", score=0.96, near_resolved=False)).near_resolved
    assert not result_from_row(make_row("cw/x", score=0.99)).near_resolved
    assert result_from_row(make_row("pb/x", score=1.0)).resolved
    infra = make_row("pb/x", score=1.0, outcome=Outcome.INFRA_FAILED, infra=True)
    assert not result_from_row(infra).resolved  # infrastructure is never a verdict


def test_empty_selection_has_no_rates(make_run) -> None:
    head = build_figures(load_run(make_run("refused", [], [], outcome="refused", exit_code=2)))
    assert head.headline.selected == 0
    assert head.headline.raw.mean_score is None


def test_rows_outside_the_selection_are_shown_but_not_counted(make_run, make_row) -> None:
    rows = [make_row("pb/in", score=1.0), make_row("pb/stray", score=1.0)]
    figures = build_figures(load_run(make_run("stray", rows, ["pb/in", "pb/other"])))
    assert figures.headline.raw.mean_score == pytest.approx(0.5)
    assert [r.key for r in figures.outside_selection] == ["pb/stray"]
    assert any("outside the manifest's selection" in w for w in figures.warnings)


def test_torn_last_line_is_skipped_with_a_warning(make_run, make_row: MakeRow) -> None:
    root = make_run(
        "torn",
        [make_row("pb/a", score=1.0)],
        ["pb/a", "pb/b"],
        torn_tail='{"schema": "harness.task_result.v1", "run_id": "run-a", "bench',
    )
    run = load_run(root)
    assert run.by_key["pb/a"].score == 1.0
    assert not run.by_key["pb/b"].attempted
    assert any("torn" in w for w in run.warnings)


def test_corrupt_middle_line_names_the_line(make_run, make_row: MakeRow) -> None:
    root = make_run("corrupt", [make_row("pb/a"), make_row("pb/b")])
    ledger = root / "result_index.jsonl"
    lines = ledger.read_text().splitlines(keepends=True)
    ledger.write_text(lines[0] + "not json at all\n" + lines[1])
    with pytest.raises(ReportInputError, match="line 2"):
        load_run(root)


def test_not_a_run_root(tmp_path: Path) -> None:
    with pytest.raises(ReportInputError, match="not a run root"):
        load_run(tmp_path)
    with pytest.raises(ReportInputError, match="not a run root"):
        load_run(tmp_path / "nope")
