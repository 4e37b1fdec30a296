"""Paired comparison of two runs on the instances both selected (B minus A). Pure logic."""

from __future__ import annotations

from collections.abc import Mapping

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


def classify(a: InstanceResult, b: InstanceResult) -> Change:
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
    a: Mapping[str, InstanceResult], b: Mapping[str, InstanceResult]
) -> list[PairedChange]:
    out = []
    for key in sorted(set(a) & set(b)):
        ra, rb = a[key], b[key]
        out.append(
            PairedChange(
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
        )
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
    a = {r.key: r for r in results_a}
    b = {r.key: r for r in results_b}
    changes = paired_changes(a, b)
    diffs = [c.delta for c in changes]
    ci = bootstrap_mean_ci(diffs, level=level, resamples=resamples, seed=seed)
    n = len(changes)
    infra_a = [c.key for c in changes if c.infra_a]
    infra_b = [c.key for c in changes if c.infra_b]
    warnings: list[str] = []
    if n == 0:
        warnings.append("the runs share no selected instance: nothing to compare")
    for side, keys in (("A", infra_a), ("B", infra_b)):
        if keys:
            warnings.append(
                f"run {side} has {len(keys)} infra_failed instance(s) among the shared ones; "
                "they count as score 0 and bias the difference: resume that run first"
            )
    if run_a.run_id == run_b.run_id:
        warnings.append("both sides are the same run")
    return CompareReport(
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
