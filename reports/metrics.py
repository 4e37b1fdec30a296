"""Headline metrics of a run: pure functions of its instance results.

The denominator is always the selection (``Manifest.selection.count``); a selected
instance without a ledger row counts as not attempted with score 0.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from harness.core.models import ModelCalls, Outcome, TaskRow, instance_key
from harness.core.scoring import (
    NO_ROW,
    no_verdict_reason,
    row_is_infra,
    row_is_resolved,
    row_score,
)
from harness.run.samples import split_attempt
from reports.figures import (
    NOT_ATTEMPTED,
    CostTotals,
    DurationStats,
    Headline,
    InstanceResult,
    RateSet,
)
from reports.stats import quantile


def _model_flag(m: ModelCalls) -> str | None:
    if m.allowed and not m.refused:
        return None
    counts = [f"{m.calls} call(s)"] if m.calls or not m.refused else []
    if m.refused:
        counts.append(f"{m.refused} refused")
    head = "not allowed" if not m.allowed else "refused calls"
    return f"{head}: {m.model} ({m.source}, {', '.join(counts)})"


def model_flag(models: Sequence[ModelCalls] | None) -> str | None:
    """Why a row's model calls need a look: a call named a model that was not allowed (not
    the declared model nor an allowed helper; the gateway refuses those with 403), or calls
    were refused. None: nothing to flag."""
    flags = [f for m in models or [] if (f := _model_flag(m)) is not None]
    return "; ".join(flags) or None


def result_from_row(row: TaskRow, *, in_selection: bool = True) -> InstanceResult:
    score = row_score(row)
    resolved = row_is_resolved(row)
    return InstanceResult(
        key=row.key,
        benchmark=row.benchmark,
        instance_id=row.instance_id,
        attempted=True,
        in_selection=in_selection,
        status=row.status,
        outcome=row.outcome.value,
        reason_code=row.reason_code,
        score=score,
        raw_score=row.score,
        resolved=resolved,
        near_resolved=resolved or row.near_resolved is True,
        infra=row_is_infra(row),
        carried=row.outcome is Outcome.CARRIED or row.carried_from is not None,
        carried_from=row.carried_from,
        official_eval_status=row.official_eval_status,
        tests_passed=row.tests_passed,
        tests_total=row.tests_total,
        cost_usd=row.cost_usd,
        cost_known=row.cost_known and row.cost_usd is not None,
        duration_s=row.duration_s,
        attempt=row.attempt,
        worker=row.worker,
        error=(row.error or "").splitlines()[0][:300] if row.error else None,
        output_paths=dict(row.output_paths),
        task=instance_key(row.benchmark, row.sample_of) if row.sample_of is not None else None,
        sample=row.sample if row.sample_of is not None else None,
        models=list(row.models) if row.models is not None else None,
        model_flag=model_flag(row.models),
        rescored=rescored_text(row.details.eval.rescore),
        no_verdict=no_verdict_reason(row),
        model_trouble=trouble_of(row.details.agent.model_trouble),
    )


TROUBLE_KEYS = ("rate_limited", "retries", "waited_s", "stalls", "upstream_errors")


def trouble_of(record: object) -> dict[str, float] | None:
    """A row's ``details.agent.model_trouble`` as numbers (None: none, or not readable)."""
    if not isinstance(record, dict):
        return None
    out = {k: float(v) for k in TROUBLE_KEYS
           if isinstance(v := record.get(k), (int, float)) and v}
    return out or None



def rescored_text(rule: object) -> str | None:
    """``details.eval.rescore`` of a rescored row as "rescored 0.8333 -> 0.7500: <rule>"."""
    if not isinstance(rule, dict) or not isinstance(rule.get("new_score"), (int, float)):
        return None
    old = rule.get("old_score")
    old_text = f"{old:.4f}" if isinstance(old, (int, float)) else "-"
    what = str(rule.get("rule") or "rescored")[:200]
    return f"rescored {old_text} -> {float(rule['new_score']):.4f}: {what}"


def missing_result(key: str) -> InstanceResult:
    benchmark, _, instance_id = key.rpartition("/")
    task, sample = split_attempt(instance_id)  # an attempt without a row: "<task>@<k>"
    return InstanceResult(
        key=key,
        benchmark=benchmark,
        instance_id=instance_id,
        attempted=False,
        status=NOT_ATTEMPTED,
        outcome=Outcome.NOT_ATTEMPTED.value,
        no_verdict=NO_ROW,
        task=instance_key(benchmark, task) if sample is not None else None,
        sample=sample,
    )


def _ratio(num: float, den: int) -> float | None:
    return num / den if den > 0 else None


def rate_set(results: Sequence[InstanceResult], denominator: int) -> RateSet:
    """Rates over ``denominator``; ``results`` not listed (unknown keys) count as score 0."""
    resolved = sum(1 for r in results if r.resolved)
    near = sum(1 for r in results if r.near_resolved)
    return RateSet(
        denominator=denominator,
        mean_score=_ratio(sum(r.score for r in results), denominator),
        resolved=resolved,
        resolved_rate=_ratio(resolved, denominator),
        near_resolved=near,
        near_resolved_rate=_ratio(near, denominator),
        pass_at_1=_ratio(resolved, denominator),
    )


def cost_totals(results: Iterable[InstanceResult]) -> CostTotals:
    totals = CostTotals()
    for r in results:
        if not r.attempted:
            continue
        if r.carried:
            if r.cost_known and r.cost_usd is not None:
                totals.carried_usd += r.cost_usd
        elif r.cost_known and r.cost_usd is not None:
            totals.known_usd += r.cost_usd
            totals.known_rows += 1
        else:
            totals.unknown_rows += 1
    return totals


def duration_stats(results: Iterable[InstanceResult]) -> DurationStats:
    """Durations of the instances this run attempted itself (carried ones ran elsewhere)."""
    values = sorted(
        r.duration_s for r in results if r.attempted and not r.carried and r.duration_s is not None
    )
    if not values:
        return DurationStats()
    return DurationStats(
        count=len(values),
        total_s=sum(values),
        mean_s=sum(values) / len(values),
        median_s=quantile(values, 0.5),
        p90_s=quantile(values, 0.9),
        max_s=values[-1],
    )


def _sorted_counts(counter: Counter[str]) -> dict[str, int]:
    return dict(sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])))


def headline(results: Sequence[InstanceResult], selected: int) -> Headline:
    """Headline figures of the selected instances ``results`` over ``selected`` instances.

    ``selected`` may exceed ``len(results)`` when the manifest counts instances it does
    not list; those count as not attempted with score 0.
    """
    selected = max(selected, len(results))
    attempted = sum(1 for r in results if r.attempted)
    infra = [r for r in results if r.infra]
    counts = Counter(r.status for r in results)
    outcomes = Counter(r.outcome for r in results)
    unlisted = selected - len(results)
    if unlisted:
        counts[NOT_ATTEMPTED] += unlisted
        outcomes[Outcome.NOT_ATTEMPTED.value] += unlisted
    judged = [r for r in results if r.no_verdict is None]
    excluded = Counter(r.no_verdict for r in results if r.no_verdict is not None)
    if unlisted:
        excluded[NO_ROW] += unlisted
    scores = [r.score for r in results if r.attempted and not r.infra]
    return Headline(
        selected=selected,
        attempted=attempted,
        not_attempted=selected - attempted,
        infra_failed=len(infra),
        carried=sum(1 for r in results if r.carried),
        binary=bool(scores) and all(s in (0.0, 1.0) for s in scores),
        raw=rate_set(results, selected),
        with_verdict=rate_set(judged, len(judged)),
        excluded_reasons=_sorted_counts(excluded),
        counts=_sorted_counts(counts),
        outcome_counts=_sorted_counts(outcomes),
        cost=cost_totals(results),
        duration=duration_stats(results),
    )
