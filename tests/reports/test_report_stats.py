"""Statistics against values computed by hand (and cross-checked with scipy once)."""

from __future__ import annotations

import math
import statistics
import subprocess
import sys

import pytest

from reports.stats import (
    bootstrap_mean_ci,
    bootstrap_means,
    mcnemar_chi2,
    mcnemar_exact_p,
    quantile,
)


@pytest.mark.parametrize(
    ("b", "c", "expected"),
    [
        (3, 10, 0.092285),  # 2 * (1 + 13 + 78 + 286) / 2**13 = 756 / 8192
        (10, 3, 0.092285),  # symmetric
        (0, 5, 0.0625),  # 2 / 32
        (1, 1, 1.0),
        (0, 0, 1.0),
        (5, 6, 1.0),  # doubled tail above 1 is capped
        (2, 12, 0.012939),  # 2 * (1 + 14 + 91) / 2**14
    ],
)
def test_mcnemar_exact_two_sided(b: int, c: int, expected: float) -> None:
    assert mcnemar_exact_p(b, c) == pytest.approx(expected, abs=5e-6)


def test_mcnemar_exact_large_counts_stay_finite() -> None:
    p = mcnemar_exact_p(400, 520)
    assert 0.0 < p < 0.001


def test_mcnemar_chi_square_with_continuity_correction() -> None:
    stat, p = mcnemar_chi2(3, 10)
    assert stat == pytest.approx(36 / 13)  # (|3 - 10| - 1)^2 / 13
    assert p == pytest.approx(0.096092, abs=5e-6)  # scipy.stats.chi2.sf(36/13, 1)
    assert mcnemar_chi2(0, 0) == (0.0, 1.0)
    assert mcnemar_chi2(4, 4) == (pytest.approx(0.0), pytest.approx(1.0))


def test_quantile_linear_interpolation() -> None:
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.9) == pytest.approx(3.7)
    assert quantile([5.0], 0.025) == 5.0
    with pytest.raises(ValueError):
        quantile([], 0.5)


def test_bootstrap_interval_of_a_balanced_binary_sample() -> None:
    # Resample means of 5 ones and 5 zeros follow Binomial(10, 1/2) / 10:
    # P(X <= 1) = 11/1024 < 2.5% < P(X <= 2) = 56/1024, so the 2.5% point is 0.2, and by
    # symmetry the 97.5% point is 0.8. With 10,000 resamples both land exactly there.
    low, high = bootstrap_mean_ci([1.0] * 5 + [0.0] * 5, resamples=10_000, seed=7) or (0, 0)
    assert (low, high) == (pytest.approx(0.2), pytest.approx(0.8))


def test_bootstrap_interval_matches_normal_approximation() -> None:
    diffs = [((i * 37) % 23 - 11) / 20 for i in range(200)]
    mean = statistics.fmean(diffs)
    se = statistics.pstdev(diffs) / math.sqrt(len(diffs))
    low, high = bootstrap_mean_ci(diffs, resamples=4_000, seed=1) or (0, 0)
    assert low == pytest.approx(mean - 1.96 * se, abs=0.15 * se + 0.002)
    assert high == pytest.approx(mean + 1.96 * se, abs=0.15 * se + 0.002)


def test_bootstrap_is_seeded_and_deterministic() -> None:
    diffs = [0.0, 0.5, -0.25, 1.0, 0.0, 0.3, -1.0, 0.75]
    first = bootstrap_mean_ci(diffs, resamples=2_000, seed=3)
    assert first == bootstrap_mean_ci(diffs, resamples=2_000, seed=3)
    assert first != bootstrap_mean_ci(diffs, resamples=2_000, seed=4)
    assert bootstrap_means([0.4] * 6, resamples=50, seed=0) == [pytest.approx(0.4)] * 50


def test_bootstrap_of_nothing_is_none() -> None:
    assert bootstrap_mean_ci([], resamples=100) is None


def test_pure_modules_import_neither_pytest_nor_docker() -> None:
    code = (
        "import sys, reports.stats, reports.metrics, reports.compare, reports.figures\n"
        "bad = sorted(m for m in ('pytest', '_pytest', 'docker') if m in sys.modules)\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
