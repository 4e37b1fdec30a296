"""Issue 14 point 2: a resume re-scores a kept submission whose official eval errored; it
does not run (and pay) the agent again. ``--pb-redo-existing`` forces a new solve."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.programbench import FIXTURE_ID
from tests.support.suite import run_pytest

# slow tier: end-to-end Docker runs of a minute or more together (CI runs the tier after
# the default one, which stays under its 10 minutes)
pytestmark = [pytest.mark.docker, pytest.mark.slow]

TARGET = "benchmarks/programbench"
# The official CLI's own docker-run timeout: 0 makes its first `docker run` time out, an
# eval error of the infrastructure (the submission is fine), so the row is infra_failed.
BROKEN_EVAL = {"PROGRAMBENCH_DOCKER_RUN_TIMEOUT": "0"}


def test_resume_rescores_the_kept_submission(tmp_path: Path) -> None:
    first = run_pytest(TARGET, tmp_path / "a", "--pb-fixtures", "-k", "calculator", "--agent", "oracle",
                       env=BROKEN_EVAL)
    row = first.latest[FIXTURE_ID]
    assert row["outcome"] == "infra_failed" and row["reason_code"] == "official_eval_error", \
        first.out
    assert (first.root / row["output_paths"]["submission"]).is_file()

    # The resume must not call the agent: no sandbox is created, nothing is spent
    second = run_pytest(TARGET, tmp_path / "b", "--resume-from", str(first.root),
                        "--agent", "oracle")
    assert second.rc == 0, second.out
    again = second.latest[FIXTURE_ID]
    assert again["score"] == 1.0 and again["resolved"] is True
    assert again["details"]["eval"]["rescored_from"]["run_root"] == str(first.root)
    assert again["details"]["eval"]["rescored_from"]["sha256"] == row["details"]["submission"]["sha256"]
    assert "container" not in again["details"].get("engine", {})  # no sandbox, no agent
    assert again["paid_activity"] is False

    # --pb-redo-existing solves again (a sandbox and the agent), from the same ancestor
    third = run_pytest(TARGET, tmp_path / "c", "--resume-from", str(first.root),
                       "--agent", "oracle", "--pb-redo-existing")
    assert third.rc == 0, third.out
    solved = third.latest[FIXTURE_ID]
    assert "rescored_from" not in solved["details"].get("eval", {}) and "container" in solved["details"].get("engine", {})
    assert solved["score"] == 1.0


def test_issue23_eval_off_is_not_a_score_and_a_resume_scores_it(tmp_path: Path) -> None:
    """Issue 23 point 7: a ``--pb-eval off`` row is no settled score of 0. It is skipped with
    the submission kept, and a resume with an eval scores that submission (no new solve)."""
    first = run_pytest(TARGET, tmp_path / "a", "--pb-fixtures", "-k", "calculator", "--agent", "oracle",
                       "--pb-eval", "off")
    assert first.rc == 0, first.out
    row = first.latest[FIXTURE_ID]
    assert (row["outcome"], row["status"], row["reason_code"]) == (
        "skipped", "skipped", "submission_prepared"), first.out
    assert row["score"] is None and row["official_eval_status"] == "not_run"
    assert (first.root / row["output_paths"]["submission"]).is_file()

    second = run_pytest(TARGET, tmp_path / "b", "--resume-from", str(first.root),
                        "--agent", "oracle")
    assert second.rc == 0, second.out
    scored = second.latest[FIXTURE_ID]
    assert scored["outcome"] == "scored" and scored["official_eval_status"] == "completed"
    assert scored["score"] == 1.0 and scored["resolved"] is True
    assert scored["details"]["eval"]["rescored_from"]["run_root"] == str(first.root)
    assert "container" not in scored["details"].get("engine", {})  # the kept submission, no second solve
    assert (second.root / scored["output_paths"]["eval_json"]).is_file()
