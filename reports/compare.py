"""Paired comparison of two runs on the instances both selected (B minus A). Pure logic.

Paired by task. A run with repeated attempts (``--attempts K``) has K results per task: the
task's score is the mean of its attempts' effective scores (a missing or infrastructure
attempt counts 0, as a missing instance does in a K=1 comparison), its resolved fraction the
share of attempts resolved, and it counts as resolved for McNemar's test when more than half
its attempts resolved. The bootstrap resamples tasks, each with its attempts. Two K=1 runs
compare exactly as they always did: one result per task.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reports.figures import (
    BootstrapInterval,
    Change,
    CompareReport,
    InstanceResult,
    McNemarResult,
    PairedChange,
    RunRef,
)
from reports.stats import DEFAULT_RESAMPLES, bootstrap_mean_ci, mcnemar_chi2, mcnemar_exact_p

SCORE_EPSILON = 1e-9


@dataclass(frozen=True)
class TaskResult:
    """One task of a run as the comparison sees it: its attempts' figures, combined."""

    key: str  # the task's key ("benchmark/task_id"; the instance key for K=1)
    status: str
    score: float  # mean over the attempts
    resolved: bool  # K=1: the instance's; K>1: more than half the attempts resolved
    infra: bool  # some attempt is infra_failed
    attempts: int
    resolved_rate: float
    infra_attempts: int


def _status(results: Sequence[InstanceResult]) -> str:
    if len(results) == 1:
        return results[0].status
    counts = Counter(r.status for r in results)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{status} {n}" for status, n in ranked)


def task_results(results: Sequence[InstanceResult]) -> dict[str, TaskResult]:
    """The results grouped by task (``InstanceResult.task_key``), one entry per task."""
    groups: dict[str, list[InstanceResult]] = defaultdict(list)
    for r in results:
        groups[r.task_key].append(r)
    out: dict[str, TaskResult] = {}
    for key, rs in groups.items():
        n = len(rs)
        resolved = sum(1 for r in rs if r.resolved)
        infra = sum(1 for r in rs if r.infra)
        out[key] = TaskResult(
            key=key,
            status=_status(rs),
            score=rs[0].score if n == 1 else sum(r.score for r in rs) / n,
            resolved=rs[0].resolved if n == 1 else 2 * resolved > n,
            infra=infra > 0,
            attempts=n,
            resolved_rate=resolved / n,
            infra_attempts=infra,
        )
    return out


def classify(a: InstanceResult | TaskResult, b: InstanceResult | TaskResult) -> Change:
    if b.resolved and not a.resolved:
        return "gained"
    if a.resolved and not b.resolved:
        return "lost"
    if b.score > a.score + SCORE_EPSILON:
        return "improved"
    if b.score < a.score - SCORE_EPSILON:
        return "regressed"
    return "same"


def paired_changes(
    a: Mapping[str, TaskResult], b: Mapping[str, TaskResult], *, repeated: bool = False
) -> list[PairedChange]:
    """One change per shared task; ``repeated`` adds the attempts behind each side."""
    out = []
    for key in sorted(set(a) & set(b)):
        ra, rb = a[key], b[key]
        change = PairedChange(
            key=key,
            status_a=ra.status,
            status_b=rb.status,
            score_a=ra.score,
            score_b=rb.score,
            delta=rb.score - ra.score,
            resolved_a=ra.resolved,
            resolved_b=rb.resolved,
            infra_a=ra.infra,
            infra_b=rb.infra,
            change=classify(ra, rb),
        )
        if repeated:
            change.attempts_a, change.attempts_b = ra.attempts, rb.attempts
            change.resolved_rate_a, change.resolved_rate_b = ra.resolved_rate, rb.resolved_rate
        out.append(change)
    return out


def mcnemar(changes: list[PairedChange]) -> McNemarResult:
    b = sum(1 for c in changes if c.resolved_a and not c.resolved_b)
    c = sum(1 for ch in changes if ch.resolved_b and not ch.resolved_a)
    chi2, chi2_p = mcnemar_chi2(b, c)
    return McNemarResult(
        b=b, c=c, discordant=b + c, exact_p=mcnemar_exact_p(b, c), chi2=chi2, chi2_p=chi2_p
    )


def compare_results(
    run_a: RunRef,
    results_a: list[InstanceResult],
    run_b: RunRef,
    results_b: list[InstanceResult],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    level: float = 0.95,
) -> CompareReport:
    a, b = task_results(results_a), task_results(results_b)
    k_a = max((t.attempts for t in a.values()), default=0)
    k_b = max((t.attempts for t in b.values()), default=0)
    repeated = k_a > 1 or k_b > 1
    changes = paired_changes(a, b, repeated=repeated)
    diffs = [c.delta for c in changes]
    ci = bootstrap_mean_ci(diffs, level=level, resamples=resamples, seed=seed)
    n = len(changes)
    infra_a = [c.key for c in changes if c.infra_a]
    infra_b = [c.key for c in changes if c.infra_b]
    warnings: list[str] = []
    if n == 0:
        warnings.append("the runs share no selected instance: nothing to compare")
    for side, keys, tasks in (("A", infra_a, a), ("B", infra_b, b)):
        if keys and not repeated:
            warnings.append(
                f"run {side} has {len(keys)} infra_failed instance(s) among the shared ones; "
                "they count as score 0 and bias the difference: resume that run first"
            )
        elif keys:
            attempts = sum(tasks[k].infra_attempts for k in keys)
            warnings.append(
                f"run {side} has {attempts} infra_failed attempt(s) in {len(keys)} of the shared "
                "tasks; they count as score 0 and bias the difference: resume that run first"
            )
    if repeated:
        warnings.append(
            f"repeated attempts (up to {k_a} per task in A, {k_b} in B): each task's score is "
            "the mean over its attempts and the interval resamples tasks; McNemar's test "
            "counts a task resolved when more than half its attempts resolved"
        )
    if run_a.run_id == run_b.run_id:
        warnings.append("both sides are the same run")
    report = CompareReport(
        run_a=run_a,
        run_b=run_b,
        shared=n,
        only_a=sorted(set(a) - set(b)),
        only_b=sorted(set(b) - set(a)),
        mean_a=sum(c.score_a for c in changes) / n if n else None,
        mean_b=sum(c.score_b for c in changes) / n if n else None,
        resolved_a=sum(1 for c in changes if c.resolved_a),
        resolved_b=sum(1 for c in changes if c.resolved_b),
        bootstrap=BootstrapInterval(
            mean_diff=sum(diffs) / n if n else None,
            low=ci[0] if ci else None,
            high=ci[1] if ci else None,
            level=level,
            resamples=resamples,
            seed=seed,
        ),
        mcnemar=mcnemar(changes),
        infra_a=infra_a,
        infra_b=infra_b,
        warnings=warnings,
        changes=changes,
    )
    if repeated:
        shared = set(a) & set(b)
        report.attempts_per_task_a, report.attempts_per_task_b = k_a, k_b
        report.shared_attempts_a = sum(a[k].attempts for k in shared)
        report.shared_attempts_b = sum(b[k].attempts for k in shared)
    return report
