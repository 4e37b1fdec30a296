"""Paired comparison: shared subset, change labels, McNemar counts, infra flags."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from harness.core.models import Outcome, TaskRow
from reports.build import compare_runs
from reports.run import load_run

MakeRow = Callable[..., TaskRow]


@pytest.fixture
def two_runs(make_run, make_row: MakeRow):
    a_rows = [
        make_row("pb/i1", "A", score=1.0),
        make_row("pb/i2", "A", score=0.4),
        make_row("pb/i3", "A", score=0.9),
        make_row("pb/i4", "A", score=0.2),
        make_row("pb/only-a", "A", score=1.0),
        make_row("pb/i6", "A", status="infra_failed", outcome=Outcome.INFRA_FAILED, infra=True),
    ]
    b_rows = [
        make_row("pb/i1", "B", score=0.5),  # lost
        make_row("pb/i2", "B", score=1.0),  # gained
        make_row("pb/i3", "B", score=0.95),  # improved
        make_row("pb/i4", "B", score=0.2),  # same
        make_row("pb/only-b", "B", score=0.0),
        make_row("pb/i6", "B", score=1.0),  # gained, but A had an infra failure
    ]
    a = make_run("a", a_rows, [r.key for r in a_rows] + ["pb/i5"])
    b = make_run("b", b_rows, [r.key for r in b_rows] + ["pb/i5"])  # i5: neither attempted
    return load_run(a), load_run(b)


def test_pairs_on_the_shared_selection(two_runs) -> None:
    cmp = compare_runs(*two_runs, resamples=500)
    assert cmp.shared == 6
    assert cmp.only_a == ["pb/only-a"]
    assert cmp.only_b == ["pb/only-b"]
    changes = {c.key: c.change for c in cmp.changes}
    assert changes == {
        "pb/i1": "lost",
        "pb/i2": "gained",
        "pb/i3": "improved",
        "pb/i4": "same",
        "pb/i5": "same",
        "pb/i6": "gained",
    }
    assert cmp.mean_a == pytest.approx((1.0 + 0.4 + 0.9 + 0.2) / 6)
    assert cmp.mean_b == pytest.approx((0.5 + 1.0 + 0.95 + 0.2 + 1.0) / 6)
    low, mid, high = cmp.bootstrap.low, cmp.bootstrap.mean_diff, cmp.bootstrap.high
    assert low is not None and mid is not None and high is not None
    assert mid == pytest.approx(3.65 / 6 - 2.5 / 6)
    assert low <= mid <= high


def test_mcnemar_counts_discordant_resolutions(two_runs) -> None:
    mc = compare_runs(*two_runs, resamples=100).mcnemar
    assert (mc.b, mc.c) == (1, 2)  # A only: i1; B only: i2, i6
    assert mc.exact_p == pytest.approx(1.0)


def test_infra_failures_on_shared_instances_are_flagged(two_runs) -> None:
    cmp = compare_runs(*two_runs, resamples=100)
    assert cmp.infra_a == ["pb/i6"]
    assert cmp.infra_b == []
    assert any("run A has 1 infra_failed" in w for w in cmp.warnings)


def test_same_seed_same_interval(two_runs) -> None:
    first = compare_runs(*two_runs, resamples=300, seed=11)
    again = compare_runs(*two_runs, resamples=300, seed=11)
    assert first.model_dump_json() == again.model_dump_json()
