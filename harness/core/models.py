"""Pydantic models of every file the runner core writes.

`harness schema DIR` exports their JSON Schemas. Field names follow the seeds' sidecar
files (``ouroboros.benchmark.*``) where one exists, so their readers keep working.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# The outcome vocabulary and instance ids live in harness.core.outcomes (no pydantic: the
# collection path imports them); re-exported here.
from harness.core.outcomes import INSTANCE_ID_RE as INSTANCE_ID_RE
from harness.core.outcomes import SETTLED_OUTCOMES as SETTLED_OUTCOMES
from harness.core.outcomes import Outcome as Outcome
from harness.core.outcomes import instance_key as instance_key
from harness.core.outcomes import validate_instance_id as validate_instance_id

ROW_SCHEMA = "harness.task_result.v1"
MANIFEST_SCHEMA = "harness.run_manifest.v1"
PLAN_SCHEMA = "harness.plan.v1"
MERGE_SCHEMA = "harness.merge.v1"

# Resolved: every scored test passed. A benchmark's "near-resolved" threshold, if it has
# one, is its adapter's ``near_resolved_at``.
RESOLVED_AT = 1.0

class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class OpenModel(BaseModel):
    """Tolerant model for files other tools (or later versions) may extend."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


class Tokens(OpenModel):
    prompt: int | None = None
    completion: int | None = None
    total: int | None = None


class TaskRow(OpenModel):
    """One line of ``result_index.jsonl``: the terminal record of one instance attempt."""

    schema_: str = Field(default=ROW_SCHEMA, alias="schema")
    ts_unix: float
    run_id: str
    benchmark: str
    instance_id: str
    status: str
    outcome: Outcome
    reason_code: str | None = None
    attempt: int = 1
    worker: str = "main"
    nodeid: str | None = None
    duration_s: float | None = None
    score: float | None = None
    resolved: bool | None = None
    near_resolved: bool | None = None
    infra: bool = False
    official_eval_status: str = "not_run"
    tests_passed: int | None = None
    tests_total: int | None = None
    cost_usd: float | None = None
    cost_known: bool = False
    # Did the agent spend anything? False: never started, or known free; True: cost or
    # tokens recorded; None: it started and nothing says what it spent (assume it did).
    paid_activity: bool | None = None
    tokens: Tokens | None = None
    prediction_written: bool = False
    output_paths: dict[str, str] = Field(default_factory=dict)
    error: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)
    carried_from: str | None = None

    @field_validator("instance_id")
    @classmethod
    def _check_iid(cls, value: str) -> str:
        return validate_instance_id(value)

    @property
    def key(self) -> str:
        return instance_key(self.benchmark, self.instance_id)

    @property
    def settled(self) -> bool:
        """True when a resume carries this row forward instead of running it again."""
        if self.official_eval_status == "pending":
            return False  # scored at session end (batch eval) that never came
        return self.outcome in SETTLED_OUTCOMES or (
            self.outcome is Outcome.CARRIED and self.carried_from is not None
        )

    def dump_line(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=False)


class ShardSpec(StrictModel):
    index: int  # 1-based
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


class GitState(OpenModel):
    available: bool = False
    head: str | None = None
    branch: str | None = None
    describe: str | None = None
    dirty: bool | None = None
    status_sha256: str | None = None
    tracked_diff_sha256: str | None = None
    error: str | None = None


class Versions(OpenModel):
    harness: str
    python: str
    pytest: str
    xdist: str | None = None
    platform: str


class Selection(StrictModel):
    resolved: bool = False
    instance_ids: list[str] = Field(default_factory=list)  # keys "benchmark/instance_id"
    count: int = 0
    selectors: dict[str, Any] = Field(default_factory=dict)
    source: Literal["collection", "ancestor", "pending"] = "pending"


class ResumeInfo(StrictModel):
    ancestors: list[str] = Field(default_factory=list)  # run roots, nearest first
    ancestor_run_ids: list[str] = Field(default_factory=list)
    generation: int = 0
    carried: int = 0
    to_run: int = 0


class Refusal(StrictModel):
    stage: str
    reason: str
    message: str


class Checkpoint(StrictModel):
    phase: str
    at_unix: float


class Manifest(OpenModel):
    """``run_manifest.json``: written first, checkpointed, finalized on every exit path."""

    schema_: str = Field(default=MANIFEST_SCHEMA, alias="schema")
    run_id: str
    run_root: str
    created_at_unix: float
    created_at: str
    argv: list[str]
    cwd: str
    benchmarks: list[str] = Field(default_factory=list)
    benchmark_versions: dict[str, str] = Field(default_factory=dict)
    versions: Versions
    source: GitState
    selection: Selection = Field(default_factory=Selection)
    shard: ShardSpec | None = None
    dry_run: bool = False
    workers: int = 0
    config: dict[str, Any] = Field(default_factory=dict)
    config_fingerprint: str = ""
    resume: ResumeInfo = Field(default_factory=ResumeInfo)
    outcome: str = "running"
    exit_code: int | None = None
    stop_reason: str | None = None
    counts: dict[str, int] = Field(default_factory=dict)
    outcome_counts: dict[str, int] = Field(default_factory=dict)
    mean_score: float | None = None
    refusal: Refusal | None = None
    error: dict[str, str] | None = None
    checkpoint: Checkpoint | None = None
    finished_at_unix: float | None = None
    resume_command: str | None = None
    # key -> the image the instance ran in (ref, pulled_from, repo_digest, id): pinning
    images: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # False when the agent's source is unknown (no --agent-repo) or dirty, or a resume
    # waived a provenance change; the reasons say which (see harness.run.manifest.reportability).
    reportable: bool | None = None
    not_reportable: list[str] = Field(default_factory=list)
    # "12 of 200 selected: not the benchmark score" when the selection is a subset.
    subset_notice: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict)

    @property
    def finalized(self) -> bool:
        return self.exit_code is not None


class Plan(StrictModel):
    """``plan.json``: frozen before any worker starts; every worker collects from it."""

    schema_: str = Field(default=PLAN_SCHEMA, alias="schema")
    run_id: str
    created_at_unix: float
    dry_run: bool = False
    shard: ShardSpec | None = None
    # When set, only these keys ("benchmark/instance_id") are selected (resume without selectors).
    selection: list[str] | None = None
    # Rows settled in an ancestor, carried forward as skipped rows (key -> ancestor row).
    carried: dict[str, TaskRow] = Field(default_factory=dict)
    # Attempt number for each key that runs again (ancestor attempts + 1).
    attempts: dict[str, int] = Field(default_factory=dict)
    # Run roots of the ancestors, nearest first (resume).
    ancestors: list[str] = Field(default_factory=list)
