"""The ledger verdict of one official evaluation: one rule for per-task and batch scoring."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from benchmarks.programbench.official_eval import OfficialEvalResult
from harness.models import Outcome


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
    details: dict[str, Any] = field(default_factory=dict)

    def row_fields(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "reason_code": self.reason_code,
                "official_eval_status": self.official_eval_status, "score": self.score,
                "resolved": self.resolved, "near_resolved": self.near_resolved,
                "tests_passed": self.tests_passed, "tests_total": self.tests_total,
                "infra": self.outcome is Outcome.INFRA_FAILED}


def verdict(result: OfficialEvalResult | None, *, completed: bool,
            reason: str | None) -> Verdict:
    """No eval.json is an infrastructure failure, never a 0; partial work of an agent that
    did not finish is scored but stays ``agent_failed``."""
    if result is None or result.official_eval_status != "completed" or result.score is None:
        code = result.error_code if result else "no_result"
        message = (result.error_message or "") if result else "the batch eval gave no result"
        return Verdict(Outcome.INFRA_FAILED, "official_eval_error", "error",
                       error=f"programbench eval produced no verdict: {code}: {message[:500]}")
    details: dict[str, Any] = {"eval_error_code": result.error_code,
                               "executable_hash": result.executable_hash}
    partial = not completed
    if partial:
        details["partial_submission_scored"] = True
    return Verdict(
        Outcome.AGENT_FAILED if partial else Outcome.SCORED,
        (reason or "task_not_completed") if partial
        else ("resolved" if result.resolved else "unresolved"),
        "completed", score=result.score, resolved=False if partial else result.resolved,
        near_resolved=result.near_resolved, tests_passed=result.tests_passed,
        tests_total=result.tests_total, details=details)
