"""Pure statistics: quantiles, paired bootstrap interval, McNemar's test.

No dependency beyond the standard library. Resampling draws indices with
``random.Random(seed).random()``, whose sequence Python keeps stable across versions,
so an interval is reproducible from its seed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

DEFAULT_RESAMPLES = 10_000


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (Hyndman-Fan type 7, numpy's default) of sorted data."""
    if not sorted_values:
        raise ValueError("quantile of an empty sequence")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile level {q} outside [0, 1]")
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


def bootstrap_means(
    values: Sequence[float], *, resamples: int = DEFAULT_RESAMPLES, seed: int = 0
) -> list[float]:
    """Means of ``resamples`` resamples (with replacement) of ``values``, sorted."""
    n = len(values)
    if n == 0:
        return []
    if resamples < 1:
        raise ValueError("resamples must be at least 1")
    data = list(values)
    draw = random.Random(seed).random
    means = [sum([data[int(draw() * n)] for _ in range(n)]) / n for _ in range(resamples)]
    means.sort()
    return means


def bootstrap_mean_ci(
    values: Sequence[float],
    *,
    level: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean of ``values`` (paired differences)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level {level} outside (0, 1)")
    means = bootstrap_means(values, resamples=resamples, seed=seed)
    if not means:
        return None
    alpha = (1.0 - level) / 2.0
    return quantile(means, alpha), quantile(means, 1.0 - alpha)


def mcnemar_exact_p(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: binomial(b + c, 1/2), doubled smaller tail, capped at 1."""
    if b < 0 or c < 0:
        raise ValueError("discordant counts must be non-negative")
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1))
    return min(1.0, (2 * tail) / (2**n))


def mcnemar_chi2(b: int, c: int) -> tuple[float, float]:
    """McNemar's chi-square with continuity correction and its p-value (1 degree of freedom)."""
    n = b + c
    if n == 0:
        return 0.0, 1.0
    stat = max(abs(b - c) - 1, 0) ** 2 / n
    return stat, math.erfc(math.sqrt(stat / 2.0))


def median(values: Sequence[float]) -> float | None:
    return quantile(sorted(values), 0.5) if values else None
