"""A resume writes the rows it carries in one batch, before any instance runs; a kill in the
middle of that batch (or of the instance copies written after it) leaves a run that resumes
correctly: every settled instance carried from the run that settled it, none run again."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from xml.etree import ElementTree

import pytest

from harness.core.models import Outcome, TaskRow
from harness.run.ledger import LedgerWriter, read_ledger
from harness.runner.sandbox_hooks import NOTHING_TO_RUN
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
    assert {r["details"]["run"]["carried_status"] for r in rows.values()} == {"completed"}
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
    assert writer.append_batch(rows, new_folders=True)
    assert writer.settle()  # the folders are written by a helper process, waited for here
    assert len(syncs) == 1
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
    assert writer.append_batch(rows, new_folders=True)  # the run root's rows are written
    assert writer.settle() is False  # one folder's copy could not be
    assert "diagnostic_write_failed" in capsys.readouterr().err
    assert writer.failures == 1
    (tmp_path / "b" / "i1" / "result_index.jsonl").rmdir()
    assert writer.flush_pending() == 0
    assert [r.instance_id for r in read_ledger(tmp_path / "b" / "i1" /
                                               "result_index.jsonl").rows] == ["i1"]
    assert len(read_ledger(tmp_path / "result_index.jsonl").rows) == 3


def test_a_resume_that_runs_nothing_needs_no_engine(suite: Suite) -> None:
    """Every selected instance carried: the run makes no sandbox, so it takes no lease and
    sweeps nothing (no Docker call at all: the engine here does not answer)."""
    origin = settled_run(suite, FEW)
    suite.extra_env["DOCKER_HOST"] = "unix:///nonexistent/docker.sock"
    again = suite.run("--resume-from", str(origin.root), "--harness-progress", "off",
                      "--no-report", timeout=300)
    assert again.rc == 0, again.out[-2000:]
    sweeps = again.manifest["extra"]["sweeps"]
    assert sweeps["startup"] == {"skipped": NOTHING_TO_RUN}
    assert sweeps["final"] == {"skipped": NOTHING_TO_RUN}
    assert "lease" not in sweeps or sweeps["lease"] is None


def junit_cases(path: Path) -> dict[str, dict[str, str]]:
    """testcase name -> its attributes and the skip message, from a JUnit XML file."""
    cases = {}
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        skipped = case.find("skipped")
        cases[case.attrib["name"]] = {**case.attrib, "skipped": "" if skipped is None
                                      else skipped.attrib.get("message", "")}
    return cases


def test_carried_instances_are_reported_as_pytest_reports_a_skip(suite: Suite,
                                                                 tmp_path: Path) -> None:
    """A resume that runs some instances again: the carried ones are skipped items in the
    terminal and in JUnit XML, at the file and line pytest gives the test, and the others
    run."""
    suite.tasks([{"id": "ok", "work": "succeed", "count": 4}, {"id": "flaky", "work": "infra"}])
    xunit1 = ("-o", "junit_family=xunit1")  # each case's file and line
    first = suite.run("--harness-progress", "off", "--no-report", *xunit1,
                      "--junitxml", str(tmp_path / "first.xml"))
    suite.tasks([{"id": "ok", "work": "succeed", "count": 4}, {"id": "flaky", "work": "succeed"}])
    again = suite.run("--resume-from", str(first.root), "--harness-progress", "off",
                      "--no-report", "-rs", *xunit1, "--junitxml", str(tmp_path / "again.xml"))
    assert again.rc == 0, again.out[-2000:]
    assert again.executions() == ["flaky"]
    before, after = junit_cases(tmp_path / "first.xml"), junit_cases(tmp_path / "again.xml")
    assert sorted(after) == sorted(before) and len(after) == 5
    run_id = first.manifest["run_id"]
    for name, case in after.items():
        assert (case["file"], case["line"]) == (before[name]["file"], before[name]["line"])
        if "flaky" in name:
            assert case["skipped"] == ""
        else:
            assert case["skipped"] == f"settled_in_ancestor: settled in run {run_id}"
    again.result.stdout.re_match_lines(
        [rf"SKIPPED \[4\] \S*test_selftest.py:\d+: settled_in_ancestor: settled in run {run_id}",
         r".*1 passed, 4 skipped"])
