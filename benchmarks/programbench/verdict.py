"""The ledger verdict of one official evaluation: one rule for per-task and batch scoring."""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any

from benchmarks.programbench import BENCHMARK
from benchmarks.programbench.official_eval import OfficialEvalResult
from harness.api import EvalDetails, Outcome, SubmissionDetails


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    reason_code: str
    official_eval_status: str
    score: float | None = None
    resolved: bool | None = None
    near_resolved: bool | None = None
    tests_passed: int | None = None
    tests_total: int | None = None
    error: str | None = None
    details: dict[str, Any] = field(default_factory=dict)  # ProgramBench's own section
    eval: EvalDetails = field(default_factory=EvalDetails)  # the row's eval section
    submission: SubmissionDetails = field(default_factory=SubmissionDetails)

    def put(self, details: MutableMapping[str, Any]) -> None:
        """This verdict's sections into a row's details (its JSON, or a running instance's
        bag): ``eval``, ``submission`` and ProgramBench's own (``details.programbench``)."""
        self.eval.put(details)
        self.submission.put(details)
        if self.details:
            own = details.get(BENCHMARK)
            details[BENCHMARK] = {**(own if isinstance(own, dict) else {}), **self.details}

    def row_fields(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "reason_code": self.reason_code,
                "official_eval_status": self.official_eval_status, "score": self.score,
                "resolved": self.resolved, "near_resolved": self.near_resolved,
                "tests_passed": self.tests_passed, "tests_total": self.tests_total,
                "infra": self.outcome is Outcome.INFRA_FAILED}


SUBMISSION_BROKE_EVAL = "submission_broke_eval"
BUILD_NEEDS_ROOT = "build_needs_root"  # official_eval.BuildNeedsRoot.code


def guard_details(result: OfficialEvalResult) -> tuple[EvalDetails, SubmissionDetails]:
    """What the scorer did not see (the row's ``submission.scorer_files_*``) and the eval's
    evidence (``eval``: its error code, timings, grader plugins, network policy)."""
    ev = EvalDetails(error_code=result.error_code)
    sub = SubmissionDetails()
    if result.scorer_guard is not None:
        sub.scorer_files_removed = result.scorer_guard.removed_names
        sub.scorer_files_rewritten = list(result.scorer_guard.rewritten)
    if result.timings:  # seconds per phase of the official eval
        ev.timings = dict(result.timings)
    if result.test_plugins:  # the resolved grader plugins and their versions
        ev.test_plugins = dict(result.test_plugins)
    if result.docker_policy is not None:
        ev.network = result.docker_policy.network
        if result.docker_policy.build_files_removed:
            sub.scorer_build_files_removed = list(result.docker_policy.build_files_removed)
    return ev, sub


def verdict(result: OfficialEvalResult | None, *, completed: bool,
            reason: str | None) -> Verdict:
    """No eval.json is an infrastructure failure, never a 0, unless the submission caused it
    (``error_cause: agent``: it scores 0 as the agent's failure); partial work of an agent
    that did not finish is scored but stays ``agent_failed``."""
    if (result is not None and result.official_eval_status == "error"
            and result.error_code == BUILD_NEEDS_ROOT):
        # refused with its name, not scored: the separated judge builds without root
        ev, sub = guard_details(result)
        return Verdict(Outcome.AGENT_FAILED, BUILD_NEEDS_ROOT, "error",
                       error=f"not scored: {(result.error_message or '')[:500]}",
                       eval=ev, submission=sub)
    if (result is not None and result.official_eval_status == "error"
            and result.error_cause == "agent"):
        ev, sub = guard_details(result)
        return Verdict(Outcome.AGENT_FAILED, SUBMISSION_BROKE_EVAL, "error", score=0.0,
                       resolved=False, near_resolved=False, tests_passed=0,
                       error=f"the submission made programbench eval fail: {result.error_code}: "
                             f"{(result.error_message or '')[:500]}", eval=ev, submission=sub)
    if result is None or result.official_eval_status != "completed" or result.score is None:
        code = result.error_code if result else "no_result"
        message = (result.error_message or "") if result else "the batch eval gave no result"
        return Verdict(Outcome.INFRA_FAILED, "official_eval_error", "error",
                       error=f"programbench eval produced no verdict: {code}: {message[:500]}")
    ev, sub = guard_details(result)
    partial = not completed
    if partial:
        sub.partial_scored = True
    return Verdict(
        Outcome.AGENT_FAILED if partial else Outcome.SCORED,
        (reason or "task_not_completed") if partial
        else ("resolved" if result.resolved else "unresolved"),
        "completed", score=result.score, resolved=False if partial else result.resolved,
        near_resolved=result.near_resolved, tests_passed=result.tests_passed,
        tests_total=result.tests_total, eval=ev, submission=sub,
        details={"executable_hash": result.executable_hash})
