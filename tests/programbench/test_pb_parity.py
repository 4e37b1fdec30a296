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
from harness.models import Outcome, TaskRow

LEADERBOARD = Path(__file__).resolve().parents[1] / "data" / "programbench_leaderboard"
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


def test_point14_scores_and_headline_agree_with_programbench_info(tmp_path: Path) -> None:
    src = tmp_path / "programbench"
    walk, gotests = _eval_json(src, WALK, 0.5), _eval_json(src, GOTESTS, 1.0)
    info = parse_info(run_info(src))  # the real official CLI
    assert set(info.lines) == {WALK, GOTESTS} and info.instances == 2
    latest = {f"programbench/{WALK}": _row(WALK, walk),
              f"programbench/{GOTESTS}": _row(GOTESTS, gotests)}
    report = cross_check(info, latest)
    assert report.ok and report.checked == 2 and report.headline_ok


def test_point14_a_disagreement_is_an_error_row(tmp_path: Path) -> None:
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
