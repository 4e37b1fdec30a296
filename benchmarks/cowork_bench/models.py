"""Pydantic models of every file the Cowork modules write in an instance folder.

Instance folder ``<run>/cowork_bench/<instance_id>/``::

    traj_log.json            upstream format: {config, status, start_time, end_time}
    traj.json                {status, start_time, end_time, messages[], tool_calls[]}
    agent_summary.json       AgentSummary: the adapter's own record of the agent phase
    infra.json               InfraRecord: set-up failure before or around the agent (pg_fail, ...)
    preprocess.log           preprocess stdout+stderr
    workspace/               the agent workspace, copied out of the agent container (untrusted)
    workspace_sanitised.json links leaving the workspace and special files removed from it
    agent/                   the agent's own logs (tools.jsonl, events.jsonl, *.log, traj.json;
                             untrusted: read only through harness.core.untrusted, bounded)
    runtime_usage.jsonl      the harness's llm_usage record from the runtime's result
    eval_claim.json          EvalClaim (exclusive create, before the checker runs)
    eval_receipt-<id>.json   EvalReceipt (exclusive create, after)
    eval_res.json            upstream-format verdict {pass, details|failure}
    eval/<id>/res_log.json   the checker's --res_log_file scratch copy, checker.log
    diagnostic/              residual diagnostic (audit only)
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

BenchStatus = Literal["success", "failed", "max_turns_reached", "interrupted"]

TRAJ_LOG = "traj_log.json"
TRAJ = "traj.json"
AGENT_SUMMARY = "agent_summary.json"
INFRA_RECORD = "infra.json"
PREPROCESS_LOG = "preprocess.log"
WORKSPACE_DIR = "workspace"
AGENT_LOG_DIR = "agent"
RUNTIME_USAGE = "runtime_usage.jsonl"  # harness-written; an agent/ file of that name is ignored
AGENT_LOG_MAX_BYTES = 16 << 20  # one agent log file read on the host; larger is refused
# The runner agent's own folder (``AgentRequest.instance_dir``): its task checkpoint and the
# gateway task's copied events (harness.agents.gateway.checkpoint.AgentFolder names the files).
RUNNER_DIR = "runner_agent"
INSTRUCTION = "instruction.md"  # what the agent was given (with mcp-call's section for bash)
EVAL_CLAIM = "eval_claim.json"
EVAL_RES = "eval_res.json"
EVAL_DIR = "eval"
DIAGNOSTIC_DIR = "diagnostic"

# Upstream evaluator's status-gate text (utils/evaluation/evaluator.py), verbatim format.
STATUS_GATE_TEXT = "Task status: {status}, only SUCCESS counts as pass; pass is null"
# Runtime stop codes that mean "truncated" (the gateway's best-effort set + the wall clock).
TRUNCATION_REASONS = frozenset(
    {"deadline_local", "wall_clock_timeout", "round_limit", "budget_exhausted"}
)


def receipt_name(attempt_id: str) -> str:
    return f"eval_receipt-{attempt_id}.json"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Open(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class TrajConfig(Open):
    """The serialised upstream ``TaskConfig`` (``TaskConfig.to_dict`` keys)."""

    task_dir: str
    id: str | None = None
    needed_mcp_servers: list[str] = Field(default_factory=list)
    needed_local_tools: list[str] = Field(default_factory=list)
    task_root: str | None = None
    task_str: str | None = None
    log_file: str | None = None
    agent_workspace: str | None = None
    launch_time: str | None = None
    max_turns: int | None = None
    max_steps_under_single_turn_mode: int | None = None
    single_turn_mode: bool = True
    cn_mode: bool = False
    system_prompts: dict[str, str | None] = Field(default_factory=dict)
    initialization: dict[str, str | None] = Field(default_factory=dict)
    stop: dict[str, list[str] | None] = Field(default_factory=dict)
    evaluation: dict[str, str | None] = Field(default_factory=dict)
    meta: dict[str, Any] = Field(default_factory=dict)
    local_token_key_session: dict[str, Any] | None = None


class TrajLog(Open):
    """``traj_log.json``: what the upstream evaluator reads (status gate + config)."""

    config: TrajConfig
    status: BenchStatus | str
    start_time: str | None = None
    end_time: str | None = None


class Traj(Open):
    status: str
    start_time: str | None = None
    end_time: str | None = None
    messages: list[dict[str, Any]] = Field(default_factory=list)
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)


class AgentSummary(Strict):
    """``agent_summary.json``: the adapter's record of one agent phase."""

    schema_: str = Field(default="harness.cowork.agent_summary.v1", alias="schema")
    instance_id: str
    agent: str
    bench_status: BenchStatus
    reason_code: str | None = None  # the runtime's stop code (deadline_local, ...) or adapter code
    infra_failed: bool = False
    infra_reason: str | None = None
    launch_time: str
    started_at: str
    finished_at: str
    preprocess_exit_code: int | None = None
    agent_container_state: Literal["absent", "present", "unknown"] = "unknown"
    durations: dict[str, float] = Field(default_factory=dict)
    error: str | None = None


class InfraRecord(Strict):
    """``infra.json``: infrastructure failed for this instance (never the model's fault)."""

    schema_: str = Field(default="harness.cowork.infra.v1", alias="schema")
    instance_id: str
    reason_code: str
    stage: str
    message: str
    at: str


class FileFact(Strict):
    """One bound input of an eval attempt: a file or a directory tree."""

    path: str
    state: Literal["present", "absent"]
    kind: Literal["file", "tree", "none"] = "file"
    bytes: int = 0
    sha256: str | None = None
    files: int | None = None  # trees only


class EvalClaim(Strict):
    schema_: str = Field(default="harness.cowork.eval_claim.v1", alias="schema")
    attempt_id: str
    instance_id: str
    created_at: str
    pid: int
    bindings: dict[str, FileFact]


class EvalReceipt(Strict):
    schema_: str = Field(default="harness.cowork.eval_receipt.v1", alias="schema")
    attempt_id: str
    instance_id: str
    state: Literal["completed", "declined", "error"]
    checker_ran: bool
    exit_code: int | None = None
    pass_: bool | None = Field(default=None, alias="pass")
    details: str | None = None
    raised: str | None = None  # "ExcType: message" when the checker runner raised
    stdout_tail: str = ""
    stderr_tail: str = ""
    res_log: FileFact | None = None
    started_at: str
    completed_at: str
    duration_s: float


class DiagnosticRecord(Strict):
    schema_: str = Field(default="harness.cowork.diagnostic.v1", alias="schema")
    instance_id: str
    attempt_id: str | None
    outcome: Literal[
        "checks_passed",
        "checks_failed",
        "timeout",
        "unknown",
        "ineligible",
        "unavailable",
        "diagnostic_error",
    ]
    reason: str | None = None
    exit_code: int | None = None
    cap_sec: float
    started_at: str | None = None
    completed_at: str | None = None
    stdout_tail: str = ""
    semantics: str = "audit_only: never changes the official verdict"
