"""``harness programbench rescore``: it reads only the eval.json files the run root holds as
regular files. No Docker: the run root is written with the runner's own writers."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.programbench.ignored_rescore import rescore_run
from harness.core.models import Outcome
from harness.run.ledger import ledger_path, read_ledger
from tests.runner.runner_support import row, write_run

TASK = "sharkdp__hexyl.2e26437"


def test_a_linked_eval_json_is_not_read_and_nothing_is_written(tmp_path: Path) -> None:
    """An eval.json that is a link (here to a forged file outside the run, every test passed)
    is not followed: the instance is not rescored and no row is appended."""
    forged = tmp_path / "forged.eval.json"
    forged.write_text(json.dumps({"test_results": []}))
    scored = row(
        TASK,
        Outcome.SCORED,
        benchmark="programbench",
        score=0.5,
        official_eval_status="completed",
        tests_passed=1,
        tests_total=2,
    )
    run = write_run(tmp_path / "run", run_id="r", selection=[], rows=[scored])
    folder = run / "programbench" / TASK
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{TASK}.eval.json").symlink_to(forged)
    ignored = tmp_path / "ignored.json"
    ignored.write_text(json.dumps({TASK: ["x/y"]}))
    lines = ledger_path(run).read_bytes()

    [result] = rescore_run(run, ignored)
    assert result.new_score is None and not result.changed
    assert result.note == "no eval.json kept: not rescored"
    assert ledger_path(run).read_bytes() == lines
    assert read_ledger(ledger_path(run)).latest[f"programbench/{TASK}"].score == 0.5
