"""A resume writes the rows it carries in one batch, before any instance runs; a kill in the
middle of that batch (or of the instance copies written after it) leaves a run that resumes
correctly: every settled instance carried from the run that settled it, none run again."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from harness.core.models import Outcome, TaskRow
from harness.run.ledger import LedgerWriter, read_ledger
from tests.support.suite import Run, Suite

MANY = 600  # enough rows that their instance copies take a while to write
FEW = 40


def settled_run(suite: Suite, count: int) -> Run:
    suite.tasks([{"id": "t", "work": "succeed", "count": count}])
    first = suite.run("--harness-progress", "off", "--no-report", timeout=300)
    assert len(first.latest) == count, first.out[-2000:]
    return first


def copies(root: Path) -> int:
    folder = root / "selftest"
    return sum(1 for d in folder.iterdir() if (d / "result_index.jsonl").exists()) \
        if folder.is_dir() else 0


def assert_resumes_from(suite: Suite, killed: Path, origin: Run, count: int) -> None:
    """A resume of the killed run carries every settled instance, from the run that settled
    it, and runs nothing again."""
    again = suite.run("--resume-from", str(killed), "--harness-progress", "off", "--no-report",
                      timeout=300)
    assert again.rc == 0, again.out[-2000:]
    assert again.manifest["outcome"] == "nothing_remaining"
    assert again.executions() == []
    rows = again.latest
    assert len(rows) == count
    origin_id = origin.manifest["run_id"]
    assert {r["outcome"] for r in rows.values()} == {"carried_forward"}
    assert {r["carried_from"] for r in rows.values()} == {origin_id}
    assert {r["details"]["carried_status"] for r in rows.values()} == {"completed"}
    assert again.manifest["resume"]["carried"] == count
    assert again.manifest["mean_score"] == 1.0
    # the resumed root holds its own rows: the ledger and every instance folder's copy
    assert copies(again.root) == count


def test_kill_in_the_middle_of_carrying_leaves_a_run_that_resumes(suite: Suite) -> None:
    origin = settled_run(suite, MANY)
    for _ in range(3):  # the kill must land while the carried rows' copies are written
        proc, root = suite.start("--resume-from", str(origin.root), "--harness-progress",
                                 "off", "--no-report")
        ledger = root / "result_index.jsonl"
        while proc.poll() is None:
            try:
                if ledger.stat().st_size > 0:
                    break
            except FileNotFoundError:
                pass
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        if copies(root) < MANY:
            break
    else:
        pytest.fail("three kills landed after the carry ended; none tested the middle")
    killed = Run.of(root)
    assert killed.manifest["exit_code"] is None  # never finalized
    assert 0 < len(killed.rows) <= MANY  # what reached the ledger reads back whole
    assert all(r["outcome"] == "carried_forward" for r in killed.rows)
    assert_resumes_from(suite, root, origin, MANY)


@pytest.mark.parametrize("cut", ["empty", "torn", "line"])
def test_a_carry_cut_short_on_disk_resumes(suite: Suite, cut: str) -> None:
    """What a power loss in the middle of the one append can leave: nothing, a torn last
    line, or a prefix of whole lines; and most instance copies missing."""
    origin = settled_run(suite, FEW)
    resumed = suite.run("--resume-from", str(origin.root), "--harness-progress", "off",
                        "--no-report", timeout=300)
    assert resumed.rc == 0, resumed.out[-2000:]
    ledger = resumed.root / "result_index.jsonl"
    data = ledger.read_bytes()
    assert data.count(b"\n") == FEW
    half = data.index(b"\n", len(data) // 2) + 1
    ledger.write_bytes({"empty": b"", "torn": data[:half + 40], "line": data[:half]}[cut])
    for folder in list((resumed.root / "selftest").iterdir())[FEW // 3:]:
        (folder / "result_index.jsonl").unlink()
    manifest = resumed.manifest
    manifest.update(exit_code=None, outcome="running", finished_at_unix=None)  # killed
    manifest["checkpoint"]["phase"] = "running"
    (resumed.root / "run_manifest.json").write_text(json.dumps(manifest))
    read = read_ledger(ledger)
    assert read.torn_tail is (cut == "torn")
    assert_resumes_from(suite, resumed.root, origin, FEW)


def test_the_carried_rows_are_one_append_and_one_fsync(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [TaskRow(ts_unix=1.0, run_id="r", benchmark="b", instance_id=f"i{n}",
                    status="skipped", outcome=Outcome.CARRIED, carried_from="a")
            for n in range(50)]
    syncs: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        syncs.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    writer = LedgerWriter(tmp_path)
    (tmp_path / "result_index.jsonl").touch()
    assert writer.append_batch(rows, copies_behind=True)
    assert len(syncs) == 1
    assert writer.wait_copies()
    assert [r.instance_id for r in read_ledger(tmp_path / "result_index.jsonl").rows] == \
        [f"i{n}" for n in range(50)]
    for n in range(50):
        copy = read_ledger(tmp_path / "b" / f"i{n}" / "result_index.jsonl")
        assert [r.instance_id for r in copy.rows] == [f"i{n}"]


def test_a_failed_instance_copy_is_kept_and_retried(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    rows = [TaskRow(ts_unix=1.0, run_id="r", benchmark="b", instance_id=f"i{n}",
                    status="skipped", outcome=Outcome.CARRIED, carried_from="a")
            for n in range(3)]
    (tmp_path / "b" / "i1").mkdir(parents=True)
    (tmp_path / "b" / "i1" / "result_index.jsonl").mkdir()  # appending to it fails
    writer = LedgerWriter(tmp_path)
    assert writer.append_batch(rows, copies_behind=True)
    assert writer.wait_copies() is False
    assert "diagnostic_write_failed" in capsys.readouterr().err
    assert writer.failures == 1
    (tmp_path / "b" / "i1" / "result_index.jsonl").rmdir()
    assert writer.flush_pending() == 0
    assert [r.instance_id for r in read_ledger(tmp_path / "b" / "i1" /
                                               "result_index.jsonl").rows] == ["i1"]
    assert len(read_ledger(tmp_path / "result_index.jsonl").rows) == 3
