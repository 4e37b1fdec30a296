"""Pure statistics: quantiles, paired bootstrap interval, McNemar's test.

No dependency beyond the standard library and :mod:`harness.run.samples` (the quantile
and the bootstrap). Resampling draws indices with ``random.Random(seed).random()``, whose
sequence Python keeps stable across versions, so an interval is reproducible from its seed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# The bootstrap and the quantile live with the repeated-attempt figures (the runner's
# session-end summary uses them too); re-exported here for the report and the gate.
from harness.run.samples import DEFAULT_RESAMPLES as DEFAULT_RESAMPLES
from harness.run.samples import bootstrap_mean_ci as bootstrap_mean_ci
from harness.run.samples import bootstrap_means as bootstrap_means
from harness.run.samples import quantile as quantile


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
