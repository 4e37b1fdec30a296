"""``harness cowork audit RUN --output FILE``: a read-only audit of a Cowork run.

Classifies every *selected* instance (``run_manifest.json`` selection; ledger
``result_index.jsonl``, last row per instance wins, a torn last line skipped), projects the
official eval attempt, sums cost where it is known, and flags tool calls for manual review:

* ``answer_source_or_evaluator_reference``: groundtruth or evaluator paths, the upstream
  repository URL, or our claim/receipt/eval-result file names in a tool call;
* ``possible_direct_postgres_access``: ``psql``, ``psycopg``, ``asyncpg`` or ``pgcli``.

Scanned: ``<run>/cowork_bench/<iid>/agent/*.jsonl``, ``agent/*.log``, ``agent/traj.json`` and
the instance's ``traj.json`` tool calls. Findings give coordinates only, never the text. A
row a resumed run carried forward is audited from the ancestor run's folder (``carried_from``),
so the audit of a resumed run covers its whole selection. The audit never changes the official
verdict; the report is created exclusively (never overwritten).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from benchmarks.cowork_bench import BENCHMARK
from benchmarks.cowork_bench import models as m
from benchmarks.cowork_bench.classify import (
    ReceiptView,
    UsageRecords,
    agent_log_paths,
    classify_instance,
    read_agent_log,
    receipt_state,
    tokens_of,
    usage_records,
)
from benchmarks.cowork_bench.cli import doc_summary
from benchmarks.cowork_bench.diagnostic import read_record
from benchmarks.cowork_bench.eval_once import file_fact, publish_exclusive
from harness.api import (
    LedgerError,
    Manifest,
    ManifestError,
    Outcome,
    TaskRow,
    ledger_path,
    read_ledger,
    read_manifest,
    row_root,
    run_roots,
)

SCHEMA = "harness.cowork.audit.v1"
AuditClass = Literal["passed", "genuine_failure", "infrastructure", "not_attempted", "unknown"]
CLASS_OF_STATUS: dict[str, AuditClass] = {
    "passed": "passed",
    "failed": "genuine_failure",
    "agent_failed": "genuine_failure",
    "infra_failed": "infrastructure",
    "not_attempted": "not_attempted",
}
CLASSES: tuple[str, ...] = (
    "passed",
    "genuine_failure",
    "infrastructure",
    "not_attempted",
    "unknown",
)
PROJECTION = {
    "completed": "evaluated",
    "declined": "not_run",
    "not_run": "not_run",
    "unreported": "interrupted",
}
ANSWER_RE = re.compile(
    r"groundtruth_workspace|(?:^|[/\\.\s'\"])evaluation[/\\.]main|/evaluation/|"
    r"0717376/cowork_bench|eval_claim\.json|eval_receipt-|eval_res\.json",
    re.IGNORECASE,
)
PG_RE = re.compile(r"\bpsql\b|psycopg|asyncpg|\bpgcli\b", re.IGNORECASE)
LIMITATIONS = [
    "Flags are lexical matches over the agent's own logs; absence of a flag proves nothing.",
    "Cost is summed from llm_usage records that carry a cost; other records make it incomplete.",
    "The official verdict is the ledger row; this audit never changes it.",
]


class Finding(BaseModel):
    source: str
    line: int
    reason: Literal[
        "answer_source_or_evaluator_reference",
        "possible_direct_postgres_access",
        "agent_log_refused",
    ]


class Activity(BaseModel):
    usage_records: int = 0
    nonempty_usage_records: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    tool_calls: int = 0
    mcp_calls: int = 0
    mcp_error_calls: int = 0


class TaskCost(BaseModel):
    known_usd: float = 0.0
    total_usd: float | None = None
    unknown_usage_records: int = 0
    estimated_usage_records: int = 0
    complete: bool = True
    source: str = "llm_usage_projection"


class ReceiptFacts(BaseModel):
    available: bool
    passed: bool | None = None
    bytes: int | None = None
    sha256: str | None = None


class TaskAudit(BaseModel):
    instance_id: str
    ledger_status: str | None
    classification: AuditClass
    reason_code: str | None
    evidence_status: str
    official_eval_status: str
    official_pass: bool | None
    official_receipt: ReceiptFacts
    activity: Activity
    model_activity_observed: bool
    mcp_activity_observed: bool
    cost: TaskCost
    models: list[str] = Field(default_factory=list)
    manual_review: list[Finding] = Field(default_factory=list)
    gaps: list[str] = Field(default_factory=list)
    eval_attempt: dict[str, Any] = Field(default_factory=dict)
    carried_from: str | None = None  # run id whose attempt a resumed run carried forward
    evidence_dir: str | None = None


class AuditReport(BaseModel):
    schema_: str = Field(default=SCHEMA, alias="schema")
    run_root: str
    scoring_authority: str = "ledger result_index.jsonl (official checker receipts)"
    limitations: list[str] = Field(default_factory=lambda: list(LIMITATIONS))
    task_count: int
    classifications: dict[str, int]
    manual_review_tasks: list[str]
    cost: dict[str, Any]
    gaps: list[str]
    tasks: list[TaskAudit]
    eval_attempts: dict[str, Any]


# --------------------------------------------------------------------------- reading


def selected_ids(manifest: Manifest) -> list[str]:
    """The Cowork instance ids of the run's selection (the denominator)."""
    out = []
    for key in manifest.selection.instance_ids:
        bench, _, iid = key.rpartition("/")
        if bench in ("", BENCHMARK):
            out.append(iid)
    return out


def latest_rows(run_root: Path) -> dict[str, TaskRow]:
    """Instance id -> the last Cowork row (``read_ledger``: torn last line skipped, other
    corruption raises ``LedgerError``)."""
    latest = read_ledger(ledger_path(run_root)).latest.values()
    return {row.instance_id: row for row in latest if row.benchmark == BENCHMARK}


def _tool_texts(path: Path, text: str) -> Iterator[tuple[int, str]]:
    """(line, text) of each tool call (JSON logs) or log line (plain logs) of ``text``."""
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            return
        calls = data.get("tool_calls", []) if isinstance(data, dict) else []
        for i, call in enumerate(calls, start=1):
            yield i, json.dumps(call, ensure_ascii=False)
        return
    for lineno, line in enumerate(text.splitlines(), start=1):
        if path.suffix == ".jsonl":
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(rec, dict) or rec.get("type") == "llm_usage":
                continue
        yield lineno, line


def scan(inst_dir: Path) -> tuple[list[Finding], int]:
    """Findings in ``traj.json`` and the agent's logs (untrusted, bounded reads: a refused
    log is an ``agent_log_refused`` finding, never a hang or an unbounded read)."""
    paths = [inst_dir / m.TRAJ] if (inst_dir / m.TRAJ).exists() else []
    paths += [
        p
        for p in agent_log_paths(inst_dir)
        if (p.suffix in (".jsonl", ".log") or p.name == m.TRAJ) and p.name != m.RUNTIME_USAGE
    ]
    findings: list[Finding] = []
    calls = 0
    for path in paths:
        source = path.relative_to(inst_dir).as_posix()
        body = read_agent_log(path)
        if body is None:
            findings.append(Finding(source=source, line=0, reason="agent_log_refused"))
            continue
        for line, text in _tool_texts(path, body):
            calls += path.suffix == ".json"
            if ANSWER_RE.search(text):
                findings.append(
                    Finding(source=source, line=line, reason="answer_source_or_evaluator_reference")
                )
            if PG_RE.search(text):
                findings.append(
                    Finding(source=source, line=line, reason="possible_direct_postgres_access")
                )
    return findings, calls


# --------------------------------------------------------------------------- one task


def audit_task(
    run_root: Path, iid: str, row: TaskRow | None, ancestors: dict[str, Path] | None = None
) -> TaskAudit:
    """One task, audited from the folder of the run that wrote its row (a carried row: its
    ancestor's; a merged run's row: its shard's; :mod:`harness.run.locate`)."""
    inst = run_root / BENCHMARK / iid
    gaps: list[str] = []
    ledger_status = row.status if row else None
    carried_from = None
    if row and row.outcome is Outcome.CARRIED:
        carried_from = str(row.carried_from)
        ledger_status = row.details.run.carried_status or ledger_status
    home = row_root(row, run_root, ancestors or {}) if row else run_root
    if home is None:
        gaps.append(f"carried_evidence_unavailable:{carried_from}")
    else:
        inst = home / BENCHMARK / iid
    records = usage_records(inst)
    receipt = receipt_state(inst) if inst.is_dir() else None
    evidence = classify_instance(inst, usage=records, receipt=receipt)
    if row is None:
        gaps.append("no_ledger_row")
        klass: AuditClass = "unknown"
    else:
        klass = CLASS_OF_STATUS.get(str(ledger_status), "unknown")
        if ledger_status != evidence.status:
            gaps.append(f"ledger_evidence_disagree:{ledger_status}!={evidence.status}")
    facts = _receipt_facts(inst, receipt)
    activity, cost, models = _tally_usage(records, row)
    findings, calls = scan(inst) if inst.is_dir() else ([], 0)
    activity.tool_calls = calls
    if not inst.is_dir():
        gaps.append("no_instance_dir")
    official = {
        "projection": PROJECTION.get(receipt.state, "unknown") if receipt else "unavailable",
        "receipt_state": receipt.state if receipt else None,
        "reason": receipt.reason if receipt else None,
    }
    diag = read_record(inst) if inst.is_dir() else None
    return TaskAudit(
        instance_id=iid,
        ledger_status=ledger_status,
        classification=klass,
        reason_code=row.reason_code if row and not carried_from else evidence.reason_code,
        evidence_status=evidence.status,
        official_eval_status=receipt.state if receipt else "unavailable",
        official_pass=receipt.passed if receipt else None,
        official_receipt=facts,
        activity=activity,
        model_activity_observed=activity.nonempty_usage_records > 0,
        mcp_activity_observed=activity.mcp_calls > 0,
        cost=cost,
        models=sorted(models),
        manual_review=findings,
        gaps=gaps,
        eval_attempt={
            "official": official,
            "residual_diagnostic": diag.model_dump(by_alias=True) if diag else None,
        },
        carried_from=carried_from,
        evidence_dir=str(inst),
    )


def _receipt_facts(inst: Path, receipt: ReceiptView | None) -> ReceiptFacts:
    """The claimed attempt's receipt file, if there is one: its verdict, size and hash."""
    if receipt and receipt.receipt_file and (inst / receipt.receipt_file).exists():
        fact = file_fact(inst / receipt.receipt_file)
        return ReceiptFacts(
            available=True, passed=receipt.passed, bytes=fact.bytes, sha256=fact.sha256
        )
    return ReceiptFacts(available=False)


def _tally_usage(
    records: UsageRecords, row: TaskRow | None
) -> tuple[Activity, TaskCost, set[str]]:
    """The task's tokens, cost and models, summed over its ``llm_usage`` records."""
    activity, cost, models = Activity(), TaskCost(), set()
    for _src, _line, rec in records:
        activity.usage_records += 1
        nested = rec.get("usage")
        usage: dict[str, Any] = nested if isinstance(nested, dict) else rec
        if tokens_of(rec) > 0:
            activity.nonempty_usage_records += 1
        activity.prompt_tokens += int(usage.get("prompt_tokens") or 0)
        activity.completion_tokens += int(usage.get("completion_tokens") or 0)
        activity.cached_tokens += int(usage.get("cached_tokens") or 0)
        if rec.get("model"):
            models.add(str(rec["model"]))
        usd = rec.get("cost_usd", rec.get("cost"))
        if isinstance(usd, int | float) and not isinstance(usd, bool):
            cost.known_usd += float(usd)
            cost.estimated_usage_records += bool(rec.get("cost_estimated"))
        else:
            cost.unknown_usage_records += 1
    # No usage record is not "$0": it is unknown, unless the row itself knows the agent's
    # cost (a free agent such as the oracle records cost_known with $0).
    free = row is not None and row.cost_known and not row.cost_usd
    cost.complete = cost.unknown_usage_records == 0 and (activity.usage_records > 0 or free)
    cost.total_usd = round(cost.known_usd, 6) if cost.complete else None
    return activity, cost, models


# --------------------------------------------------------------------------- whole run


def build_report(run_root: Path, manifest: Manifest | None = None) -> AuditReport:
    """Raises ``ManifestError`` / ``LedgerError`` (both ``ValueError``) on a bad run root."""
    run_root = Path(run_root)
    manifest = manifest or read_manifest(run_root)
    ids = selected_ids(manifest)
    rows = latest_rows(run_root)
    ancestors = run_roots(run_root)
    tasks = [audit_task(run_root, iid, rows.get(iid), ancestors) for iid in ids]
    counts: Counter[str] = Counter(t.classification for t in tasks)
    complete = all(t.cost.complete for t in tasks)
    known = round(sum(t.cost.known_usd for t in tasks), 6)
    diags = [t.eval_attempt["residual_diagnostic"] for t in tasks]
    ran = [d for d in diags if d]
    outside = sorted(set(rows) - set(ids))
    return AuditReport(
        run_root=str(run_root),
        task_count=len(ids),
        classifications={k: counts.get(k, 0) for k in CLASSES},
        manual_review_tasks=[t.instance_id for t in tasks if t.manual_review],
        cost={"known_usd": known, "total_usd": known if complete else None, "complete": complete},
        gaps=[f"{t.instance_id}:{g}" for t in tasks for g in t.gaps]
        + [f"ledger_row_outside_selection:{iid}" for iid in outside],
        tasks=tasks,
        eval_attempts={
            "official_projection": dict(
                Counter(t.eval_attempt["official"]["projection"] for t in tasks)
            ),
            "residual_diagnostic": {
                "enabled": bool(ran),
                "semantics": "audit_only",
                "task_count": len(ran),
                "official_declined": sum(t.official_eval_status == "declined" for t in tasks),
                "outcomes": dict(Counter(d["outcome"] for d in ran)),
                "checked": sum(d["outcome"] != "ineligible" for d in ran),
                "ineligible_reasons": dict(
                    Counter(d["reason"] for d in ran if d["outcome"] == "ineligible")
                ),
            },
        },
    )


def audit_command(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="harness cowork audit", description=doc_summary(__doc__)
    )
    parser.add_argument("run", type=Path, help="a Cowork run root (holds run_manifest.json)")
    parser.add_argument(
        "--output", type=Path, required=True, help="report file (never overwritten)"
    )
    args = parser.parse_args(argv)
    try:
        manifest = read_manifest(args.run)
    except ManifestError as exc:
        print(f"harness cowork audit: {exc}", file=sys.stderr)
        return 2
    if BENCHMARK not in manifest.benchmarks:
        ran = ", ".join(manifest.benchmarks) or "no benchmark"
        print(f"harness cowork audit: {args.run} is a run of {ran}, not of Cowork Bench; "
              f"pass a Cowork run root", file=sys.stderr)
        return 2
    if args.output.exists():
        print(f"harness cowork audit: {args.output} exists; choose a new --output", file=sys.stderr)
        return 2
    try:
        report = build_report(args.run, manifest)
    except LedgerError as exc:
        print(f"harness cowork audit: {exc}", file=sys.stderr)
        return 2
    if not publish_exclusive(args.output, report):
        print(
            f"harness cowork audit: {args.output} appeared meanwhile; not overwritten",
            file=sys.stderr,
        )
        return 2
    c = report.classifications
    print(
        f"audited {report.task_count} task(s): {c['passed']} passed, {c['genuine_failure']} "
        f"genuine failure(s), {c['infrastructure']} infrastructure, {c['not_attempted']} not "
        f"attempted, {c['unknown']} unknown; {len(report.manual_review_tasks)} for manual review"
        f" -> {args.output}"
    )
    return 0
