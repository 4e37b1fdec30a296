"""Pydantic models of every file the runner core writes.

`harness schema DIR` exports their JSON Schemas. Field names follow the seeds' sidecar
files (``ouroboros.benchmark.*``) where one exists, so their readers keep working.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

# The outcome vocabulary and instance ids live in harness.core.outcomes (no pydantic: the
# collection path imports them); re-exported here.
from harness.core.outcomes import INSTANCE_ID_RE as INSTANCE_ID_RE
from harness.core.outcomes import SETTLED_OUTCOMES as SETTLED_OUTCOMES
from harness.core.outcomes import Outcome as Outcome
from harness.core.outcomes import instance_key as instance_key
from harness.core.outcomes import validate_benchmark_name
from harness.core.outcomes import validate_instance_id as validate_instance_id

# The row's details sections live in harness.core.row_details; re-exported here (a benchmark
# reaches them through this module).
from harness.core.row_details import AgentDetails as AgentDetails
from harness.core.row_details import BudgetDetails as BudgetDetails
from harness.core.row_details import DetailsBag as DetailsBag
from harness.core.row_details import EngineDetails as EngineDetails
from harness.core.row_details import EvalDetails as EvalDetails
from harness.core.row_details import RowDetails as RowDetails
from harness.core.row_details import RunDetails as RunDetails
from harness.core.row_details import SubmissionDetails as SubmissionDetails
from harness.core.row_details import migrate

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


class ModelCalls(OpenModel):
    """The calls one instance made to one model, as one source saw them (issue 24)."""

    model: str  # the model name the call asked for (litellm's resolved name for mini-swe-agent)
    source: str  # "model_proxy", "mini_swe", "gateway_server", ...
    calls: int = 0
    refused: int = 0  # calls refused because the model is not pinned (403 model_not_allowed)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None  # None: unknown (never 0 for unknown)
    allowed: bool = True  # False: this model is neither --solve-model nor an --allow-model


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
    details: RowDetails = Field(default_factory=RowDetails)  # harness.core.row_details
    carried_from: str | None = None
    # Repeated attempts (--attempts K > 1): instance_id is "<sample_of>@<sample>", the task's
    # own id is sample_of and sample is 1..K. Both None for a K=1 run (ids unchanged).
    sample_of: str | None = None
    sample: int | None = None
    # The models the instance's agent called, per model and source (None: not recorded).
    models: list[ModelCalls] | None = None
    # The agent's own count of its steps (model calls), where it keeps one (None: it does not).
    steps: int | None = None

    @property
    def task_id(self) -> str:
        """The benchmark task this row is an attempt at (its instance id when K=1)."""
        return self.sample_of or self.instance_id

    if TYPE_CHECKING:  # ``details`` may be given as its JSON (flat keys of old rows too)
        def __init__(self, *, details: RowDetails | Mapping[str, Any] = ...,
                     **data: Any) -> None: ...

    @field_validator("instance_id")
    @classmethod
    def _check_iid(cls, value: str) -> str:
        return validate_instance_id(value)

    @field_validator("benchmark")
    @classmethod
    def _check_benchmark(cls, value: str) -> str:
        return validate_benchmark_name(value)  # a folder of the run root: never '../x'

    @model_validator(mode="before")
    @classmethod
    def _sectioned_details(cls, data: Any) -> Any:
        """A row of an earlier version (flat ``details``) is read in sections: known keys
        to theirs, the benchmark's own keys to its section (:func:`row_details.migrate`)."""
        if isinstance(data, dict) and isinstance(data.get("details"), dict):
            bench = data.get("benchmark")
            data = {**data, "details": migrate(data["details"],
                                               bench if isinstance(bench, str) else None)}
        return data

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
    # "requested": a run refused before collection records what its options asked for
    source: Literal["collection", "ancestor", "pending", "requested"] = "pending"


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



# --- run_manifest.json "extra": one typed section per writer ---------------------------------
# On disk "extra" stays the JSON object older runs wrote: a section is written only once it
# has been set (never as a new ``null``), a section's fields likewise, in the order first set.

Number = int | float  # an int stays an int on disk (5, not 5.0)
_M = TypeVar("_M", bound=BaseModel)


class Section(OpenModel):
    """A manifest section. What was read is written back unchanged: only the fields that
    were set (read or assigned) are written, in the order first set, with the keys this
    version does not model (``extra="allow"``). Reading is tolerant, as resume and reports
    read old runs: a field this version cannot read (another version's shape) reads as
    absent and is written back as it was. Strict: a value is never coerced (``"5"`` is not
    read as 5), so what is written back is what was read."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, strict=True)

    _order: list[str] = PrivateAttr(default_factory=list)  # keys in the order first set
    _unread: dict[str, Any] = PrivateAttr(default_factory=dict)  # kept verbatim

    @model_validator(mode="wrap")
    @classmethod
    def _tolerant(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if not isinstance(data, dict):
            return handler(data)
        unread: dict[str, Any] = {}
        try:
            model = handler(data)
        except ValidationError as exc:
            bad = {e["loc"][0] for e in exc.errors() if e["loc"]}
            if not bad:
                raise
            unread = {k: v for k, v in data.items() if k in bad}
            model = handler({k: v for k, v in data.items() if k not in bad})
        model._order = [str(k) for k in data]
        model._unread = unread
        return model

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if not name.startswith("_"):
            self._set(name)

    def _set(self, name: str) -> None:
        self._unread.pop(name, None)
        if name not in self._order:
            self._order.append(name)

    @property
    def unread(self) -> dict[str, Any]:
        """The keys read that this version could not read (kept, written back as they were)."""
        return dict(self._unread)

    @model_serializer(mode="wrap")
    def _as_read(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if not isinstance(data, dict):
            return data
        keep = self.model_fields_set | set(self.model_extra or {})
        out = {k: v for k, v in data.items() if k in keep}
        out.update(self._unread)
        rank = {k: i for i, k in enumerate(self._order)}
        return dict(sorted(out.items(), key=lambda kv: rank.get(kv[0], len(rank))))


class HostLoad(Section):
    """Load average at the run's start and end (the gate warns on an overloaded host)."""

    cpus: int | None = None
    start: list[Number] | None = None
    end: list[Number] | None = None


class BudgetRecord(Section):
    """The budget options a run admitted with; ``final`` is the monitor at session end
    (``harness.budget``'s model, a JSON object here: the core does not import budget)."""

    enabled: bool | None = None
    dry_run_untouched: bool | None = None
    campaign_file: str | None = None
    campaign_url: str | None = None  # --campaign-url, its password redacted
    budget_usd: Number | None = None
    per_task_reserve_usd: Number | None = None
    unknown_cost_allowance_usd: Number | None = None
    budget_reserve_usd: Number | None = None
    meter: str | None = None
    meter_blindness_sec: Number | None = None
    min_free_disk_gb: Number | None = None
    final: dict[str, Any] | None = None


class ImagePolicy(Section):
    pull: str | None = None
    mirror: str | None = None
    digest_file: str | None = None
    pins: int | None = None
    allow_image_change: bool | None = None
    disk_ceiling_gb: float | None = None  # --image-disk-ceiling-gb


class SweepsRecord(Section):
    """The sandbox layer's lease and sweeps: the lease, the startup sweep of dead runs'
    orphans, each crashed worker's sweep, and the final sweep (``{"removed": [...]}``,
    ``{"kept": true, ...}`` or ``{"error": ...}``)."""

    lease: dict[str, Any] | None = None
    startup: dict[str, Any] | None = None
    worker_crashes: list[dict[str, Any]] | None = None
    lease_release_error: str | None = None
    final: dict[str, Any] | None = None


class EngineSweep(Section):
    """What a crashed worker left on each engine (engine url -> what the sweep removed)."""

    worker: str | None = None
    engines: dict[str, Any] | None = None


class ResumeProvenance(Section):
    """The provenance changes a resume waived (reason, ancestor, detail, waived_by)."""

    waived: list[dict[str, Any]] | None = None


class SelectionChange(Section):
    """How a resume with its own selectors changed its ancestor's selection."""

    ancestor_selected: int | None = None
    selected: int | None = None
    added: int | None = None
    left_out: int | None = None


class DiagnosticWriteFailed(Section):
    failed_writes: int | None = None
    ledger_rows_unwritten: int | None = None


class InfraRetries(Section):
    """``--retry-infra N``: the instances run again within the run after an infrastructure
    failure (each try keeps its ledger row; the last one counts)."""

    limit: int | None = None  # N: most retries of one instance
    retries: int | None = None  # retries made
    by_reason: dict[str, int] | None = None  # retries made, by the failed try's reason code


class ManifestExtra(Section):
    """``run_manifest.json`` ``extra``: one optional section per writer (the comment names the
    module that writes it). Sections of other packages' models the core cannot import
    (layers) are JSON objects here. A benchmark's own section is an extra key, written and
    read only through :meth:`set_section` / :meth:`get_section` / :meth:`section`."""

    # harness.run.manifest (new_manifest, finalize)
    host_load: HostLoad | None = None
    # harness.runner.controller (a refused --run-root: the existing root)
    refused_run_root: str | None = None
    # harness.runner.agent_plugin (harness.agents models: agent, provenance, seed gate, preflight)
    agent: dict[str, Any] | None = None
    agent_source: dict[str, Any] | None = None
    # harness.runner.pacing_plugin (harness.model_proxy.pacing.PacingPolicy.record)
    model_pacing: dict[str, float | int | None] | None = None
    # harness.runner.deadline_plugin: each phase's deadline in seconds (None: none)
    phase_deadlines: dict[str, float | None] | None = None
    seed_gate: dict[str, Any] | None = None
    # harness.runner.agent_plugin (--settings-path: harness.agents.gateway.profile.ProfileCheck)
    settings_profile: dict[str, Any] | None = None
    target_runtime_actor: dict[str, Any] | None = None
    runtime_attestation: dict[str, Any] | None = None
    # harness.runner.engine_plugin (harness.sandbox.engines records)
    engines: list[dict[str, Any]] | None = None
    # harness.runner.budget_plugin
    budget: BudgetRecord | None = None
    # harness.runner.pull_plugin
    image_policy: ImagePolicy | None = None
    image_changes_allowed: list[str] | None = None
    # harness.runner.sandbox_fixtures (harness.sandbox.runtimes entry: name, path, args)
    sandbox_runtime: dict[str, Any] | None = None
    # harness.runner.sandbox_hooks
    sweeps: SweepsRecord | None = None
    # harness.runner.controller (resume provenance, selection)
    resume_provenance: ResumeProvenance | None = None
    benchmark_sizes: dict[str, int | None] | None = None
    resume_selection: SelectionChange | None = None
    # harness.runner.controller (issue 24): --attempts K when K > 1, or when a resume's K
    # differs from its ancestor's (a resume keeps it unless given another); absent: 1
    attempts: int | None = None
    # harness.runner.controller (issue 41): option -> "given" | "inherited" (a resume's),
    # the run model's settings provenance (harness.run.model.setting_sources); absent: default
    settings: dict[str, str] | None = None
    # harness.runner.controller (issue 24): --retry-infra, once an instance was retried
    infra_retries: InfraRetries | None = None
    # harness.runner.summary (issue 24): attempts per task, mean score with its interval,
    # pass@k, unstable tasks (harness.run.samples.SampleStats)
    samples: dict[str, Any] | None = None
    # harness.runner.controller and a benchmark's session scoring (a finishing step that failed)
    finish_errors: list[str] | None = None
    # harness.runner.engine_plugin (session end)
    engine_sweeps: list[EngineSweep] | None = None
    engine_final: dict[str, Any] | None = None
    engines_lost: list[str] | None = None
    # harness.runner.worker (harness.run.secrets.run_scan)
    secret_scan: dict[str, Any] | None = None
    # harness.runner.controller (ledger rows a failed write kept in memory)
    diagnostic_write_failed: DiagnosticWriteFailed | None = None
    # harness.run.merge (a merged run: its shards and the union of their reasons)
    merged_from: list[str] | None = None
    merged_not_reportable: list[str] | None = None
    # torn last lines of the ancestors' ledgers a resume moved aside (harness.run.ledger)
    torn_tails_set_aside: list[dict[str, str | int]] | None = None
    # one mean score per benchmark of the selection (never one across benchmarks)
    mean_score_by_benchmark: dict[str, float] | None = None
    # tools that appended rows to a finished run and brought its figures in line (rescore)
    figures_refreshed: list[dict[str, str | float]] | None = None
    # Written by a benchmark, read by the core: the official summary files the report
    # shows (relative *.txt paths; reports.build) and a benchmark's own reasons the run is
    # not reportable (benchmark name -> reasons; harness.run.manifest.reportability).
    official_summaries: list[str] | None = None
    not_reportable_by_benchmark: dict[str, list[str]] | None = None

    def _benchmark_key(self, name: str) -> str:
        if name in type(self).model_fields or name.startswith("_"):
            raise ValueError(f"{name!r} is a runner section of the manifest, not a benchmark's")
        return name

    def set_section(self, name: str, value: BaseModel | dict[str, Any]) -> None:
        """Write benchmark section ``name`` (its model's JSON, by alias)."""
        key = self._benchmark_key(name)
        data = value.model_dump(mode="json", by_alias=True) if isinstance(value, BaseModel) \
            else dict(value)
        if self.__pydantic_extra__ is None:
            self.__pydantic_extra__ = {}
        self.__pydantic_extra__[key] = data
        self._set(key)

    def section(self, name: str) -> Any:
        """Benchmark section ``name`` as written (JSON), None when absent."""
        return (self.model_extra or {}).get(self._benchmark_key(name))

    def get_section(self, name: str, model: type[_M]) -> _M | None:
        """Benchmark section ``name`` read as ``model``; None when absent or not readable."""
        raw = self.section(name)
        if raw is None:
            return None
        try:
            return model.model_validate(raw)
        except ValidationError:
            return None


class VerdictScore(StrictModel):
    """The mean score over the selected units that have a verdict (harness.core.scoring:
    scored, the agent's failure, or carried), with those left out and why (reason ->
    count). Shown beside the raw mean over every unit, never alone."""

    mean_score: float | None = None  # None: several benchmarks (one mean each), or no unit
    units: int = 0
    excluded: int = 0
    excluded_reasons: dict[str, int] = Field(default_factory=dict)
    by_benchmark: dict[str, float] | None = None


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
    # beside mean_score (every selected unit, missing counts 0): the units with a verdict
    verdict_score: VerdictScore | None = None
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
    # "12 of 200 tasks: not the benchmark score" when the selection is a subset.
    subset_notice: str | None = None
    extra: ManifestExtra = Field(default_factory=ManifestExtra)

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

    @property
    def runs_nothing(self) -> bool:
        """Every selected instance is carried from an ancestor: the run starts no
        sandbox and calls no agent (a resume of a settled run)."""
        return self.selection is not None and all(k in self.carried for k in self.selection)
