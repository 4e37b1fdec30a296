"""The row's ``details``: one typed section per concern, and one free section per benchmark.

A ledger row (``TaskRow``) keeps what its figures do not say in ``details``::

    {"agent": {...}, "submission": {...}, "budget": {...}, "engine": {...},
     "eval": {...}, "run": {...}, "<benchmark>": {...}}

Each runner section is a model here (:class:`AgentDetails`, ...); the section named after the
row's benchmark (``details[<benchmark>]``, :attr:`harness.runner.trial.Trial.details`) is the
benchmark's own JSON object, free. A section is written only once something was set in it,
and only the fields that were set.

Rows written before the sections (flat keys: ``details["budget_charged_usd"]``,
``details["agent"] = "gateway"``, a benchmark's own keys at the top) are still read: validating
a row moves every known flat key into its section (:data:`LEGACY`) and every other flat key
into the benchmark's section (:func:`migrate`), so resume, merge and the reports read old
ledgers as new ones. A value of the wrong type is refused, naming the section and field.

While an instance runs its details are a :class:`DetailsBag` (a dict in the row's shape): the
runner writes a section through its model (``BudgetDetails(overrun=False).put(bag)``);
writers not yet moved write flat keys, migrated when the row is built.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

_S = TypeVar("_S", bound="DetailSection")


class DetailSection(BaseModel):
    """One runner section of a row's details. Strict (a value is never coerced) and checked
    on assignment; keys this version does not model are kept (``extra="allow"``)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, strict=True,
                              validate_assignment=True)
    KEY: ClassVar[str]

    @model_serializer(mode="wrap")
    def _set_only(self, handler: SerializerFunctionWrapHandler) -> Any:
        if self.is_empty():  # most sections of most rows: nothing to serialize
            return {}
        data = handler(self)
        if not isinstance(data, dict):
            return data
        keep = set(self.model_fields_set) | set(self.model_extra or {})
        fields = type(self).model_fields
        keep |= {fields[n].alias or n for n in self.model_fields_set if n in fields}
        return {k: v for k, v in data.items() if k in keep}

    def is_empty(self) -> bool:
        return not self.model_fields_set and not self.model_extra

    @classmethod
    def read(cls: type[_S], details: Mapping[str, Any]) -> _S:
        """This section of ``details`` (a row's JSON or a running instance's bag, flat legacy
        keys included); empty when absent."""
        return cls.model_validate(migrate(details).get(cls.KEY) or {})

    def put(self, details: MutableMapping[str, Any]) -> None:
        """Merge the fields set here into this section of ``details`` (a running instance's
        :class:`DetailsBag`): a field set again replaces the one there."""
        if self.is_empty():
            return
        current = details.get(self.KEY)
        merged = dict(current) if isinstance(current, Mapping) else {}
        merged.update(self.model_dump(mode="json", by_alias=True))
        details[self.KEY] = merged


class AgentDetails(DetailSection):
    """What the agent did (harness.runner.agent_plugin, the agents' hooks, the trial)."""

    KEY: ClassVar[str] = "agent"
    kind: str | None = None  # the agent kind ("gateway", "mini-swe-agent", "oracle", ...)
    cost_source: str | None = None  # "agent_reported", "gateway", "replay", "unknown", ...
    runtime_outcome: dict[str, Any] | None = None  # harness.agents.base.RuntimeOutcome
    task_id: str | None = None  # the agent's own task (a gateway task)
    truncated: bool | None = None
    details: dict[str, Any] | None = None  # the agent's own (AgentOutcome.details): steps,
    # exit status, orphan_tasks, tool_route, reattachable, sandbox_exit, ...
    model_trouble: dict[str, Any] | None = None  # the provider's pushback (429s, 5xx, ...)
    model_upstream_failure: str | None = None
    model_record: dict[str, Any] | None = None  # --model-record: the tape session's summary
    model_replay: dict[str, Any] | None = None  # --model-replay: the same
    paid_evidence: str | None = None  # what the agent folder proves was spent
    checkpoint_from: str | None = None  # the ancestor's checkpoint a reattach carried
    reattach: dict[str, Any] | None = None  # a resume's reattach to a kept sandbox
    kept_sandbox: dict[str, Any] | None = None  # kept running for a resume after a give-up
    redo_existing: dict[str, Any] | None = None  # --pb-redo-existing: what was cleared
    wall_s: float | None = None  # the agent phase's wall time (the trial)
    outcome: dict[str, Any] | None = None  # the benchmark's view: completed, reason


class SubmissionDetails(DetailSection):
    """What the agent submitted, as the benchmark collected and guarded it."""

    KEY: ClassVar[str] = "submission"
    files: int | None = None
    bytes: int | None = None
    sha256: str | None = None
    sha256_scored: str | None = None  # after the scorer guard, when it changed anything
    protected_dropped: list[str] | None = None
    refused: dict[str, Any] | None = None  # why the submission was refused
    probe_error: str | None = None  # the workspace probe failed
    scorer_files_removed: list[str] | None = None
    scorer_files_rewritten: list[str] | None = None
    scorer_build_files_removed: list[str] | None = None
    scorer_guard_error: str | None = None
    partial_scored: bool | None = None  # an unfinished agent's work was scored


class BudgetDetails(DetailSection):
    """The budget's settlement of the instance (harness.runner.budget_plugin)."""

    KEY: ClassVar[str] = "budget"
    charged_usd: float | None = None  # this attempt's and the earlier attempts' it settled
    earlier_attempts_usd: float | None = None
    overrun: bool | None = None
    settlement_error: str | None = None  # the campaign could not be written


class EngineDetails(DetailSection):
    """Where the instance ran (harness.runner.engine_plugin, the trial's sandbox and image)."""

    KEY: ClassVar[str] = "engine"
    url: str | None = None  # the engine placed on (--engine), with its index
    index: int | None = None
    lost: bool | None = None  # the engine stopped answering during the instance
    error: str | None = None  # the instance's failure when the engine was found lost
    container: str | None = None  # the agent's sandbox
    image: dict[str, Any] | None = None  # ref, id, digest, pulled, ceiling, ...
    cleanup: dict[str, Any] | None = None  # what was removed (or kept) at the end


class EvalDetails(DetailSection):
    """The official evaluation of the submission."""

    KEY: ClassVar[str] = "eval"
    error_code: str | None = None
    timings: dict[str, Any] | None = None  # seconds per phase
    test_plugins: dict[str, Any] | None = None
    network: str | None = None
    interrupted: list[str] | None = None  # eval files an interrupt left unfinished
    pending: dict[str, Any] | None = None  # scored at session end (batch eval)
    passed: bool | None = Field(default=None, alias="pass")  # a checker's verdict
    exit_code: int | None = None
    checker_output_tail: str | None = None
    phase: dict[str, Any] | None = None
    rescore: dict[str, Any] | None = None  # the rule a rescore applied
    rescored_from: dict[str, Any] | None = None  # the kept submission scored again
    official_parity: dict[str, Any] | None = None  # the score disagreed with the official


class RunDetails(DetailSection):
    """The runner's record of the attempt (harness.runner.instance, worker, harness.run)."""

    KEY: ClassVar[str] = "run"
    carried_status: str | None = None  # a carried row: the ancestor's status and outcome
    carried_outcome: str | None = None
    retry_of: dict[str, Any] | None = None  # --retry-infra: the try this one repeats
    retried: dict[str, Any] | None = None  # --retry-infra: this try is run again
    teardown_error: str | None = None
    traceback: str | None = None
    secret_hits: list[dict[str, Any]] | None = None
    secret_scan_error: str | None = None
    secret_scan_errors: list[Any] | None = None


SECTIONS: tuple[type[DetailSection], ...] = (
    AgentDetails, SubmissionDetails, BudgetDetails, EngineDetails, EvalDetails, RunDetails)
SECTION_KEYS = frozenset(s.KEY for s in SECTIONS)

# Flat key of a row written before the sections -> (section, field).
LEGACY: dict[str, tuple[str, str]] = {
    **{k: ("agent", k) for k in (
        "cost_source", "runtime_outcome", "task_id", "truncated", "model_trouble",
        "model_upstream_failure", "model_record", "model_replay", "paid_evidence",
        "checkpoint_from", "reattach", "kept_sandbox", "redo_existing")},
    "agent_details": ("agent", "details"),
    "agent_wall_s": ("agent", "wall_s"),
    "agent_outcome": ("agent", "outcome"),
    **{k: ("submission", k) for k in (
        "scorer_files_removed", "scorer_files_rewritten", "scorer_build_files_removed",
        "scorer_guard_error")},
    "submission_refused": ("submission", "refused"),
    "workspace_probe_error": ("submission", "probe_error"),
    "partial_submission_scored": ("submission", "partial_scored"),
    "budget_charged_usd": ("budget", "charged_usd"),
    "budget_earlier_attempts_usd": ("budget", "earlier_attempts_usd"),
    "budget_overrun": ("budget", "overrun"),
    "budget_settlement_error": ("budget", "settlement_error"),
    "engine_lost": ("engine", "lost"),
    "engine_error": ("engine", "error"),
    **{k: ("engine", k) for k in ("container", "image", "cleanup")},
    "eval_error_code": ("eval", "error_code"),
    "eval_test_plugins": ("eval", "test_plugins"),
    "eval_network": ("eval", "network"),
    "eval_interrupted": ("eval", "interrupted"),
    "eval_pending": ("eval", "pending"),
    "eval_phase": ("eval", "phase"),
    **{k: ("eval", k) for k in ("timings", "rescore", "rescored_from", "official_parity")},
    **{k: ("run", k) for k in (
        "carried_status", "carried_outcome", "retry_of", "retried", "teardown_error",
        "traceback", "secret_hits", "secret_scan_error", "secret_scan_errors")},
}


def migrate(details: Mapping[str, Any] | None, benchmark: str | None = None) -> dict[str, Any]:
    """``details`` in the sectioned shape: known flat keys (:data:`LEGACY`, and ``agent``
    as the agent's kind) into their sections, any other flat key into the section of
    ``benchmark`` (kept at the top when it is not known). A flat key set beside its section
    is the later write and wins. Details already in sections are returned as they are."""
    out: dict[str, Any] = {}
    flat: dict[str, dict[str, Any]] = {}
    for key, value in (details or {}).items():
        if key == "agent" and isinstance(value, str):
            flat.setdefault("agent", {})["kind"] = value
        elif key in LEGACY:
            section, name = LEGACY[key]
            flat.setdefault(section, {})[name] = value
        elif key in SECTION_KEYS or benchmark is None or key == benchmark:
            out[key] = dict(value) if isinstance(value, Mapping) else value
        else:
            flat.setdefault(benchmark, {})[key] = value
    for section, values in flat.items():
        current = out.get(section)
        out[section] = {**(current if isinstance(current, Mapping) else {}), **values}
    return out


class _ItemsByGet:
    """``details[key]`` as ``details.get(key)``, a missing key a ``KeyError`` (so the flat
    names of the rows before the sections read from their section here too)."""

    if TYPE_CHECKING:  # the class's own (a dict's, a model's), never this mixin's
        def get(self, key: str, default: Any = None) -> Any: ...

    def __getitem__(self, key: str) -> Any:
        missing = object()
        value = self.get(key, missing)
        if value is missing:
            raise KeyError(key)
        return value


class RowDetails(_ItemsByGet, BaseModel):
    """A row's ``details``: the runner's typed sections (agent, submission, budget, engine,
    eval, run) and one free section per benchmark, named after it (a JSON object)."""

    model_config = ConfigDict(extra="allow", strict=True, validate_assignment=True,
                              json_schema_extra={"additionalProperties": {"type": "object"}})

    agent: AgentDetails = Field(default_factory=AgentDetails)
    submission: SubmissionDetails = Field(default_factory=SubmissionDetails)
    budget: BudgetDetails = Field(default_factory=BudgetDetails)
    engine: EngineDetails = Field(default_factory=EngineDetails)
    eval: EvalDetails = Field(default_factory=EvalDetails)
    run: RunDetails = Field(default_factory=RunDetails)

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        out = migrate(data)
        for key, value in out.items():
            if key not in SECTION_KEYS and not isinstance(value, Mapping):
                raise ValueError(f"details[{key!r}] is not a section (a JSON object): "
                                 f"{type(value).__name__}")
        return out

    @classmethod
    def of(cls, details: Mapping[str, Any] | None, benchmark: str | None = None) -> RowDetails:
        """The details of a row of ``benchmark`` (its flat keys to its section: :func:`migrate`)."""
        return cls.model_validate(migrate(details, benchmark))

    @model_serializer(mode="wrap")
    def _sections(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if not isinstance(data, dict):
            return data
        return {k: v for k, v in data.items() if v or k not in SECTION_KEYS}  # {}: empty

    def section(self, name: str) -> dict[str, Any] | None:
        """Benchmark ``name``'s own section (a JSON object), None when absent."""
        if name in SECTION_KEYS:
            raise ValueError(f"{name!r} is a runner section of the details, not a benchmark's")
        value = (self.model_extra or {}).get(name)
        return value if isinstance(value, dict) else None

    def get(self, key: str, default: Any = None) -> Any:
        """Read by a flat key of the rows before the sections (:data:`LEGACY`), or a
        benchmark's key in its section: for readers not yet moved to the sections."""
        if key in LEGACY:
            section, name = LEGACY[key]
            value = getattr(getattr(self, section), name, None)
            return default if value is None else value
        if key in SECTION_KEYS:
            part: DetailSection = getattr(self, key)
            return default if part.is_empty() else part.model_dump(mode="json", by_alias=True)
        extra = self.model_extra or {}
        if key in extra:
            return extra[key]
        for value in extra.values():
            if isinstance(value, dict) and key in value:
                return value[key]
        return default

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None


class DetailsBag(_ItemsByGet, dict[str, Any]):
    """A running instance's details: the row's JSON shape being built (sections written by
    :meth:`DetailSection.put`). A flat key of the rows before the sections reads from its
    section (``bag.get("agent_details")``), for readers not yet moved."""

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        if key in self:
            return super().get(key)
        if key in LEGACY:
            section, name = LEGACY[key]
            part = super().get(section)
            if isinstance(part, Mapping) and name in part:
                return part[name]
        return default

