"""Reports of real runs of the built-in ``selftest`` benchmark, first and resumed."""

from __future__ import annotations

from pathlib import Path

import pytest

from reports.build import build_figures, compare_runs
from reports.run import load_run


def test_real_run_figures(real_run_root: Path) -> None:
    head = build_figures(load_run(real_run_root)).headline
    assert head.selected == 9
    assert head.attempted == 9
    assert head.infra_failed == 1
    # ok x3 + slow = 1.0 each, half 0.5, near 0.96, bad 0, gave-up 0, docker (infra) 0
    assert head.raw.mean_score == pytest.approx(5.46 / 9)
    assert head.with_verdict.mean_score == pytest.approx(5.46 / 8)
    assert (head.raw.resolved, head.raw.near_resolved) == (4, 5)
    assert head.counts == {"completed": 7, "failed": 1, "infra_failed": 1}


def test_resumed_run_keeps_the_ancestor_verdicts(
    real_run_root: Path, resumed_run_root: Path
) -> None:
    first = load_run(real_run_root)
    resumed = load_run(resumed_run_root)
    head = build_figures(resumed).headline
    assert head.carried == 8  # every settled instance; the infra failure ran again
    assert head.raw.mean_score == pytest.approx(5.46 / 9)
    for key, result in resumed.by_key.items():
        before = first.by_key[key]
        assert (result.status, result.score, result.resolved) == (
            before.status,
            before.score,
            before.resolved,
        )
        assert result.carried == (not before.infra)
        if result.carried:
            assert result.carried_from == first.run_id
    cmp = compare_runs(first, resumed, resamples=200)
    assert cmp.shared == 9
    assert {c.change for c in cmp.changes} == {"same"}
