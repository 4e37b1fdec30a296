"""The ledger reader: torn tail tolerated, corruption named, last row wins."""

from __future__ import annotations

import json

import pytest

from harness.core.models import Outcome, TaskRow
from harness.run.ledger import LedgerError, LedgerWriter, read_ledger


def row(iid: str, status: str = "completed", score: float | None = 1.0) -> TaskRow:
    return TaskRow(ts_unix=1.0, run_id="r", benchmark="b", instance_id=iid, status=status,
                   outcome=Outcome.SCORED, score=score)


def test_append_and_last_row_wins(tmp_path):
    writer = LedgerWriter(tmp_path)
    writer.append(row("x", score=0.0))
    writer.append(row("y"))
    writer.append(row("x", score=1.0))
    read = read_ledger(tmp_path / "result_index.jsonl")
    assert len(read.rows) == 3
    assert read.latest["b/x"].score == 1.0
    copy = read_ledger(tmp_path / "b" / "x" / "result_index.jsonl")
    assert [r.score for r in copy.rows] == [0.0, 1.0]


def test_torn_last_line_is_skipped(tmp_path):
    path = tmp_path / "result_index.jsonl"
    good = row("x").dump_line()
    path.write_text(good + "\n" + good[: len(good) // 2])
    read = read_ledger(path)
    assert read.torn_tail and [r.instance_id for r in read.rows] == ["x"]


def test_garbage_in_the_middle_names_the_line(tmp_path):
    path = tmp_path / "result_index.jsonl"
    good = row("x").dump_line()
    path.write_text(good + "\n{broken\n" + good + "\n")
    with pytest.raises(LedgerError, match="line 2 is corrupt"):
        read_ledger(path)


def test_valid_json_that_is_not_a_row_is_corrupt(tmp_path):
    path = tmp_path / "result_index.jsonl"
    path.write_text(json.dumps({"hello": 1}) + "\n" + row("x").dump_line() + "\n")
    with pytest.raises(LedgerError, match="line 1"):
        read_ledger(path)


def test_missing_ledger_reads_empty(tmp_path):
    assert read_ledger(tmp_path / "nope.jsonl").rows == []


def test_instance_ids_are_validated():
    with pytest.raises(ValueError, match="invalid instance id"):
        row("../escape")


def test_failed_ledger_write_is_reported_kept_and_retried(tmp_path, capsys):
    """A row the ledger cannot take is reported as ``diagnostic_write_failed`` on stderr,
    kept in memory (in order) and written by the retry at finish."""
    ledger = tmp_path / "result_index.jsonl"
    ledger.mkdir()  # appending to it fails
    writer = LedgerWriter(tmp_path)
    assert writer.append(row("x", score=0.0)) is False
    assert writer.append(row("x", score=1.0)) is False
    assert "diagnostic_write_failed" in capsys.readouterr().err
    assert writer.unwritten == 2
    assert writer.flush_pending() == 2  # still failing: nothing lost, nothing reordered
    ledger.rmdir()
    assert writer.flush_pending() == 0
    assert [r.score for r in read_ledger(ledger).rows] == [0.0, 1.0]
    assert read_ledger(ledger).latest["b/x"].score == 1.0
