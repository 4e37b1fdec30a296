"""Issue 45, honest denominators: a run with units that have no verdict (an infrastructure
failure, an instance never started) shows two figures side by side, in the terminal and
the manifest (the report: tests/reports): the raw mean over every selected unit, missing
counting 0, and the mean over the units with a verdict, with the excluded count and
reasons. A resume that gives every unit a verdict shows the one figure they share."""

from __future__ import annotations

from typing import Any

from tests.support.suite import Suite

TASKS: list[dict[str, Any]] = [{"id": "ok", "work": "succeed", "count": 3}, {"id": "half", "work": "partial",
                                                         "score": 0.5},
         {"id": "boom", "work": "infra"}, {"id": "bad", "work": "fail"}]


def test_the_raw_score_and_the_score_with_a_verdict_side_by_side(suite: Suite) -> None:
    suite.tasks(TASKS)
    first = suite.run("--harness-progress", "off", "--no-report")
    m = first.manifest
    assert m["mean_score"] == (3 + 0.5) / 6
    verdict = m["verdict_score"]
    assert verdict["units"] == 5 and verdict["excluded"] == 1
    assert verdict["mean_score"] == (3 + 0.5) / 5
    (reason,) = verdict["excluded_reasons"]
    assert reason == first.latest["boom"]["reason_code"]
    line = next(x for x in first.out.splitlines() if x.startswith("mean score "))
    assert line == (f"mean score {(3.5 / 6):.4f} over 6 (missing counts 0); "
                    f"{(3.5 / 5):.4f} over the 5 with a verdict (1 excluded: {reason} 1)")

    suite.tasks([*TASKS[:2], {"id": "boom", "work": "succeed"}, TASKS[3]])
    again = suite.run("--resume-from", str(first.root), "--harness-progress", "off",
                      "--no-report")
    m = again.manifest
    assert m["mean_score"] == m["verdict_score"]["mean_score"] == (3 + 0.5 + 1) / 6
    assert m["verdict_score"]["excluded"] == 0
    line = next(x for x in again.out.splitlines() if x.startswith("mean score "))
    assert line == f"mean score {(4.5 / 6):.4f} over 6 (missing counts 0)"


def test_a_dry_run_has_neither_figure(suite: Suite) -> None:
    suite.tasks(TASKS)
    dry = suite.run("--dry-run", "--harness-progress", "off", "--no-report")
    assert dry.manifest["mean_score"] is None and dry.manifest["verdict_score"] is None
    assert not [x for x in dry.out.splitlines() if x.startswith("mean score ")]
