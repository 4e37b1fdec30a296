"""Live progress: plain lines for CI logs, a rich Live view on a terminal."""

from __future__ import annotations

import io
from collections.abc import Callable

from harness.core.models import Outcome, TaskRow
from reports.progress import Progress

MakeRow = Callable[..., TaskRow]


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_plain_lines_count_a_sequence_of_events(make_row: MakeRow) -> None:
    clock = FakeClock(1000.0)
    out = io.StringIO()
    progress = Progress(5, out, is_tty=False, min_interval=0, clock=clock)
    for key, worker in (("pb/a", "gw0"), ("pb/b", "gw1"), ("pb/c", "gw2")):
        progress.instance_started(key, worker, 1000.0)
    clock.now = 1100.0
    progress.row_written(make_row("pb/a", duration_s=100.0))
    clock.now = 1300.0
    progress.row_written(
        make_row("pb/b", status="failed", outcome=Outcome.AGENT_FAILED, duration_s=300.0)
    )
    clock.now = 1350.0
    progress.instance_started("pb/d", "gw0", 1350.0)
    clock.now = 1400.0
    progress.row_written(
        make_row(
            "pb/c",
            status="infra_failed",
            outcome=Outcome.INFRA_FAILED,
            infra=True,
            duration_s=400.0,
        )
    )
    clock.now = 1350.0 + 723
    progress.set_spend(3.2, 40.0)
    progress.close()

    lines = out.getvalue().splitlines()
    assert lines[0] == "[harness] 0/5 done running 1 (longest gw0 pb/a 0.0s) ETA ?"
    # median 100 s; pb/b and pb/c at 100 s; 2 queued over 3 slots -> 67 s
    assert lines[3] == (
        "[harness] 1/5 done (completed 1) running 2 (longest gw1 pb/b 1m40s) ETA 1m07s"
    )
    # median 300 s; pb/d already past it; 1 queued instance over 3 slots -> 100 s
    assert lines[-1] == (
        "[harness] 3/5 done (completed 1, failed 1, infra_failed 1) running 1 "
        "(longest gw0 pb/d 12m03s) spent $3.20 reserved $40.00 ETA 1m40s"
    )
    assert len(lines) == 8  # one line per event; close adds none when nothing is pending


def test_plain_lines_are_throttled_and_close_flushes(make_row: MakeRow) -> None:
    clock = FakeClock(0.0)
    out = io.StringIO()
    progress = Progress(3, out, is_tty=False, min_interval=10, clock=clock)
    progress.instance_started("pb/a", "gw0")
    clock.now = 1.0
    progress.instance_started("pb/b", "gw1")
    clock.now = 2.0
    progress.row_written(make_row("pb/a", duration_s=2.0))
    assert len(out.getvalue().splitlines()) == 1
    clock.now = 12.0
    progress.row_written(make_row("pb/b", duration_s=11.0))
    clock.now = 13.0
    progress.row_written(make_row("pb/c", status="failed", duration_s=1.0))
    progress.close()
    progress.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    assert lines[1].startswith("[harness] 2/3 done (completed 2) running 0")
    assert lines[2] == "[harness] 3/3 done (completed 2, failed 1) running 0 ETA 0.0s"


def test_carried_rows_count_as_done_without_skewing_eta(make_row: MakeRow) -> None:
    out = io.StringIO()
    progress = Progress(2, out, is_tty=False, min_interval=0, clock=FakeClock(0.0))
    progress.row_written(
        make_row("pb/a", outcome=Outcome.CARRIED, carried_from="r0", duration_s=9999.0)
    )
    assert progress.line() == "[harness] 1/2 done (carried 1) running 0 ETA ?"


def test_tty_mode_draws_without_crashing(make_row: MakeRow) -> None:
    out = io.StringIO()
    progress = Progress(2, out, is_tty=True)
    progress.instance_started("pb/a", "gw0")
    progress.instance_started("pb/b", "gw1")
    progress.render()
    progress.row_written(make_row("pb/a", duration_s=1.0))
    progress.set_spend(0.5, 2.0)
    progress.close()
    text = out.getvalue()
    assert "1/2 done" in text
    assert "pb/b" in text and "gw1" in text
    assert "\x1b[" in text  # drawn as a live terminal view
