"""The models a run's rows called (issue 24: the model under test is pinned). Pure logic.

Each row may list its calls per model and source (``TaskRow.models``). The report totals
them per model and source, shows them per instance, and flags a row whose calls named a
model that was not allowed or had refused calls (:func:`reports.metrics.model_flag`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from reports.figures import FlaggedRow, InstanceResult, ModelTotal, ModelUse


@dataclass
class _Total:
    rows: set[str] = field(default_factory=set)
    calls: int = 0
    refused: int = 0
    prompt: int | None = None
    completion: int | None = None
    cost: float | None = None
    cost_unknown: int = 0


def _add(total: int | None, value: int | None) -> int | None:
    if value is None:
        return total
    return value if total is None else total + value


def model_use(results: Sequence[InstanceResult]) -> ModelUse | None:
    """Totals per (model, source, allowed) over ``results`` and the flagged rows; None when
    no row recorded its models (a run from before issue 24, or agents that report none)."""
    recorded = [r for r in results if r.models is not None]
    if not recorded:
        return None
    totals: dict[tuple[str, str, bool], _Total] = {}
    for r in recorded:
        for m in r.models or []:
            t = totals.setdefault((m.model, m.source, m.allowed), _Total())
            t.rows.add(r.key)
            t.calls += m.calls
            t.refused += m.refused
            t.prompt = _add(t.prompt, m.prompt_tokens)
            t.completion = _add(t.completion, m.completion_tokens)
            if m.cost_usd is None:
                t.cost_unknown += 1
            else:
                t.cost = (t.cost or 0.0) + m.cost_usd
    return ModelUse(
        rows_recorded=len(recorded),
        rows_unrecorded=sum(1 for r in results if r.attempted and r.models is None),
        totals=[
            ModelTotal(
                model=model,
                source=source,
                instances=len(t.rows),
                calls=t.calls,
                refused=t.refused,
                prompt_tokens=t.prompt,
                completion_tokens=t.completion,
                cost_usd=t.cost,
                cost_unknown_rows=t.cost_unknown,
                allowed=allowed,
            )
            for (model, source, allowed), t in sorted(totals.items())
        ],
        flagged=[FlaggedRow(key=r.key, flag=r.model_flag) for r in recorded if r.model_flag],
        trouble=trouble_sums(results),
    )


def trouble_sums(results: Sequence[InstanceResult]) -> dict[str, float] | None:
    """The provider's pushback over the rows: how many met it, and each count summed."""
    met = [r.model_trouble for r in results if r.model_trouble]
    if not met:
        return None
    sums: dict[str, float] = {"rows": float(len(met))}
    for t in met:
        for k, v in t.items():
            sums[k] = round(sums.get(k, 0.0) + v, 3)
    return sums


def trouble_text(trouble: dict[str, float]) -> str:
    """``429s 2, retries 2, waited 0.8 s, stalls 1, failed calls 1`` (the counts met)."""
    names = {"rate_limited": "429s", "retries": "retries", "waited_s": "waited",
             "stalls": "streams cut", "upstream_errors": "failed calls"}
    parts = [f"{names[k]} {v:g}{' s' if k == 'waited_s' else ''}"
             for k, v in trouble.items() if k in names]
    return ", ".join(parts)


def models_cell(r: InstanceResult) -> str:
    """One instance's models for a table cell: ``model: N call(s)[, R refused] (source)``,
    with ⚠ when the row is flagged."""
    if r.models is None:
        return ""
    text = "; ".join(
        f"{m.model}: {m.calls} call(s){f', {m.refused} refused' if m.refused else ''} ({m.source})"
        for m in r.models
    )
    text = text or "none"
    return f"⚠ {text}" if r.model_flag else text
