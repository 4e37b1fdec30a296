"""The runner's outcome vocabulary and instance ids: plain Python, no pydantic, so that the
collection path (adapters, the worker hooks) loads none of the file models."""

from __future__ import annotations

import re
from enum import StrEnum

# report.user_properties names: the row an instance produced, and "this failure is infra".
ROW_PROPERTY = "harness_row"
INFRA_PROPERTY = "harness_infra"

# A benchmark task's id (what an adapter's InstanceSpec carries).
INSTANCE_ID_RE = re.compile(r"^[A-Za-z0-9._-]+\Z")  # \Z: no final newline either
# One of K attempts at a task (``--attempts K``, K > 1): ``<task id>@<k>``, k = 1..K. The
# run's instance key, folder and row name the attempt; the task keeps its own id.
ATTEMPT_ID_RE = re.compile(r"^([A-Za-z0-9._-]+)@([1-9][0-9]*)\Z")


def validate_task_id(value: str) -> str:
    """A benchmark task's id: letters, digits, '.', '_' and '-' (never '.' or '..')."""
    if not INSTANCE_ID_RE.match(value) or value in {".", ".."}:
        raise ValueError(
            f"invalid instance id {value!r}: use only letters, digits, '.', '_' and '-'"
        )
    return value


def validate_benchmark_name(value: str) -> str:
    """A benchmark's name as a run records it (a folder of the run root): letters, digits,
    '.', '_' and '-' (never '.' or '..')."""
    if not INSTANCE_ID_RE.match(value) or value in {".", ".."}:
        raise ValueError(
            f"invalid benchmark name {value!r}: use only letters, digits, '.', '_' and '-'")
    return value


def validate_instance_id(value: str) -> str:
    """A run's instance id: a task id, or one attempt at it (``<task id>@<k>``, k >= 1)."""
    match = ATTEMPT_ID_RE.match(value)
    if match is not None:
        validate_task_id(match.group(1))
        return value
    return validate_task_id(value)


def attempt_id(task_id: str, sample: int | None) -> str:
    """The instance id of attempt ``sample`` at a task (the task's id when None: K=1)."""
    return task_id if sample is None else f"{task_id}@{sample}"


def split_attempt(instance_id: str) -> tuple[str, int | None]:
    """``(task id, k)`` of an attempt's id ``<task id>@<k>``; ``(instance_id, None)`` else."""
    match = ATTEMPT_ID_RE.match(instance_id)
    if match is None:
        return instance_id, None
    return match.group(1), int(match.group(2))


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
