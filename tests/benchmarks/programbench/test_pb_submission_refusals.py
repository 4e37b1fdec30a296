"""``harness programbench submission``: what it refuses, which attempt goes in, and the
``_stats`` rules (an unknown value is left out and listed, never 0). No Docker: run roots
are written with the runner's own manifest and ledger writers."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest

from benchmarks.programbench.leaderboard import (
    SubmissionRefused,
    choose_attempt,
    describe,
    submission_command,
)
from benchmarks.programbench.leaderboard_records import StatGap, SubmissionRecord
from benchmarks.programbench.leaderboard_tools import collect_stats
from harness.core.models import ModelCalls, Outcome, TaskRow, Tokens
from harness.run.ledger import LedgerWriter
from harness.run.manifest import new_manifest, write_manifest

REAL_ID = "sharkdp__hexyl.2e26437"  # a task the package ships
OTHER_ID = "abishekvashok__cmatrix.5c082c6"


def scored_row(run_id: str, iid: str, score: float | None = 1.0, **fields: object) -> TaskRow:
    data: dict[str, object] = {
        "ts_unix": time.time(),
        "run_id": run_id,
        "benchmark": "programbench",
        "instance_id": iid,
        "status": "completed",
        "outcome": Outcome.SCORED,
        "score": score,
        "resolved": None if score is None else score >= 1.0,
        "official_eval_status": "completed",
        "tests_passed": 1,
        "tests_total": 1,
    }
    data.update(fields)
    return TaskRow.model_validate(data)


def write_run(root: Path, rows: list[TaskRow], *, reportable: bool = True) -> Path:
    """A finished run root: manifest (reportable: a clean --agent-repo) and ledger."""
    root.mkdir(parents=True)
    manifest = new_manifest(run_id=root.name, run_root=root, argv=[], dry_run=False, workers=1)
    manifest.benchmarks = ["programbench"]
    manifest.outcome, manifest.exit_code = "completed", 0
    manifest.extra.agent = {"kind": "mini-swe-agent", "solve_model": "openai/fake-model"}
    if reportable:
        manifest.extra.agent_source = {"repo_dir": str(root), "head": "a" * 40, "dirty": False}
    write_manifest(manifest, root)
    writer = LedgerWriter(root)
    assert writer.append_batch(rows)
    return root


def test_attempts_need_one_chosen_for_every_task(tmp_path: Path) -> None:
    rows = [
        scored_row("r", f"{REAL_ID}-a{k}", sample_of=REAL_ID, sample=k, score=k / 3)
        for k in (1, 2, 3)
    ]
    with pytest.raises(SubmissionRefused, match=r"3 attempts per task.*--attempt N \(1\.\.3"):
        choose_attempt(rows, None)
    picked, k = choose_attempt(rows, 2)
    assert k == 3 and [r.sample for r in picked] == [2] and picked[0].task_id == REAL_ID
    with pytest.raises(SubmissionRefused, match=r"out of range: use 1\.\.3"):
        choose_attempt(rows, 4)
    single = [scored_row("r", REAL_ID)]
    assert choose_attempt(single, None) == (single, 1) == choose_attempt(single, 1)
    with pytest.raises(SubmissionRefused, match="one attempt per task"):
        choose_attempt(single, 2)
    # the command says so in one line, exit 2, and writes nothing
    run = write_run(tmp_path / "k3", rows)
    out = tmp_path / "out"
    assert submission_command([str(run), "--output", str(out)]) == 2
    assert not out.exists()


def test_a_run_that_is_not_reportable_is_refused_naming_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run(tmp_path / "run", [scored_row("run", REAL_ID)], reportable=False)
    out = tmp_path / "out"
    assert submission_command([str(run), "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "is not reportable (no --agent-repo" in err and "--force" in err
    assert not out.exists()


def test_a_folder_that_is_no_earlier_output_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run(tmp_path / "run", [scored_row("run", REAL_ID)])
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert submission_command([str(run), "--output", str(out)]) == 2
    assert "is not empty and is not an earlier output" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    inside = run / "leaderboard"
    assert submission_command([str(run), "--output", str(inside)]) == 2
    assert "overlaps the run root" in capsys.readouterr().err
    assert not inside.exists()


def test_nothing_to_package_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        scored_row("run", "testorg__calculator.abc1234"),
        scored_row(
            "run",
            REAL_ID,
            score=None,
            outcome=Outcome.INFRA_FAILED,
            status="infra_failed",
            official_eval_status="error",
            reason_code="official_eval_error",
            infra=True,
        ),
    ]
    run = write_run(tmp_path / "run", rows)
    assert submission_command([str(run), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "nothing programbench submit package can take" in err
    assert "never packages testorg__ ids" in err and "official_eval_error" in err


def test_unknown_stats_are_left_out_and_listed_never_zero() -> None:
    known = scored_row(
        "r",
        "a__known.1",
        cost_usd=0.25,
        cost_known=True,
        tokens=Tokens(prompt=10, completion=7, total=17),
        models=[ModelCalls(model="m", source="model_proxy", calls=3)],
    )
    free = scored_row("r", "a__free.1", cost_usd=0.0, cost_known=True)  # known zero (oracle)
    unknown = scored_row(
        "r",
        "a__unknown.1",
        cost_usd=None,
        cost_known=False,
        details={
            "cost_source": "unknown",
            "agent": "mini-swe-agent",
            "agent_details": {"steps": 5},
        },
    )
    stats, gaps = collect_stats({r.instance_id: r for r in (known, free, unknown)})
    assert stats["cost"] == {"a__known.1": 0.25, "a__free.1": 0.0}
    assert stats["calls"] == {"a__known.1": 3, "a__unknown.1": 5}  # mini-swe-agent's steps
    assert stats["tokens"] == {"a__known.1": 7}
    assert StatGap(instance_id="a__unknown.1", stat="cost", reason="cost unknown (unknown)") in gaps
    assert {(g.instance_id, g.stat) for g in gaps} == {
        ("a__unknown.1", "cost"),
        ("a__free.1", "calls"),
        ("a__free.1", "tokens"),
        ("a__unknown.1", "tokens"),
    }
    record = SubmissionRecord(
        created_at_unix=0.0,
        source_run="/r",
        run_id="r1",
        output="/o",
        reportable=False,
        not_reportable=["no --agent-repo"],
        forced=True,
        unknown=gaps,
    )
    text = describe(record)
    assert "FORCED (--force): the run is not reportable: no --agent-repo." in text
    assert "Unknown cost (left out of _stats/cost.json, not 0): a__unknown.1." in text
    json.loads(record.model_dump_json())  # the record is JSON


def test_a_trajectory_the_run_root_does_not_hold_as_a_file_is_never_copied(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The output copies only regular files inside the run root: a trajectory that is a link
    (to a file outside), a FIFO, or a path the row names outside the root is left out, and
    the copy neither follows, blocks, nor reads outside the root."""
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the leaderboard")
    archive = b"the scored archive"
    digest = hashlib.sha256(archive).hexdigest()
    rows = [
        scored_row("run", iid, details={"submission": {"sha256": digest}}, output_paths=paths)
        for iid, paths in ((REAL_ID, {}), (OTHER_ID, {"trajectory": str(secret)}))
    ]
    run = write_run(tmp_path / "run", rows)
    for iid in (REAL_ID, OTHER_ID):
        folder = run / "programbench" / iid
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "submission.tar.gz").write_bytes(archive)
        (folder / f"{iid}.eval.json").write_text("{}")
    (run / "programbench" / REAL_ID / "mini_swe_agent.traj.json").symlink_to(secret)
    os.mkfifo(run / "programbench" / OTHER_ID / "mini_swe_agent.traj.json")
    out = tmp_path / "out"
    submission_command([str(run), "--output", str(out)])  # the official package may refuse
    capsys.readouterr()
    record = SubmissionRecord.model_validate_json((out / "harness_submission.json").read_text())
    assert sorted(p.instance_id for p in record.instances) == sorted([REAL_ID, OTHER_ID])
    for packed in record.instances:
        assert packed.submission_sha256_verified
        assert [f.name for f in packed.files] == [
            "submission.tar.gz",
            f"{packed.instance_id}.eval.json",
        ]
        assert not (out / packed.instance_id / f"{packed.instance_id}.traj.json").exists()
    assert not any(
        b"not for the leaderboard" in f.read_bytes() for f in out.rglob("*") if f.is_file()
    )
