"""Ledger rows of runs with repeated attempts (``--attempts K``, issue 24), written by hand.

An attempt's row has ``instance_id`` "<task>@<k>", ``sample_of`` "<task>" and ``sample`` k.
Nothing here parses the id: the figures group by ``sample_of``. Until the core's id check
admits the "@" (the runner's side of issue 24), :func:`attempt_id` falls back to
"<task>-at<k>"; only a selected attempt *without* a row is placed by its id, and the
selection's keys are plain strings, never checked, so those use "<task>@<k>" always.
"""

from __future__ import annotations

from typing import Any

from harness.core.models import Outcome, TaskRow, validate_instance_id
from tests.reports.report_runs import row


def attempt_id(task: str, k: int) -> str:
    contract = f"{task}@{k}"
    try:
        return validate_instance_id(contract)
    except ValueError:
        return f"{task}-at{k}"


def attempt_row(benchmark: str, task: str, k: int, run_id: str = "run-a", **fields: Any) -> TaskRow:
    """The row of attempt ``k`` at ``task``: scored unless ``fields`` say otherwise."""
    return row(f"{benchmark}/{attempt_id(task, k)}", run_id, sample_of=task, sample=k, **fields)


def scored(score: float, *, resolved: bool | None = None) -> dict[str, Any]:
    return {"score": score, "resolved": score >= 1.0 if resolved is None else resolved}


INFRA: dict[str, Any] = {
    "status": "infra_failed",
    "outcome": Outcome.INFRA_FAILED,
    "infra": True,
    "reason_code": "docker_unavailable",
    "score": None,
    "official_eval_status": "not_run",
}
AGENT_FAILED: dict[str, Any] = {
    "status": "failed",
    "outcome": Outcome.AGENT_FAILED,
    "reason_code": "agent_timeout",
    "score": None,
    "official_eval_status": "not_run",
}


def attempt_rows(
    scores: dict[str, list[float]], benchmark: str = "programbench", run_id: str = "run-a"
) -> list[TaskRow]:
    """One scored row per attempt: ``{"task": [score of attempt 1, 2, ...]}``."""
    return [
        attempt_row(benchmark, task, k, run_id, **scored(s))
        for task, values in scores.items()
        for k, s in enumerate(values, start=1)
    ]
