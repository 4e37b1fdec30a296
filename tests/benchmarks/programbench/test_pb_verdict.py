"""One verdict rule for per-task and batch scoring (unit tests on fabricated results)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.programbench.adapter import ProgramBenchAdapter
from benchmarks.programbench.official_eval import OfficialEvalResult
from benchmarks.programbench.session import scored_row
from benchmarks.programbench.verdict import verdict
from harness.core.models import Outcome, TaskRow

IID = "testorg__calculator.abc1234"


def result(**fields: object) -> OfficialEvalResult:
    base: dict[str, object] = {"instance_id": IID, "official_eval_status": "completed",
                               "score": 0.75, "resolved": False, "near_resolved": False,
                               "tests_passed": 3, "tests_total": 4, "executable_hash": "abc"}
    return OfficialEvalResult.model_validate({**base, **fields})


def pending_row(completed: bool, reason: str | None = None) -> TaskRow:
    return TaskRow(ts_unix=1.0, run_id="r", benchmark="programbench", instance_id=IID,
                   status="completed", outcome=Outcome.SCORED, reason_code="eval_pending",
                   official_eval_status="pending",
                   details={"eval": {"pending": {"completed": completed, "reason": reason}}})


def test_no_eval_json_is_infra_never_zero():
    v = verdict(result(official_eval_status="error", score=None, error_code="RuntimeError",
                       error_message="image missing"), completed=True, reason=None)
    assert v.outcome is Outcome.INFRA_FAILED and v.score is None
    assert v.official_eval_status == "error" and "image missing" in (v.error or "")
    assert verdict(None, completed=True, reason=None).reason_code == "official_eval_error"


def test_batch_row_matches_the_per_task_rule():
    adapter = ProgramBenchAdapter()
    row = scored_row(pending_row(True), result(score=1.0, resolved=True, near_resolved=True),
                     adapter)
    assert (row.status, row.outcome, row.reason_code) == ("completed", Outcome.SCORED,
                                                          "resolved")
    assert row.score == 1.0 and row.resolved is True and row.official_eval_status == "completed"
    assert (row.details.section("programbench") or {})["executable_hash"] == "abc"
    assert row.details.eval.pending is None
    partial = scored_row(pending_row(False, "deadline_local"), result(), adapter)
    assert (partial.status, partial.outcome, partial.reason_code) == (
        "failed", Outcome.AGENT_FAILED, "deadline_local")
    assert partial.score == 0.75 and partial.resolved is False
    assert partial.details.submission.partial_scored is True
    broken = scored_row(pending_row(True), None, adapter)
    assert broken.status == "infra_failed" and broken.infra is True and broken.score is None
    assert not broken.settled


def test_an_eval_error_the_submission_caused_is_the_agents_zero():
    from benchmarks.programbench.official_eval import failure_cause

    # what the CLI says when a branch's results.xml was emptied, or the workspace the
    # build left cannot take the tests: the submission did it
    assert failure_cause("EmptyTestResultError", "Empty test results XML for branch 'b'") == (
        "agent")
    assert failure_cause("RuntimeError", "tar stream into container failed: tar: eval: "
                         "Cannot mkdir: Not a directory") == "agent"
    # our dependencies: the engine, the disk, the image, the policy shim, an unknown crash
    for message in ("Failed to start container: Unable to find image 'x:y' locally",
                    "tar stream into container failed: Error response from daemon: "
                    "container abc is not running",
                    "tar stream into container failed: tar: x: No space left on device",
                    "docker policy: refused: a container network may not be chosen",
                    "KeyError: 'image_name'"):
        assert failure_cause("RuntimeError", message) == "infra", message
    v = verdict(result(official_eval_status="error", score=None, error_cause="agent",
                       error_code="EmptyTestResultError", error_message="Empty test results"),
                completed=True, reason=None)
    assert (v.outcome, v.reason_code, v.official_eval_status) == (
        Outcome.AGENT_FAILED, "submission_broke_eval", "error")
    assert v.score == 0.0 and v.resolved is False
    assert v.eval.error_code == "EmptyTestResultError" and not v.details
    row = scored_row(pending_row(True), result(official_eval_status="error", score=None,
                                               error_cause="agent", error_code="X"),
                     ProgramBenchAdapter())
    assert (row.status, row.outcome, row.infra, row.score) == (
        "failed", Outcome.AGENT_FAILED, False, 0.0)
    assert row.settled


def test_issue23_an_eval_off_row_is_no_settled_score_and_its_run_resumes_with_an_eval(
        tmp_path: Path) -> None:
    """Issue 23 point 7: a row of a ``--pb-eval off`` run (skipped, submission kept, no score)
    is not carried by a resume, and the resume may switch the eval on: ``--pb-eval`` does not
    change a score, so it is not part of the result fingerprint (an ancestor that still
    records it is not refused for it); a result-changing option still is."""
    import pytest

    from benchmarks.programbench.rescore import RESCORABLE_REASONS
    from benchmarks.programbench.runner import EVAL_OFF_REASON
    from harness.run.ledger import ledger_path
    from harness.run.manifest import new_manifest, write_manifest
    from harness.run.resume import ResumeError, plan_resume

    root = tmp_path / "off"
    root.mkdir()
    manifest = new_manifest(run_id="off", run_root=root, argv=[], dry_run=False, workers=0)
    old = {"benchmarks": ["programbench"], "programbench.eval": "off",
           "programbench.cpus": 2}
    manifest.config = old
    write_manifest(manifest, root)
    kept = TaskRow(ts_unix=1.0, run_id="off", benchmark="programbench", instance_id=IID,
                   status="skipped", outcome=Outcome.SKIPPED, reason_code=EVAL_OFF_REASON,
                   official_eval_status="not_run", prediction_written=True,
                   details={"agent": {"outcome": {"completed": True, "reason": None}}})
    ledger_path(root).write_text(kept.dump_line() + "\n")
    assert EVAL_OFF_REASON in RESCORABLE_REASONS  # the resume scores the kept submission
    assert kept.score is None and not kept.settled

    now = {"benchmarks": ["programbench"], "programbench.cpus": 2}  # --pb-eval per-task
    plan = plan_resume(root, config=now, benchmark_versions={}, shard=None,
                       shard_given=False)
    assert plan.carried == {} and plan.attempts == {kept.key: 2}
    with pytest.raises(ResumeError, match=r"programbench\.cpus"):
        plan_resume(root, config={**now, "programbench.cpus": 4}, benchmark_versions={},
                    shard=None, shard_given=False)
