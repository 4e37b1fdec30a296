"""``--cowork-diagnostic-eval-on-truncation`` (off by default): a residual, audit-only checker run.

When the official eval *declined* (the upstream status gate: the agent did not finish with
``success``) and the agent stopped for a truncation reason (``deadline_local``,
``wall_clock_timeout``, ``round_limit``, ``budget_exhausted``) after observed model activity,
with its container confirmed gone, the checker may run once more into ``diagnostic/``: how
far did the truncated work get? The result appears only in the audit; the ledger verdict
(``agent_failed``) never changes. It runs at most once per instance folder.
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.cowork_bench import models as m
from benchmarks.cowork_bench.classify import _load, paid_activity, receipt_state
from benchmarks.cowork_bench.eval_once import (
    CheckerRunner,
    checker_request,
    now_iso,
    publish_exclusive,
)
from benchmarks.cowork_bench.tasks import task_dir
from harness.api import create_exclusive

GT = "groundtruth_workspace"
RECORD = "diagnostic.json"
CLAIM = "claim.json"
TIMEOUT_EXIT_CODES = frozenset({124, 137})


def eligibility(inst_dir: Path) -> tuple[str | None, str | None]:
    """(attempt_id, None) when eligible, else (attempt_id or None, reason)."""
    receipt = receipt_state(inst_dir)
    if receipt.state != "declined":
        return receipt.attempt_id, f"official_not_declined:{receipt.state}"
    summary, _ = _load(inst_dir / m.AGENT_SUMMARY, m.AgentSummary)
    if not isinstance(summary, m.AgentSummary):
        return receipt.attempt_id, "no_adapter_summary"
    if summary.reason_code not in m.TRUNCATION_REASONS:
        return receipt.attempt_id, f"not_truncation:{summary.reason_code}"
    if paid_activity(inst_dir) != "observed":
        return receipt.attempt_id, "no_model_activity"
    if summary.agent_container_state != "absent":
        return receipt.attempt_id, f"agent_container_{summary.agent_container_state}"
    return receipt.attempt_id, None


def read_record(inst_dir: Path) -> m.DiagnosticRecord | None:
    path = Path(inst_dir) / m.DIAGNOSTIC_DIR / RECORD
    if not path.exists():
        return None
    return m.DiagnosticRecord.model_validate_json(path.read_bytes())


def run_diagnostic(
    inst_dir: Path,
    bench_root: Path,
    instance_id: str,
    runner: CheckerRunner,
    *,
    enabled: bool,
    cap_sec: float = 900,
) -> m.DiagnosticRecord | None:
    """Run the residual diagnostic if enabled and eligible; ``None`` when disabled.

    An ineligible instance gets an ``ineligible`` record; a second call returns the first
    record (or ``unknown`` when a previous run left a claim without a record).
    """
    if not enabled:
        return None
    inst_dir = Path(inst_dir)
    ddir = inst_dir / m.DIAGNOSTIC_DIR
    ddir.mkdir(parents=True, exist_ok=True)
    existing = read_record(inst_dir)
    if existing is not None:
        return existing
    attempt, reason = eligibility(inst_dir)

    def rec(**fields: object) -> m.DiagnosticRecord:
        base = {"instance_id": instance_id, "attempt_id": attempt, "cap_sec": cap_sec}
        return m.DiagnosticRecord.model_validate({**base, **fields})

    if reason is not None:
        publish_exclusive(ddir / RECORD, rec(outcome="ineligible", reason=reason))
        return read_record(inst_dir)
    claim = {"attempt_id": attempt, "created_at": now_iso()}
    if not create_exclusive(ddir / CLAIM, (json.dumps(claim, indent=2) + "\n").encode()):
        return rec(outcome="unknown", reason="claim_without_record")
    traj, _ = _load(inst_dir / m.TRAJ_LOG, m.TrajLog)
    has_gt = (task_dir(bench_root, instance_id) / GT).is_dir()
    request = checker_request(inst_dir, instance_id, f"diagnostic-{attempt}", ddir,
                              traj if isinstance(traj, m.TrajLog) else None, has_gt)  # fmt: skip
    started = now_iso()
    try:
        run = runner(request)
    except Exception as exc:
        record = rec(
            outcome="diagnostic_error",
            reason=f"{type(exc).__name__}: {exc}"[:2000],
            started_at=started,
            completed_at=now_iso(),
        )
    else:
        if run.exit_code == 0:
            outcome = "checks_passed"
        elif run.exit_code in TIMEOUT_EXIT_CODES:
            outcome = "timeout"
        else:
            outcome = "checks_failed"
        record = rec(
            outcome=outcome,
            exit_code=run.exit_code,
            stdout_tail=run.stdout[-4000:],
            started_at=started,
            completed_at=now_iso(),
        )
    publish_exclusive(ddir / RECORD, record)
    return record
