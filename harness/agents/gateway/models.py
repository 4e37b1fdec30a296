"""Pydantic models of the agent server's HTTP task API (the Ouroboros "gateway").

Requests are validated the way the server validates them (reference §1.2-§1.5), so an
adapter's mistake is reported before anything is submitted. Responses are tolerant
(``extra="allow"``; :meth:`TaskResult.parse_tolerant` drops a malformed field instead of
failing a wait loop): the server is another project and may add or change fields.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from harness.core.models import OpenModel as _Open
from harness.core.models import StrictModel as _Strict

# Statuses (reference §1.7).
IN_FLIGHT_STATUSES = frozenset({"requested", "scheduled", "running"})
CANCEL_REQUESTED = "cancel_requested"  # a latch, never terminal
SETTLED_STATUSES = frozenset({"completed", "failed", "cancelled", "rejected_duplicate"})

# Reason codes (reference §1.8).
INFRA_REASON_CODES = frozenset({"llm_api_error", "provider_unavailable"})
INFRA_EXECUTION_STATUSES = frozenset({"infra_failed", "llm_api_error"})
TRUNCATION_REASON_CODES = frozenset(
    {
        "budget_exhausted",
        "round_limit",
        "finalization_grace",
        "deadline_local",
        "children_unabsorbed",
        "owner_requested_finalization",
    }
)

# Keys the server reserves: they may not appear inside ``metadata`` (§1.2).
RESERVED_METADATA_KEYS = frozenset(
    {"executor_ref", "project_id", "parent_task_id", "root_task_id", "lineage", "delegation_depth"}
)
TASK_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


def describe_validation_error(exc: ValidationError, limit: int = 4) -> str:
    """Field paths and messages only: the input values (maybe secret) are never echoed."""
    parts = []
    for err in exc.errors()[:limit]:
        loc = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{loc}: {err['msg']}")
    more = len(exc.errors()) - limit
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")


def is_root_user(user: str) -> bool:
    """``root``, uid 0 however spelled (``0``, ``00``, ``+0``, ``-0``: ``docker exec -u``
    reads each as uid 0), with or without ``:<group>``, or empty (the image's user, root
    unless it says otherwise). Another name the image gives uid 0 is not seen here."""
    name = user.strip().split(":")[0]
    if name in ("root", ""):
        return True
    digits = name[1:] if name[:1] in "+-" else name
    return digits.isdigit() and int(digits) == 0


def _check_backend_path(value: str, what: str) -> str:
    path = PurePosixPath(value)
    if not path.is_absolute():
        raise ValueError(f"{what} must be absolute, got {value!r}")
    if ".." in path.parts:
        raise ValueError(f"{what} must not contain '..', got {value!r}")
    if str(path) == "/":
        raise ValueError(f"{what} must not be '/'")
    return value


def _within(path: str, root: str) -> bool:
    p, r = PurePosixPath(path), PurePosixPath(root)
    return p == r or r in p.parents


class PathMapping(_Strict):
    host_path: str
    backend_path: str

    @field_validator("backend_path")
    @classmethod
    def _backend(cls, value: str) -> str:
        return _check_backend_path(value, "path_mappings[].backend_path")


class ExecutorRef(_Strict):
    """Where the server runs the agent's process tools (§1.3); top-level in the request."""

    type: Literal["local", "docker_exec"]
    id: str | None = None
    container_name: str | None = None
    network: Literal["host", "none"] | None = None
    workspace_host_path: str | None = None
    workspace_backend_path: str | None = None
    path_mappings: list[PathMapping] = Field(default_factory=list)
    # The user every ``docker exec`` of the agent runs as (``docker exec -u``): never root.
    # Not in the upstream reference (§1.3): an extension the reference server honours.
    user: str | None = None

    @field_validator("user")
    @classmethod
    def _unprivileged(cls, value: str | None) -> str | None:
        if value is not None and is_root_user(value):
            raise ValueError("executor_ref.user may not be root: name the unprivileged agent user")
        return value

    @field_validator("workspace_backend_path")
    @classmethod
    def _backend(cls, value: str | None) -> str | None:
        return None if value is None else _check_backend_path(value, "workspace_backend_path")

    @model_validator(mode="after")
    def _rules(self) -> ExecutorRef:
        if self.type == "docker_exec" and not self.container_name:
            raise ValueError("executor_ref.container_name is required for type 'docker_exec'")
        if self.type == "local" and self.network == "none":
            raise ValueError("executor_ref of type 'local' cannot use network 'none'")
        return self

    def host_roots(self) -> list[str]:
        roots = [m.host_path for m in self.path_mappings]
        if self.workspace_host_path:
            roots.append(self.workspace_host_path)
        return roots

    def covers(self, host_path: str) -> bool:
        return any(_within(host_path, root) for root in self.host_roots())


class ProtectedArtifact(_Strict):
    """One ``resource_policy.protected_artifacts`` item (§1.4)."""

    id: str
    role: str = "black_box_reference"
    paths: list[str] = Field(min_length=1)
    allow: list[str] = Field(default_factory=list)
    deny: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _disjoint(self) -> ProtectedArtifact:
        both = sorted(set(self.allow) & set(self.deny))
        if both:
            raise ValueError(f"protected artifact {self.id!r} both allows and denies {both}")
        return self


class ResourcePolicy(_Open):
    protected_artifacts: list[ProtectedArtifact] = Field(default_factory=list)


class BudgetProfile(_Strict):
    """``metadata.budget_profile`` (§1.5): the server normalises exactly these five keys."""

    cost_hard_stop_pct: float = Field(default=0, ge=0, le=100)
    improvement_policy: Literal["fixed", "adaptive", "until_deadline"] = "until_deadline"
    max_improvement_passes: int = Field(default=3, ge=0)
    reserve_finalization_pct: float = Field(default=15, ge=0, le=100)
    stall_rounds_threshold: int = Field(default=12, ge=0)


class AcceptanceClaim(_Strict):
    id: str
    claim: str
    surface: str | None = None
    support: str | None = None
    priority: Literal["must", "should", "nice_to_have"] = "should"


class TaskCreateRequest(_Strict):
    """Body of ``POST /api/tasks`` (§1.2); only ``description`` is required."""

    description: str = Field(min_length=1)
    task_id: str | None = None
    type: str = "task"
    workspace_root: str | None = None
    workspace_mode: str | None = None
    memory_mode: Literal["forked", "empty", "shared"] | None = None
    allowed_resources: dict[str, bool] = Field(default_factory=dict)
    resource_policy: ResourcePolicy | None = None
    disabled_tools: list[str] = Field(default_factory=list)
    acceptance_claims: list[AcceptanceClaim] = Field(default_factory=list)
    answer_protocol: Literal["", "final_answer_line"] = ""
    executor_ref: ExecutorRef | None = None
    service_teardown: Literal["stop", "keep"] | None = None
    deadline_at: datetime | None = None
    timeout_sec: float | None = Field(default=None, gt=0)
    timeout: float | None = Field(default=None, gt=0)
    context: str | None = None
    expected_output: str | None = None
    constraints: str | None = None
    actor_id: str | None = None
    source: str | None = None
    session_id: str | None = None
    project_id: str | None = None
    attachments: list[Any] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("task_id")
    @classmethod
    def _task_id(cls, value: str | None) -> str | None:
        if value is not None and not TASK_ID_RE.match(value):
            raise ValueError(f"task_id {value!r} must match {TASK_ID_RE.pattern}")
        return value

    @field_validator("deadline_at")
    @classmethod
    def _tz(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("deadline_at must carry a timezone (ISO-8601 with offset)")
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any]) -> dict[str, Any]:
        reserved = sorted(RESERVED_METADATA_KEYS & set(value))
        if reserved:
            raise ValueError(f"metadata may not contain reserved keys {reserved}")
        if "budget_profile" in value:
            profile = value["budget_profile"]
            value = {**value, "budget_profile": BudgetProfile.model_validate(profile).model_dump()}
        return value

    @model_validator(mode="after")
    def _workspace(self) -> TaskCreateRequest:
        if self.workspace_root:
            if self.workspace_mode is None:
                self.workspace_mode = "external"
            elif self.workspace_mode != "external":
                raise ValueError("workspace_root implies workspace_mode 'external'")
            if self.memory_mode == "shared":
                raise ValueError("memory_mode 'shared' is refused for an external workspace")
            if self.executor_ref is not None and not self.executor_ref.covers(self.workspace_root):
                raise ValueError(
                    "executor_ref mappings must cover workspace_root "
                    f"{self.workspace_root!r} (workspace_host_path or a path_mappings host_path)"
                )
        return self

    def body(self) -> dict[str, Any]:
        """The JSON body to send: unset optional fields are left out."""
        return self.model_dump(mode="json", exclude_none=True, exclude_defaults=False)


class SubmitResponse(_Open):
    ok: bool = True
    task_id: str
    status: str = "scheduled"


class Axis(_Open):
    status: str | None = None
    reason_code: str | None = None


class OutcomeAxes(_Open):
    lifecycle: Axis | None = None
    execution: Axis | None = None
    artifacts: Axis | None = None
    objective: Axis | None = None
    review: Axis | None = None


class LoopOutcome(_Open):
    resource_limit: str | None = None


class TaskResult(_Open):
    """``GET /api/tasks/{id}``: the public task-result envelope (§1.7)."""

    task_id: str | None = None
    status: str | None = None
    reason_code: str | None = None
    result: Any = None
    final_answer: Any = None
    error: Any = None
    outcome_axes: OutcomeAxes | None = None
    loop_outcome: LoopOutcome | None = None
    degraded: bool | None = None
    degraded_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_rounds: int | None = None
    artifact_status: str | None = None
    # Cost fields.
    accounted_upper_bound_usd: float | None = None
    accounted_upper_bound_usd_with_children: float | None = None
    cost_known: bool | None = None
    cost_final: bool | None = None
    cost_with_children_partial: bool | None = None
    unknown_unmetered: bool | None = None
    non_final_rows: int | None = None
    reserved_usd: float | None = None
    unresolved_upper_bound_usd: float | None = None
    ledger_integrity_degraded: bool | None = None
    cost_presentation: Any = None
    cost_accounting_status: str | None = None
    cost_accounting_error: str | None = None
    cost_breakdown: Any = None
    # Known fields whose values were malformed, as received (the tolerant parser set them
    # aside instead of failing the wait loop).
    dropped_fields: dict[str, Any] = Field(default_factory=dict)

    @property
    def settled(self) -> bool:
        return self.status in SETTLED_STATUSES

    @classmethod
    def parse_tolerant(cls, data: Any) -> TaskResult:
        """Parse a server envelope; a malformed known field is set aside, never fatal."""
        if not isinstance(data, dict):
            return cls(dropped_fields={"<body>": data})
        payload = {k: v for k, v in data.items() if k != "dropped_fields"}
        dropped: dict[str, Any] = {}
        while True:
            try:
                result = cls.model_validate(payload)
            except ValidationError as exc:
                bad = {str(err["loc"][0]) for err in exc.errors() if err["loc"]} & set(payload)
                if not bad:
                    return cls(dropped_fields={"<body>": data})
                for key in bad:
                    dropped[key] = payload.pop(key)
                continue
            result.dropped_fields = dropped
            return result


class HealthInfo(_Open):
    """``GET /api/health``; only ``runtime_version`` counts as runtime identity."""

    status: str | None = None
    version: str | None = None
    runtime_version: str | None = None
    app_version: str | None = None


class ServerState(_Open):
    """``GET /api/state``: readiness (``supervisor_ready``) plus whatever the server adds."""

    supervisor_ready: bool | None = None


class ServerSettings(_Open):
    """``GET /api/settings``: the running server's effective settings (a flat mapping)."""

    def values(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class TaskCheckpoint(_Strict):
    """``task_checkpoint.json``: written at submit and after every poll, atomically (§2.3)."""

    schema_: str = Field(default="harness.agents.task_checkpoint.v1", alias="schema")
    task_id: str
    ts_unix: float
    status: str
    base_url: str | None = None
    polls: int = 0
    task_result: dict[str, Any] | None = None
    # The copy of the task's events so far (harness.agents.gateway.events.EventsState).
    events: dict[str, Any] | None = None
