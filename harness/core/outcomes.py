"""The runner's outcome vocabulary and instance ids: plain Python, no pydantic, so that the
collection path (adapters, the worker hooks) loads none of the file models."""

from __future__ import annotations

import re
from enum import StrEnum

# report.user_properties names: the row an instance produced, and "this failure is infra".
ROW_PROPERTY = "harness_row"
INFRA_PROPERTY = "harness_infra"

INSTANCE_ID_RE = re.compile(r"^[A-Za-z0-9._-]+$")


def validate_instance_id(value: str) -> str:
    if not INSTANCE_ID_RE.match(value) or value in {".", ".."}:
        raise ValueError(
            f"invalid instance id {value!r}: use only letters, digits, '.', '_' and '-'"
        )
    return value


class Outcome(StrEnum):
    """The runner's common outcome of one instance; each benchmark maps it to its status."""

    SCORED = "scored"  # the official scorer gave a verdict
    AGENT_FAILED = "agent_failed"  # the agent did not complete; nothing (or partial) scored
    INFRA_FAILED = "infra_failed"  # Docker, network, gateway, budget plumbing: not the model
    BLOCKED = "blocked"  # budget or stop request kept it from starting
    NOT_ATTEMPTED = "not_attempted"  # the run ended before it started
    SKIPPED = "skipped"  # the benchmark declined it (e.g. no oracle solution)
    CARRIED = "carried_forward"  # settled in an ancestor run (resume)
    DRY_RUN = "dry_run"  # inputs prepared, nothing run


# Outcomes a resume keeps; the others are run again.
SETTLED_OUTCOMES = frozenset({Outcome.SCORED, Outcome.AGENT_FAILED})


def instance_key(benchmark: str, instance_id: str) -> str:
    return f"{benchmark}/{instance_id}"
