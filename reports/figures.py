"""Pydantic models of every file this package writes: ``report.json`` and the compare JSON.

Both are pure functions of the runs' ledgers and manifests: no wall-clock time, no host
path other than what the manifest records, so regenerating them gives the same bytes.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from harness.core.models import ModelCalls, StrictModel
from harness.run.samples import SampleStats

FIGURES_SCHEMA = "harness.report.v1"
COMPARE_SCHEMA = "harness.compare.v1"

NOT_ATTEMPTED = "not_attempted"


class FiguresModel(StrictModel):
    """A model whose newer optional fields (:attr:`OMIT_NONE`) are left out of its JSON while
    unset, so a file without them (a K=1 run, rows without models) keeps its old bytes."""

    OMIT_NONE: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if not isinstance(data, dict) or not self.OMIT_NONE:
            return data
        return {k: v for k, v in data.items() if not (k in self.OMIT_NONE and v is None)}


class InstanceResult(FiguresModel):
    """The result of one instance as the report sees it (one per selected key)."""

    key: str
    benchmark: str
    instance_id: str
    attempted: bool  # the ledger has a row for it
    in_selection: bool = True
    status: str  # the benchmark's own vocabulary; "not_attempted" without a row
    outcome: str
    reason_code: str | None = None
    score: float = 0.0  # effective score: missing counts 0
    raw_score: float | None = None  # as written in the row
    resolved: bool = False
    near_resolved: bool = False
    infra: bool = False
    carried: bool = False
    carried_from: str | None = None
    official_eval_status: str | None = None
    tests_passed: int | None = None
    tests_total: int | None = None
    cost_usd: float | None = None
    cost_known: bool = False
    duration_s: float | None = None
    attempt: int | None = None
    worker: str | None = None
    error: str | None = None
    output_paths: dict[str, str] = Field(default_factory=dict)
    # Repeated attempts (K > 1): the task this row is an attempt at ("benchmark/task_id")
    # and the attempt's number; None for a K=1 run.
    task: str | None = None
    sample: int | None = None
    # The models the row's calls named (per model and source), None when not recorded; the
    # flag says when a call named a model that was not allowed or was refused.
    models: list[ModelCalls] | None = None
    model_flag: str | None = None
    # A rescore changed the row's score after its eval (``details.rescore``): "old -> new:
    # the rule", shown with the row so a reader sees which instances changed and why.
    rescored: str | None = None
    # why the unit has no verdict (None: it has one; harness.core.scoring)
    no_verdict: str | None = None
    # the provider's pushback the row's gateway met (details.model_trouble): 429s,
    # retries, seconds waited, streams cut, failed calls
    model_trouble: dict[str, float] | None = None

    OMIT_NONE: ClassVar[frozenset[str]] = frozenset({"task", "sample", "models", "model_flag",
                                                     "rescored", "no_verdict",
                                                     "model_trouble"})

    @property
    def task_key(self) -> str:
        """The task this result is an attempt at (its key for a K=1 run)."""
        return self.task or self.key


class RateSet(StrictModel):
    """Headline rates over one denominator (the selection, or the selection minus infra)."""

    denominator: int
    mean_score: float | None
    resolved: int
    resolved_rate: float | None
    near_resolved: int
    near_resolved_rate: float | None
    pass_at_1: float | None


class CostTotals(StrictModel):
    known_usd: float = 0.0  # spent in this run, rows whose cost is known
    known_rows: int = 0
    unknown_rows: int = 0  # attempted in this run, cost unknown
    carried_usd: float = 0.0  # spent in ancestor runs on carried-forward instances


class DurationStats(StrictModel):
    count: int = 0
    total_s: float = 0.0
    mean_s: float | None = None
    median_s: float | None = None
    p90_s: float | None = None
    max_s: float | None = None


class Headline(StrictModel):
    selected: int
    attempted: int
    not_attempted: int
    infra_failed: int
    carried: int
    binary: bool  # every score is 0 or 1 (pass/fail benchmarks such as Cowork Bench)
    raw: RateSet
    # over the units with a verdict (harness.core.scoring.no_verdict_reason), beside raw:
    # the excluded units by reason (infra failures by their code, not attempted, blocked)
    with_verdict: RateSet
    excluded_reasons: dict[str, int] = Field(default_factory=dict)
    counts: dict[str, int]  # by status, "not_attempted" for selected keys without a row
    outcome_counts: dict[str, int]
    cost: CostTotals
    duration: DurationStats


class Provenance(StrictModel):
    run_id: str
    run_root: str
    created_at: str
    finished_at_unix: float | None
    outcome: str
    exit_code: int | None
    stop_reason: str | None
    argv: list[str]
    benchmarks: list[str]
    benchmark_versions: dict[str, str]
    harness_version: str
    python: str
    pytest: str
    platform: str
    git_head: str | None
    git_branch: str | None
    git_dirty: bool | None
    config_fingerprint: str
    dry_run: bool
    workers: int
    shard: str | None
    selection_source: str
    resume_ancestors: list[str]
    resume_generation: int
    reportable: bool | None = None  # None: a manifest older than the rule
    not_reportable: list[str] = Field(default_factory=list)
    subset_notice: str | None = None  # "12 of 200 tasks: not the benchmark score"


class OfficialSummary(StrictModel):
    path: str  # relative to the run root
    present: bool
    sha256: str | None = None


class BootstrapInterval(StrictModel):
    mean_diff: float | None
    low: float | None
    high: float | None
    level: float
    resamples: int
    seed: int
    method: Literal["percentile"] = "percentile"


class McNemarResult(StrictModel):
    b: int  # resolved in A only
    c: int  # resolved in B only
    discordant: int
    exact_p: float  # two-sided exact binomial
    chi2: float  # with continuity correction
    chi2_p: float


Change = Literal["gained", "lost", "improved", "regressed", "same"]


class PairedChange(FiguresModel):
    key: str  # the task (its instance key for a K=1 run)
    status_a: str
    status_b: str
    score_a: float
    score_b: float
    delta: float
    resolved_a: bool
    resolved_b: bool
    infra_a: bool
    infra_b: bool
    change: Change
    # Repeated attempts: the attempts behind each side's mean score and resolved fraction
    # (None, and left out of the JSON, when both runs have one attempt per task).
    attempts_a: int | None = None
    attempts_b: int | None = None
    resolved_rate_a: float | None = None
    resolved_rate_b: float | None = None

    OMIT_NONE: ClassVar[frozenset[str]] = frozenset(
        {"attempts_a", "attempts_b", "resolved_rate_a", "resolved_rate_b"}
    )


class RunRef(StrictModel):
    run_id: str
    run_root: str
    selected: int


class CompareReport(FiguresModel):
    """``harness compare --json``: B minus A on the instances both runs selected.

    Paired by task: with repeated attempts, a task's score is the mean over its selected
    attempts and the bootstrap resamples tasks (each with its attempts)."""

    schema_: str = Field(default=COMPARE_SCHEMA, alias="schema")
    run_a: RunRef
    run_b: RunRef
    shared: int
    only_a: list[str]
    only_b: list[str]
    mean_a: float | None
    mean_b: float | None
    resolved_a: int
    resolved_b: int
    bootstrap: BootstrapInterval
    mcnemar: McNemarResult
    infra_a: list[str]  # shared keys infra_failed in A
    infra_b: list[str]
    warnings: list[str]
    changes: list[PairedChange]  # every shared key, sorted by key
    # Repeated attempts: the most attempts one task has in each run, and the attempts behind
    # the shared tasks (None, and left out, when both runs have one attempt per task).
    attempts_per_task_a: int | None = None
    attempts_per_task_b: int | None = None
    shared_attempts_a: int | None = None
    shared_attempts_b: int | None = None

    OMIT_NONE: ClassVar[frozenset[str]] = frozenset(
        {"attempts_per_task_a", "attempts_per_task_b", "shared_attempts_a", "shared_attempts_b"}
    )


class ModelTotal(StrictModel):
    """One model's calls over the run's selected rows, as one source reported them (a model
    that was not allowed has its own total: the calls refused, or forwarded by a source
    that does not pin)."""

    model: str
    source: str
    instances: int  # rows whose calls named it
    calls: int
    refused: int
    prompt_tokens: int | None  # None: no row reported them
    completion_tokens: int | None
    cost_usd: float | None  # over the rows that reported a cost; None: none did
    cost_unknown_rows: int  # rows that named it without a cost
    allowed: bool  # False: neither the declared model nor an allowed helper


class FlaggedRow(StrictModel):
    key: str
    flag: str


class ModelUse(StrictModel):
    """The models the run's rows called (rows that recorded them), and the flagged rows."""

    rows_recorded: int  # selected rows with a models list
    rows_unrecorded: int  # attempted rows without one
    totals: list[ModelTotal]
    flagged: list[FlaggedRow]
    # the rows that met the provider's pushback, and its sums (None: none did)
    trouble: dict[str, float] | None = None


class ReportFigures(FiguresModel):
    """``report.json``: every figure the HTML and Markdown pages show."""

    schema_: str = Field(default=FIGURES_SCHEMA, alias="schema")
    provenance: Provenance
    headline: Headline
    by_benchmark: dict[str, Headline]
    instances: list[InstanceResult]  # selected keys, sorted
    outside_selection: list[InstanceResult]  # ledger rows whose key is not selected
    official_summaries: list[OfficialSummary]
    warnings: list[str]
    compare: CompareReport | None = None
    # Repeated attempts (K > 1) and the models the rows called: left out while unset.
    samples: SampleStats | None = None
    models: ModelUse | None = None

    OMIT_NONE: ClassVar[frozenset[str]] = frozenset({"samples", "models"})
