"""Official parity: ledger scores and headline against the real ``programbench info``."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.programbench.official_eval import per_test_outcomes, run_info
from benchmarks.programbench.parity import (
    PARITY_MISMATCH,
    cross_check,
    mismatch_row,
    parse_info,
)
from harness.core.models import Outcome, RowDetails, RunDetails, TaskRow

LEADERBOARD = Path(__file__).resolve().parents[2] / "data" / "programbench_leaderboard"
WALK = "antonmedv__walk.bf802ef"
GOTESTS = "cweill__gotests.2a672c5"


def _eval_json(src: Path, iid: str, passed_fraction: float) -> float:
    """An eval.json with the reference's test names, ``passed_fraction`` of them passing;
    returns the score the official filtering gives it."""
    keys = sorted(json.loads((LEADERBOARD / "20260702_dtl-supermath-2solve-cleanroom-v6"
                                            ".score.json").read_text())[iid])
    cut = int(len(keys) * passed_fraction)
    results = [{"name": k.split("/", 1)[1], "branch": k.split("/", 1)[0],
                "status": "passed" if i < cut else "failure", "extra": {}}
               for i, k in enumerate(keys)]
    folder = src / iid
    folder.mkdir(parents=True)
    path = folder / f"{iid}.eval.json"
    path.write_text(json.dumps({"test_results": results}))
    tests = per_test_outcomes(iid, path)
    return sum(tests.values()) / len(tests)


def _row(iid: str, score: float) -> TaskRow:
    return TaskRow(ts_unix=1.0, run_id="r", benchmark="programbench", instance_id=iid,
                   status="completed", outcome=Outcome.SCORED, score=score,
                   resolved=score == 1.0, official_eval_status="completed")


def test_scores_and_headline_agree_with_programbench_info(tmp_path: Path) -> None:
    src = tmp_path / "programbench"
    walk, gotests = _eval_json(src, WALK, 0.5), _eval_json(src, GOTESTS, 1.0)
    info = parse_info(run_info(src))  # the real official CLI
    assert set(info.lines) == {WALK, GOTESTS} and info.instances == 2
    latest = {f"programbench/{WALK}": _row(WALK, walk),
              f"programbench/{GOTESTS}": _row(GOTESTS, gotests)}
    report = cross_check(info, latest)
    assert report.ok and report.checked == 2 and report.headline_ok


def test_a_disagreement_is_an_error_row(tmp_path: Path) -> None:
    src = tmp_path / "programbench"
    walk, gotests = _eval_json(src, WALK, 0.5), _eval_json(src, GOTESTS, 1.0)
    info = parse_info(run_info(src))
    wrong = _row(WALK, round(walk + 0.2, 4))  # the ledger disagrees with the official CLI
    latest = {wrong.key: wrong, f"programbench/{GOTESTS}": _row(GOTESTS, gotests)}
    report = cross_check(info, latest)
    assert not report.ok and not report.headline_ok
    [mismatch] = report.mismatches
    assert mismatch.instance_id == WALK and mismatch.official == f"{walk * 100:.0f}"
    row = mismatch_row(wrong, mismatch, "infra_failed")
    assert row.outcome is Outcome.INFRA_FAILED and row.reason_code == PARITY_MISMATCH
    assert row.score is None and row.official_eval_status == "error"
    assert row.error is not None and "programbench info says" in row.error
    # an eval.json the ledger does not score is a disagreement too (never ignored)
    only_gotests = {f"programbench/{GOTESTS}": _row(GOTESTS, gotests)}
    stray = cross_check(info, only_gotests)
    assert [m.instance_id for m in stray.mismatches] == [WALK] and not stray.ok


def _carried(iid: str, score: float) -> TaskRow:
    """A row a resume carried forward: the ancestor's official score, untouched."""
    row = _row(iid, score).model_copy(update={
        "run_id": "resume", "outcome": Outcome.CARRIED, "reason_code": "settled_in_ancestor",
        "carried_from": "ancestor", "details": RowDetails(run=RunDetails(
            carried_status="completed", carried_outcome="scored"))})
    return TaskRow.model_validate(row.model_dump(by_alias=True))


def test_issue23_a_resume_never_rewrites_a_carried_score(tmp_path: Path) -> None:
    """Issue 23 point 1: a resume's ``programbench info`` reads the new run root only, so a
    score carried from the ancestor has no line there. It is not this run's to check: no
    error row replaces it, and the headline compares this run's own evaluations on both
    sides (the official Average is over this root's eval.json files)."""
    from benchmarks.programbench.adapter import ProgramBenchAdapter
    from benchmarks.programbench.session import check_parity
    from harness.core.models import Plan
    from harness.runner.instance import RunContext

    src = tmp_path / "programbench"
    walk = _eval_json(src, WALK, 0.5)  # the only instance this resume evaluated
    info = parse_info(run_info(src))
    assert set(info.lines) == {WALK}  # the carried instance is not in this root
    carried = _carried(GOTESTS, 1.0)
    latest = {f"programbench/{WALK}": _row(WALK, walk), carried.key: carried}
    report = cross_check(info, latest)
    assert report.ok and report.mismatches == [], report
    assert report.checked == 1 and report.carried == 1
    assert report.headline_instances_ours == report.headline_instances_official == 1
    assert report.headline_ours == f"{walk * 100:.0f}"

    appended: list[TaskRow] = []
    run = RunContext(run_id="resume", run_root=tmp_path, worker_id="main", role="controller",
                     plan=Plan(run_id="resume", created_at_unix=1.0),
                     adapters={})
    check_parity(run, ProgramBenchAdapter(), run_info(src), latest, appended.append)
    assert appended == []  # no official_parity_mismatch row: the carried score stands
    # a carried row with an eval.json in this root would be a stray line: still flagged
    _eval_json(src, GOTESTS, 1.0)
    stray = cross_check(parse_info(run_info(src)), latest)
    assert [m.instance_id for m in stray.mismatches] == [GOTESTS] and not stray.ok
