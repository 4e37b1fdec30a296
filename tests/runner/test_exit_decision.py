"""The session's outcome and exit status (Controller.decide_exit), and the rows the
controller writes for the instances that have none when the session ends (fill_missing):
called directly on a controller whose state is set by hand."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.core.errors import RefusalError
from harness.core.models import Outcome, Plan
from harness.run.ledger import LedgerWriter, ledger_path, read_ledger
from harness.runner.controller import (
    EXIT_INFRA,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_STOPPED,
    Controller,
)
from harness.runner.options import RunOptions
from tests.runner.runner_support import BENCH, row

pytestmark = pytest.mark.usefixtures("no_git")

KEYS = [f"{BENCH}/a", f"{BENCH}/b", f"{BENCH}/c"]


def controller(selection: list[str] | None = KEYS, outcomes: dict[str, Outcome] | None = None,
               *, dry_run: bool = False, root: Path | None = None) -> Controller:
    config: Any = SimpleNamespace(hook=SimpleNamespace(pytest_harness_row_written=lambda **kw: None))
    c = Controller(config, RunOptions(run_root=None, run_id=None, runs_root=Path("runs"),
                                      dry_run=dry_run, resume_from=None,
                                      max_recovery_generations=2, shard_text=None))
    c.run = SimpleNamespace(  # type: ignore[assignment]
        run_id="r", run_root=root, adapters={}, worker_id="controller",
        plan=Plan(run_id="r", created_at_unix=0.0, dry_run=dry_run))
    c.selection = selection
    c.key_nodeids = {k: f"bench.py::test[{k}]" for k in selection or []}
    for key, outcome in (outcomes or {}).items():
        r = row(key.split("/", 1)[1], outcome)
        c.rows[r.key] = r
    return c


ALL_SCORED = dict.fromkeys(KEYS, Outcome.SCORED)


@pytest.mark.parametrize(("outcomes", "expected"), [
    (ALL_SCORED, ("completed", EXIT_OK)),
    ({**ALL_SCORED, KEYS[0]: Outcome.AGENT_FAILED}, ("completed", EXIT_OK)),  # the model's failure
    ({**ALL_SCORED, KEYS[1]: Outcome.SKIPPED}, ("completed", EXIT_OK)),
    ({**ALL_SCORED, KEYS[2]: Outcome.INFRA_FAILED}, ("infra_failed", EXIT_INFRA)),
    ({**ALL_SCORED, KEYS[2]: Outcome.BLOCKED}, ("infra_failed", EXIT_INFRA)),
    ({**ALL_SCORED, KEYS[2]: Outcome.NOT_ATTEMPTED}, ("infra_failed", EXIT_INFRA)),
    (dict.fromkeys(KEYS, Outcome.CARRIED), ("nothing_remaining", EXIT_OK)),
    ({**ALL_SCORED, KEYS[0]: Outcome.CARRIED}, ("completed", EXIT_OK)),
])
def test_the_rows_decide_a_finished_run(outcomes: dict[str, Outcome],
                                        expected: tuple[str, int]) -> None:
    assert controller(outcomes=outcomes).decide_exit(None) == expected


def test_a_stop_is_exit_3_whatever_the_rows() -> None:
    assert controller(outcomes=ALL_SCORED).decide_exit("signal_15") == ("stopped", EXIT_STOPPED)
    c = controller(outcomes=ALL_SCORED)
    c.internal_errors = 1
    assert c.decide_exit("budget_exhausted", pytest.ExitCode.INTERNAL_ERROR) == \
        ("stopped", EXIT_STOPPED)


def test_a_refusal_at_selection_wins_over_a_stop() -> None:
    c = controller(outcomes={})
    c.late_refusal = RefusalError("too many recoveries", stage="resume",
                                  reason="max_recovery_generations")
    assert c.decide_exit("signal_2") == ("refused", EXIT_REFUSED)


def test_an_internal_error_is_a_crash_even_when_every_row_is_scored() -> None:
    c = controller(outcomes=ALL_SCORED)
    assert c.decide_exit(None, pytest.ExitCode.INTERNAL_ERROR) == ("crashed", EXIT_INFRA)
    c.internal_errors = 2
    assert c.decide_exit(None) == ("crashed", EXIT_INFRA)


def test_a_dry_run_exits_0_without_rows() -> None:
    assert controller(selection=None, dry_run=True).decide_exit(None) == ("dry_run", EXIT_OK)


def test_a_collection_that_failed_or_selected_nothing_is_refused() -> None:
    assert controller(selection=None).decide_exit(None) == ("collection_failed", EXIT_REFUSED)
    c = controller(outcomes=ALL_SCORED)
    c.collection_errors = 1
    assert c.decide_exit(None) == ("collection_failed", EXIT_REFUSED)
    assert controller(selection=[]).decide_exit(None) == ("empty_selection", EXIT_REFUSED)


def test_a_stopped_run_writes_interrupted_and_blocked_rows(tmp_path: Path) -> None:
    """At a stop every selected instance gets a row: the one running is interrupted
    (infra_failed), the ones never started are blocked; the run exits 3."""
    c = controller(outcomes={KEYS[0]: Outcome.SCORED}, root=tmp_path)
    c.writer = LedgerWriter(tmp_path)
    c.running[KEYS[1]] = ("gw0", 0.0)
    c.fill_missing("signal_15")
    rows = read_ledger(ledger_path(tmp_path)).latest
    assert sorted(rows) == KEYS[1:]  # the scored one already had its row
    assert (rows[KEYS[1]].outcome, rows[KEYS[1]].reason_code, rows[KEYS[1]].worker) == \
        (Outcome.INFRA_FAILED, "interrupted:signal_15", "gw0")
    assert (rows[KEYS[2]].outcome, rows[KEYS[2]].reason_code) == (Outcome.BLOCKED, "signal_15")
    assert c.decide_exit("signal_15") == ("stopped", EXIT_STOPPED)


def test_a_session_that_ended_early_without_a_stop_is_infra_failed(tmp_path: Path) -> None:
    """No stop asked, yet instances never ran (a worker pool that died): not attempted, and
    the run is not a success."""
    c = controller(outcomes={KEYS[0]: Outcome.SCORED}, root=tmp_path)
    c.writer = LedgerWriter(tmp_path)
    c.fill_missing(None)
    rows = read_ledger(ledger_path(tmp_path)).latest
    assert {k: (r.outcome, r.reason_code) for k, r in rows.items()} == {
        KEYS[1]: (Outcome.NOT_ATTEMPTED, "not_run"), KEYS[2]: (Outcome.NOT_ATTEMPTED, "not_run")}
    assert c.decide_exit(None) == ("infra_failed", EXIT_INFRA)
