"""Spend accounting: pure functions over a :class:`CampaignState` (no I/O).

The rule
--------
Two sources tell what a campaign spent since its creation:

* the key-level **meter**: ``last_usage - usage_baseline`` (the provider's cumulative
  usage of the key; it lags, and it also counts unrelated use of the key);
* the **settled charges** of our own instances: ``settled_usd``, the sum of every
  settlement (the instance's reported cost, or its reservation when the cost is unknown).

``spent = prior_spend_usd + max(meter delta, settled charges)`` (plus, in full, the charges
settled before a meter was added to a meterless campaign: ``unmetered_usd``). Taking the larger means
a meter that lags never lets the ceiling be crossed, and spend the instances did not
report (or unrelated use of the key) is never ignored. When the meter reports exactly
the settled costs, spent equals their sum.

An instance is admitted only if ``spent + outstanding + amount + budget_reserve <=
ceiling`` and ``spent + outstanding + budget_reserve < ceiling`` (some headroom is left:
a known exhausted budget admits nothing), where ``outstanding`` = every reservation in
the file, including those of crashed runs; and, when a run budget is set, the same two
rules over the run's settled charges and reservations. ``amount`` is the explicit
``--per-task-reserve-usd`` or 0: per-task limits are never reserved automatically, and
``budget_reserve`` is one allowance for delayed charges, independent of concurrency.
Money is compared with a tolerance of a nano-dollar.
"""

from __future__ import annotations

import math

from .errors import CAMPAIGN_BUDGET, RUN_BUDGET
from .models import COST_HISTORY_LIMIT, ActiveRun, CampaignState

EPS = 1e-9


def metered_delta(state: CampaignState) -> float:
    return max(0.0, state.last_usage - state.usage_baseline)


def spent_usd(state: CampaignState) -> float:
    metered_settled = max(0.0, state.settled_usd - state.unmetered_usd)
    return state.prior_spend_usd + state.unmetered_usd + max(metered_delta(state),
                                                             metered_settled)


def outstanding_usd(state: CampaignState) -> float:
    return math.fsum(run.outstanding_usd for run in state.active_runs.values())


def refresh_derived(state: CampaignState) -> None:
    """Recompute the derived totals written for readers of the file."""
    state.spent_usd = spent_usd(state)
    state.outstanding_usd = outstanding_usd(state)
    state.remaining_usd = state.ceiling_usd - state.spent_usd
    state.available_usd = state.remaining_usd - state.outstanding_usd


def admission_refusal(
    state: CampaignState,
    run: ActiveRun,
    amount_usd: float,
    *,
    budget_reserve_usd: float,
    run_budget_usd: float | None,
) -> str | None:
    """Return the refusal reason for reserving ``amount_usd``, or None when it fits."""
    held = spent_usd(state) + outstanding_usd(state) + budget_reserve_usd
    if held + amount_usd > state.ceiling_usd + EPS or held >= state.ceiling_usd - EPS:
        return CAMPAIGN_BUDGET
    if run_budget_usd is not None:
        run_held = run.settled_usd + run.outstanding_usd
        if run_held + amount_usd > run_budget_usd + EPS or run_held >= run_budget_usd - EPS:
            return RUN_BUDGET
    return None


def charge_for(
    reserved_usd: float, cost_usd: float | None, cost_known: bool, allowance_usd: float = 0.0
) -> float:
    """What a settlement charges: the reported cost; when unknown, the largest of the
    reservation, the run's unknown-cost allowance and the partial cost reported."""
    if cost_known and is_money(cost_usd):
        assert cost_usd is not None
        return cost_usd
    partial = cost_usd if is_money(cost_usd) else 0.0
    assert partial is not None
    return max(reserved_usd, allowance_usd, partial)


def overran(reserved_usd: float, cost_usd: float | None) -> bool:
    return is_money(cost_usd) and cost_usd is not None and cost_usd > reserved_usd + EPS


def is_money(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and value >= 0


def reading_rejection(usage: float, last_usage: float) -> str | None:
    """Why a meter reading is not accepted, or None when it is."""
    if not math.isfinite(usage):
        return f"non-finite reading: {usage!r}"
    if usage < 0:
        return f"negative reading: {usage!r}"
    if usage < last_usage - EPS:
        return f"reading went down: {usage!r} < last accepted {last_usage!r}"
    return None


def remember_cost(state: CampaignState, cost_usd: float) -> None:
    state.cost_history.append(cost_usd)
    del state.cost_history[:-COST_HISTORY_LIMIT]


def learned_reserve(
    history: list[float], *, safety_factor: float = 1.5, min_samples: int = 5
) -> float | None:
    """Per-task reservation learned from known costs: the 90th percentile times a factor.

    None while fewer than ``min_samples`` costs are known.
    """
    if len(history) < min_samples:
        return None
    ordered = sorted(history)
    index = min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)
    return ordered[index] * safety_factor
