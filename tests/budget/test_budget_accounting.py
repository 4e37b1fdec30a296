"""The spend rule and admission arithmetic (pure functions, no files)."""

from __future__ import annotations

import math

from harness.budget import accounting
from harness.budget.models import ActiveRun, CampaignState, ReservationEntry


def _state(**kw: float) -> CampaignState:
    base = {
        "created_at_unix": 0.0,
        "updated_at_unix": 0.0,
        "ceiling_usd": 10.0,
        "key_fingerprint": "sha256:x",
        "usage_baseline": 100.0,
        "last_usage": 100.0,
    }
    base.update(kw)
    return CampaignState.model_validate(base)


def _run(outstanding: float = 0.0, settled: float = 0.0) -> ActiveRun:
    run = ActiveRun(
        run_id="r", run_root="/r", pid=1, host="h", admitted_at_unix=0, usage_at_admission=0
    )
    if outstanding:
        run.reservations["k"] = ReservationEntry(
            amount_usd=outstanding, reserved_at_unix=0, worker_pid=1
        )
    run.settled_usd = settled
    return run


def test_spent_takes_the_larger_of_meter_and_settled_costs() -> None:
    lagging_meter = _state(last_usage=101.0, settled_usd=3.0, prior_spend_usd=2.0)
    assert accounting.spent_usd(lagging_meter) == 5.0  # prior + settled
    meter_ahead = _state(last_usage=104.5, settled_usd=3.0, prior_spend_usd=2.0)
    assert accounting.spent_usd(meter_ahead) == 6.5  # prior + metered delta


def test_admission_counts_outstanding_reservations_and_the_reserve() -> None:
    state = _state(settled_usd=4.0)
    run = _run(outstanding=3.0)
    state.active_runs["r"] = run
    # 4 spent + 3 outstanding + 2 new + 1 reserve = 10: fits exactly
    assert (
        accounting.admission_refusal(state, run, 2.0, budget_reserve_usd=1.0, run_budget_usd=None)
        is None
    )
    assert (
        accounting.admission_refusal(state, run, 2.01, budget_reserve_usd=1.0, run_budget_usd=None)
        == "campaign_budget"
    )
    assert (
        accounting.admission_refusal(state, run, 1.0, budget_reserve_usd=0.0, run_budget_usd=3.5)
        == "run_budget"
    )


def test_unknown_cost_is_charged_at_the_reservation() -> None:
    assert accounting.charge_for(2.0, 0.5, cost_known=True) == 0.5
    assert accounting.charge_for(2.0, None, cost_known=False) == 2.0
    assert accounting.charge_for(2.0, 3.0, cost_known=False) == 3.0  # partial cost above it
    assert accounting.charge_for(2.0, math.nan, cost_known=True) == 2.0
    assert accounting.overran(2.0, 2.5) and not accounting.overran(2.0, 2.0)


def test_readings_must_be_finite_non_negative_and_not_go_down() -> None:
    assert accounting.reading_rejection(5.0, 5.0) is None
    assert "went down" in (accounting.reading_rejection(4.9, 5.0) or "")
    assert "non-finite" in (accounting.reading_rejection(math.nan, 0.0) or "")
    assert "non-finite" in (accounting.reading_rejection(math.inf, 0.0) or "")
    assert "negative" in (accounting.reading_rejection(-1.0, -5.0) or "")


def test_learned_reserve_needs_history_and_applies_the_safety_factor() -> None:
    assert accounting.learned_reserve([1.0, 2.0], min_samples=5) is None
    history = [float(i) for i in range(1, 11)]  # p90 = 9
    assert accounting.learned_reserve(history, safety_factor=1.5) == 13.5
