"""Configuration of the reference agent server: its identity, settings, default plan and
fault injection. Read from the JSON file given with ``--config``."""

from __future__ import annotations

import fnmatch
import re
import threading
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from harness.agents.gateway.models import is_root_user
from harness.core.models import StrictModel as _Strict

# Setting names whose values are secrets: /api/settings shows only whether they are set.
SECRET_NAME_RE = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL)", re.IGNORECASE)
MASK = "***"


class WriteFile(_Strict):
    path: str
    content: str = ""
    mode: int = 0o644

    @field_validator("path")
    @classmethod
    def _relative(cls, value: str) -> str:
        path = PurePosixPath(value)
        if path.is_absolute() or ".." in path.parts or not path.parts:
            raise ValueError(f"plan file path must be relative without '..': {value!r}")
        return value


class McpStep(_Strict):
    """A tool call the server itself makes (an MCP client over streamable HTTP) to a server
    the task body names in ``metadata.mcp_http_urls`` (``name=url,...``)."""

    server: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class PlanStep(_Strict):
    """One round of the scripted agent: a shell command, a file or an MCP tool call, and
    what it costs."""

    run: str | None = None
    write: WriteFile | None = None
    read: str | None = None  # a file of the workspace, read by the server's own file tool
    mcp: McpStep | None = None
    sleep_s: float = Field(default=0.0, ge=0)
    timeout_s: float | None = Field(default=None, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    continue_on_error: bool = False
    cost_usd: float = Field(default=0.0, ge=0)
    cost_known: bool = True
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)


class ReferencePlan(_Strict):
    """What a task does (``metadata.reference_plan`` or the server's ``default_plan``)."""

    steps: list[PlanStep] = Field(default_factory=list)
    schedule_delay_s: float = Field(default=0.05, ge=0)
    status: Literal["completed", "failed"] = "completed"
    reason_code: str | None = None
    result: str | None = None
    final_answer: str | None = None
    degraded: bool = False
    degraded_reason: str | None = None
    resource_limit: str | None = None
    execution_status: str | None = None
    execution_reason_code: str | None = None
    cost_final: bool = True
    # Error text the envelope carries while the task is still running (clients must not
    # take it for a terminal state: only ``status`` counts).
    progress_error: str | None = None


class FaultRule(_Strict):
    """A fault applied to requests whose ``"METHOD /path"`` matches ``match`` (fnmatch).

    The first ``skip`` matching requests pass; then ``count`` of them (all when None) get
    the fault: ``delay`` (answer after ``delay_s``), ``error`` (answer ``status``) or
    ``drop`` (close the connection without an answer).
    """

    kind: Literal["delay", "error", "drop"]
    match: str = "*"
    skip: int = Field(default=0, ge=0)
    count: int | None = Field(default=None, ge=0)
    delay_s: float = Field(default=0.0, ge=0)
    status: int = Field(default=500, ge=400, le=599)


class ReferenceServerConfig(_Strict):
    runtime_version: str | None = "reference-1.0.0"
    app_version: str = "harness-reference-server"
    settings: dict[str, Any] = Field(default_factory=dict)
    default_plan: ReferencePlan = Field(default_factory=ReferencePlan)
    # Plans in submission order (the first submission runs plans[0], ...); a submission past
    # the list runs the default, one naming ``metadata.reference_plan`` runs that one.
    plans: list[ReferencePlan] = Field(default_factory=list)
    faults: list[FaultRule] = Field(default_factory=list)
    # "Still starting": submits get 503 for this long after start, and the first N submits.
    starting_s: float = Field(default=0.0, ge=0)
    starting_posts: int = Field(default=0, ge=0)
    # Every task stays ``running`` until cancelled.
    never_settle: bool = False
    # Every task fails as an infrastructure failure with this reason (e.g. llm_api_error).
    infra_failure: str | None = None
    # Ids that already exist: submitting one gets 409.
    preexisting_task_ids: list[str] = Field(default_factory=list)
    allowed_types: list[str] = Field(default_factory=lambda: ["task"])
    # The server's own repository and data drive: executor mappings may not overlap them.
    protected_roots: list[str] = Field(default_factory=list)
    # Where a task without a workspace runs its local steps.
    scratch_dir: str | None = None
    # User for docker_exec steps when executor_ref names none: the sandbox's agent user.
    # Root is refused (here and in executor_ref.user): a step never runs privileged.
    docker_user: str = "agent"
    default_step_timeout_s: float = Field(default=600.0, gt=0)

    @field_validator("docker_user")
    @classmethod
    def _unprivileged(cls, value: str) -> str:
        if is_root_user(value):
            raise ValueError("docker_user may not be root: steps run as the agent user")
        return value

    @model_validator(mode="after")
    def _patterns(self) -> ReferenceServerConfig:
        for rule in self.faults:
            if not rule.match:
                raise ValueError("a fault rule needs a match pattern")
        return self

    @classmethod
    def load(cls, path: Path | str | None) -> ReferenceServerConfig:
        if path is None:
            return cls()
        return cls.model_validate_json(Path(path).read_text(encoding="utf-8"))

    def public_settings(self) -> dict[str, Any]:
        """The settings as ``/api/settings`` shows them: secret values masked."""
        out: dict[str, Any] = {}
        for key, value in self.settings.items():
            if SECRET_NAME_RE.search(key):
                out[key] = MASK if value else ""
            else:
                out[key] = value
        return out


class FaultInjector:
    """Thread-safe counters of the configured fault rules."""

    def __init__(self, rules: list[FaultRule]) -> None:
        self._rules = rules
        self._seen = [0] * len(rules)
        self._applied = [0] * len(rules)
        self._lock = threading.Lock()

    def faults_for(self, method: str, path: str) -> list[FaultRule]:
        key = f"{method} {path}"
        hits: list[FaultRule] = []
        with self._lock:
            for i, rule in enumerate(self._rules):
                if not fnmatch.fnmatchcase(key, rule.match):
                    continue
                self._seen[i] += 1
                if self._seen[i] <= rule.skip:
                    continue
                if rule.count is not None and self._applied[i] >= rule.count:
                    continue
                self._applied[i] += 1
                hits.append(rule)
        return hits

    def counts(self) -> list[dict[str, Any]]:
        with self._lock:
            return [
                {"match": r.match, "kind": r.kind, "seen": s, "applied": a}
                for r, s, a in zip(self._rules, self._seen, self._applied, strict=True)
            ]
