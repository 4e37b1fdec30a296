"""The one rule for a row's effective score, shared by the ledger tally and the report;
and the one rule for whether a selected unit has a verdict (issue 45: the honest
denominators, the raw score over every unit beside the score over those with a verdict).

A row is resolved when its benchmark said so (``resolved``, recorded from the adapter's own
vocabulary) or its score reached :data:`RESOLVED_AT`; the core knows no benchmark's status
words.
"""

from __future__ import annotations

from harness.core.models import RESOLVED_AT, Outcome, TaskRow

INFRA_STATUS = "infra_failed"


def row_is_infra(row: TaskRow) -> bool:
    return row.outcome is Outcome.INFRA_FAILED or row.infra or row.status == INFRA_STATUS


def row_is_resolved(row: TaskRow) -> bool:
    if row_is_infra(row):
        return False
    return row.resolved is True or (row.score is not None and row.score >= RESOLVED_AT)


def row_score(row: TaskRow) -> float:
    """Effective score: the row's score, else 1 for a resolved row, else 0 (0 when infra)."""
    if row_is_infra(row):
        return 0.0
    if row.score is not None:
        return float(row.score)
    return 1.0 if row_is_resolved(row) else 0.0


VERDICT_OUTCOMES = frozenset({Outcome.SCORED, Outcome.AGENT_FAILED, Outcome.CARRIED})
NO_ROW = "not_attempted"  # a selected unit the ledger has no row for


def no_verdict_reason(row: TaskRow | None) -> str | None:
    """Why a selected unit has no verdict, None when it has one: scored, the agent's failure
    (a 0 that counts), or carried from the ancestor that settled it. An infrastructure
    failure is named by its reason code; a unit without a row, blocked, skipped or only
    prepared, by its reason code or outcome."""
    if row is None:
        return NO_ROW
    if row_is_infra(row):
        return row.reason_code or INFRA_STATUS
    if row.outcome in VERDICT_OUTCOMES:
        return None
    return row.reason_code or row.outcome.value
