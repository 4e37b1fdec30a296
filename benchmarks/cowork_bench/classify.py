"""Ledger classification of one Cowork instance from the evidence in its folder (pure).

Order of the rules (reference §4 step 13, adapted to our files):

1. ``infra.json`` present → ``infra_failed`` with its reason (``pg_fail``, ...).
2. No ``agent_summary.json``: without any start evidence → ``not_attempted``/``missing_result``;
   with some → ``infra_failed``/``interrupted:<cause>``, or ``missing_adapter_summary`` with
   ``provisional`` while the run is live.
3. Summary marked infra → ``infra_failed`` (its reason); ``bench_status != success`` →
   ``agent_failed`` (the runtime's stop code, else the status).
4. A literal boolean ``pass`` in the receipt of the *claimed* attempt → ``passed`` /
   ``failed`` (``verifier_failed``); anything else → ``infra_failed``
   (``official_eval_not_run`` or ``missing_eval_result``).

``paid_activity`` is ``observed`` only when the harness's ``runtime_usage.jsonl``, an agent
log or the gateway task's copied events (``runner_agent/gateway_events.jsonl``: what an
interrupted task had spent by its last poll) has an ``llm_usage`` record with tokens;
otherwise ``unknown`` (absence of records proves nothing). The copied events prove activity
only: they never enter the cost sums (``runtime_usage.jsonl`` holds the task's total). Agent logs are untrusted: read through :mod:`harness.core.untrusted` (regular files
only, no link following, at most ``AGENT_LOG_MAX_BYTES``); a refused one (a link, a FIFO, a
device, too large, or named like a harness file) is listed in ``agent_logs_refused``.
``workspace_sanitised.json`` (links and special files removed from the workspace) is
repeated in the details as ``workspace_removed``.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from benchmarks.cowork_bench import BENCHMARK
from benchmarks.cowork_bench import models as m
from benchmarks.cowork_bench.workspace import SANITISED_NAME, WorkspaceSanitised
from harness.api import (
    AgentFolder,
    EvalDetails,
    Outcome,
    UntrustedFileError,
    read_untrusted_text,
    usage_with_tokens,
)

Status = Literal["passed", "failed", "agent_failed", "infra_failed", "not_attempted"]
ReceiptState = Literal[
    "completed", "declined", "unknown", "invalid", "unreadable", "unreported", "not_run"
]
START_EVIDENCE = (m.PREPROCESS_LOG, m.AGENT_LOG_DIR, m.WORKSPACE_DIR, m.TRAJ_LOG)
UsageRecords = list[tuple[str, int, dict[str, Any]]]  # (file, line, llm_usage record)


class Unreadable(ValueError):
    pass


class ReceiptView(BaseModel):
    state: ReceiptState
    attempt_id: str | None = None
    passed: bool | None = None
    exit_code: int | None = None
    reason: str | None = None
    receipt_file: str | None = None


class Classification(BaseModel):
    status: Status
    reason_code: str
    details: dict[str, Any] = Field(default_factory=dict)

    @property
    def outcome(self) -> Outcome:
        return OUTCOMES[self.status]

    @property
    def resolved(self) -> bool | None:
        return {"passed": True, "failed": False}.get(self.status)

    def row_fields(self) -> dict[str, Any]:
        """Common ledger fields for ``TaskRow`` (status, outcome, score, resolved, infra, ...);
        ``details`` in the row's sections: the checker's verdict (``eval``: pass, exit code)
        in the eval section, everything else in Cowork's own (``details.cowork_bench``)."""
        receipt: dict[str, Any] = self.details.get("official_receipt") or {}
        details: dict[str, Any] = {
            BENCHMARK: {k: v for k, v in self.details.items() if k != EvalDetails.KEY}}
        if self.details.get(EvalDetails.KEY):
            details[EvalDetails.KEY] = EvalDetails.model_validate(
                self.details[EvalDetails.KEY]).model_dump(mode="json", by_alias=True)
        return {
            "status": self.status,
            "outcome": self.outcome.value,
            "reason_code": self.reason_code,
            "resolved": self.resolved,
            "score": None if self.resolved is None else float(self.resolved),
            "infra": self.status in ("infra_failed", "not_attempted"),
            "official_eval_status": receipt.get("state", "not_run"),
            "details": details,
        }


OUTCOMES: dict[str, Outcome] = {
    "passed": Outcome.SCORED,
    "failed": Outcome.SCORED,
    "agent_failed": Outcome.AGENT_FAILED,
    "infra_failed": Outcome.INFRA_FAILED,
    "not_attempted": Outcome.NOT_ATTEMPTED,
}


def strict_json(path: Path) -> Any:
    """Parse JSON refusing NaN/Infinity and duplicate keys; raises ``Unreadable``."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in items]
        if len(keys) != len(set(keys)):
            raise Unreadable(f"{path.name}: duplicate key")
        return dict(items)

    def constant(name: str) -> Any:
        raise Unreadable(f"{path.name}: non-finite number {name}")

    try:
        text = path.read_bytes().decode("utf-8")
        data = json.loads(text, object_pairs_hook=pairs, parse_constant=constant)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Unreadable(f"{path.name}: {type(exc).__name__}: {exc}") from exc
    if isinstance(data, float) and not math.isfinite(data):
        raise Unreadable(f"{path.name}: non-finite")
    return data


def _load(path: Path, model: type[BaseModel]) -> tuple[BaseModel | None, str | None]:
    if not path.exists():
        return None, None
    try:
        return model.model_validate(strict_json(path)), None
    except Unreadable as exc:
        return None, f"unreadable: {exc}"
    except ValidationError as exc:
        return None, f"invalid: {exc.error_count()} schema error(s)"


def receipt_state(inst_dir: Path) -> ReceiptView:
    """What the official eval of this instance's claimed attempt says."""
    claim_path = inst_dir / m.EVAL_CLAIM
    if not claim_path.exists():
        if (inst_dir / m.EVAL_RES).exists():
            return ReceiptView(state="not_run", reason="unclaimed_prior_result")
        return ReceiptView(state="not_run")
    claim, err = _load(claim_path, m.EvalClaim)
    if claim is None:
        state: ReceiptState = "unreadable" if err and err.startswith("unreadable") else "invalid"
        return ReceiptView(state=state, reason=f"claim {err}")
    assert isinstance(claim, m.EvalClaim)
    rpath = inst_dir / m.receipt_name(claim.attempt_id)
    aid, rname = claim.attempt_id, rpath.name
    if not rpath.exists():
        return ReceiptView(
            state="unreported", reason="claim_without_receipt", attempt_id=aid, receipt_file=rname
        )
    receipt, err = _load(rpath, m.EvalReceipt)
    if receipt is None:
        state = "unreadable" if err and err.startswith("unreadable") else "invalid"
        return ReceiptView(state=state, reason=f"receipt {err}", attempt_id=aid, receipt_file=rname)
    assert isinstance(receipt, m.EvalReceipt)
    if receipt.attempt_id != claim.attempt_id or receipt.instance_id != claim.instance_id:
        return ReceiptView(
            state="invalid",
            reason="receipt_not_of_claimed_attempt",
            attempt_id=aid,
            receipt_file=rname,
        )
    if receipt.state == "completed" and receipt.checker_ran and isinstance(receipt.pass_, bool):
        return ReceiptView(
            state="completed",
            passed=receipt.pass_,
            exit_code=receipt.exit_code,
            attempt_id=aid,
            receipt_file=rname,
        )
    if receipt.state == "declined" and receipt.pass_ is None:
        traj, _ = _load(inst_dir / m.TRAJ_LOG, m.TrajLog)
        status = traj.status if isinstance(traj, m.TrajLog) else None
        if (
            status
            and status != "success"
            and receipt.details == m.STATUS_GATE_TEXT.format(status=status)
        ):
            return ReceiptView(state="declined", attempt_id=aid, receipt_file=rname)
        return ReceiptView(
            state="invalid", reason="decline_not_proven", attempt_id=aid, receipt_file=rname
        )
    return ReceiptView(
        state="unknown", reason=receipt.raised or receipt.state, attempt_id=aid, receipt_file=rname
    )


def agent_log_paths(inst_dir: Path) -> list[Path]:
    """The entries of ``<instance>/agent/`` (none if it is not a real directory), sorted."""
    logdir = Path(inst_dir) / m.AGENT_LOG_DIR
    try:
        if not stat.S_ISDIR(os.lstat(logdir).st_mode):
            return []
        return sorted(logdir / name for name in os.listdir(logdir))
    except OSError:
        return []


def read_agent_log(path: Path) -> str | None:
    """An agent log's text, or None when it is refused (see :func:`refused_agent_logs`)."""
    if path.name == m.RUNTIME_USAGE:
        return None
    try:
        return read_untrusted_text(path, m.AGENT_LOG_MAX_BYTES)
    except OSError:  # UntrustedFileError: a link, a special file, too large
        return None


def refused_agent_logs(inst_dir: Path) -> list[dict[str, str]]:
    """Agent log entries the host does not read, and why (``lstat`` only, never opened)."""
    out: list[dict[str, str]] = []
    for path in agent_log_paths(inst_dir):
        rel = f"{m.AGENT_LOG_DIR}/{path.name}"
        try:
            st = os.lstat(path)
        except OSError as exc:
            out.append({"file": rel, "why": f"unreadable: {exc.strerror}"})
            continue
        if stat.S_ISDIR(st.st_mode):
            continue
        if stat.S_ISLNK(st.st_mode):
            out.append({"file": rel, "why": f"symbolic link to {os.readlink(path)!r}"[:300]})
        elif not stat.S_ISREG(st.st_mode):
            out.append({"file": rel, "why": "not a regular file"})
        elif st.st_size > m.AGENT_LOG_MAX_BYTES:
            out.append({"file": rel, "why": f"{st.st_size} bytes, over the "
                                            f"{m.AGENT_LOG_MAX_BYTES} byte cap"})  # fmt: skip
        elif path.name == m.RUNTIME_USAGE:
            out.append({"file": rel, "why": "named like the harness's record: ignored"})
    return out


def _harness_usage_text(inst_dir: Path) -> str | None:
    try:  # the harness wrote it; read bounded all the same
        return read_untrusted_text(Path(inst_dir) / m.RUNTIME_USAGE, m.AGENT_LOG_MAX_BYTES)
    except (UntrustedFileError, FileNotFoundError):
        return None


def usage_records(inst_dir: Path) -> UsageRecords:
    """``llm_usage`` records: the harness's ``runtime_usage.jsonl``, then the agent's JSONL
    logs (untrusted, bounded): (file, line, record)."""
    out: UsageRecords = []
    sources: list[tuple[str, str | None]] = [(m.RUNTIME_USAGE, _harness_usage_text(inst_dir))]
    sources += [
        (f"{m.AGENT_LOG_DIR}/{p.name}", read_agent_log(p))
        for p in agent_log_paths(inst_dir)
        if p.suffix == ".jsonl"
    ]
    for name, text in sources:
        if text is None:
            continue
        for lineno, line in enumerate(text.splitlines(), start=1):
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and (rec.get("type") or rec.get("kind")) == "llm_usage":
                out.append((name, lineno, rec))
    return out


def tokens_of(rec: dict[str, Any]) -> int:
    nested = rec.get("usage")
    usage: dict[str, Any] = nested if isinstance(nested, dict) else rec
    total = 0
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            total = max(total, value) if key == "total_tokens" else total + value
    return total


def paid_activity(
    inst_dir: Path, records: UsageRecords | None = None
) -> Literal["observed", "unknown"]:
    """``records``: this folder's :func:`usage_records`, when the caller has them already."""
    if records is None:
        records = usage_records(inst_dir)
    if any(tokens_of(r) > 0 for _, _, r in records) or gateway_usage_seen(inst_dir):
        return "observed"
    return "unknown"


def gateway_usage_seen(inst_dir: Path) -> bool:
    """An ``llm_usage`` record with tokens among the gateway task's copied events (read
    bounded, no link followed: :mod:`harness.core.untrusted`)."""
    folder = AgentFolder(Path(inst_dir), PurePosixPath(m.RUNNER_DIR))
    try:
        text = read_untrusted_text(folder.events, m.AGENT_LOG_MAX_BYTES)
    except OSError:  # absent, a link, a special file, too large: no proof
        return False
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if usage_with_tokens(event):
            return True
    return False


def classify_instance(
    inst_dir: Path,
    *,
    run_live: bool = False,
    interruption_cause: str | None = None,
    usage: UsageRecords | None = None,
    receipt: ReceiptView | None = None,
) -> Classification:
    """``usage`` / ``receipt``: this folder's :func:`usage_records` / :func:`receipt_state`,
    when the caller (the audit) has computed them already."""
    inst_dir = Path(inst_dir)
    details: dict[str, Any] = {"paid_activity": paid_activity(inst_dir, usage)}
    evidence = [name for name in START_EVIDENCE if os.path.lexists(inst_dir / name)]
    details["start_evidence"] = evidence
    refused = refused_agent_logs(inst_dir)
    if refused:
        details["agent_logs_refused"] = refused
    sanitised, _ = _load(inst_dir / SANITISED_NAME, WorkspaceSanitised)
    if isinstance(sanitised, WorkspaceSanitised) and sanitised.removed:
        details["workspace_removed"] = [r.model_dump() for r in sanitised.removed]
    infra, err = _load(inst_dir / m.INFRA_RECORD, m.InfraRecord)
    if isinstance(infra, m.InfraRecord):
        details["infra"] = infra.model_dump(by_alias=True)
        return Classification(status="infra_failed", reason_code=infra.reason_code, details=details)
    summary, err = _load(inst_dir / m.AGENT_SUMMARY, m.AgentSummary)
    if not isinstance(summary, m.AgentSummary):
        if err:
            details["summary_error"] = err
        if not evidence and not err:
            return Classification(
                status="not_attempted", reason_code="missing_result", details=details
            )
        if run_live:
            details["provisional"] = True
            return Classification(
                status="infra_failed", reason_code="missing_adapter_summary", details=details
            )
        cause = interruption_cause or "unknown"
        return Classification(
            status="infra_failed", reason_code=f"interrupted:{cause}", details=details
        )
    details["adapter"] = summary.model_dump(by_alias=True)
    if receipt is None:
        receipt = receipt_state(inst_dir)
    details["official_receipt"] = receipt.model_dump(by_alias=True)
    if summary.infra_failed:
        reason = summary.infra_reason or "agent_infra_failed"
        return Classification(status="infra_failed", reason_code=reason, details=details)
    if summary.bench_status != "success":
        reason = summary.reason_code or summary.bench_status
        return Classification(status="agent_failed", reason_code=reason, details=details)
    if receipt.state == "completed" and isinstance(receipt.passed, bool):
        details["eval"] = {"pass": receipt.passed, "exit_code": receipt.exit_code}
        if receipt.passed:
            return Classification(status="passed", reason_code="passed", details=details)
        return Classification(status="failed", reason_code="verifier_failed", details=details)
    reason = (
        "official_eval_not_run"
        if receipt.state in ("not_run", "unknown")
        else "missing_eval_result"
    )
    return Classification(status="infra_failed", reason_code=reason, details=details)
