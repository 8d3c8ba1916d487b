"""95 % confidence intervals of a record's headline, without assuming a distribution.

- The p50 time: the order-statistics interval of the median. The number of samples below the
  true median is Binomial(n, 1/2) whatever the distribution of the times, so the sorted samples
  x_(l) and x_(n+1-l) bracket it with probability >= 95 % for the largest such l (exact
  binomial sums up to EXACT_UP_TO samples, the normal approximation of the binomial above).
  Fewer than 6 samples cannot give a 95 % interval this way: None, not an invented one.
  Any monotone function of the time (a bandwidth, a rate of the p50 iteration) takes its
  interval from the same two order statistics.
- A rate over a whole timed region (total messages / total time): a block bootstrap of the
  mean time per iteration (blocks of consecutive iterations, since neighbouring iterations
  are correlated; fixed seed, so a record always gets the same interval).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

__all__ = [
    "LEVEL",
    "MEDIAN_METHOD",
    "RATE_METHOD",
    "NORMAL_975",
    "block_bootstrap_mean",
    "block_means",
    "block_size",
    "half_width_pct",
    "median_interval",
    "median_ranks",
    "p50_interval",
]

LEVEL = 0.95
EXACT_UP_TO = 1000
NORMAL_975 = 1.959963984540054  # the standard normal's 97.5 % quantile
MEDIAN_METHOD = "order statistics of the median (binomial ranks)"
RATE_METHOD = "block bootstrap of the mean time per iteration"
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 20
MIN_BLOCKS = 10


def median_ranks(n: int) -> tuple[int, int] | None:
    """1-based ranks (l, u) of the order statistics that bracket the median with probability
    >= 95 %, as narrow as that allows; None when n is too small for any 95 % interval."""
    if n < 6:  # P(all n on one side) = 2 / 2**n > 5 % for n <= 5
        return None
    if n > EXACT_UP_TO:
        low = math.floor(n / 2 + 0.5 - NORMAL_975 * math.sqrt(n) / 2)
    else:
        # The largest l with P(B <= l - 1) <= 2.5 %, B ~ Binomial(n, 1/2), in exact integers:
        # 40 * sum_{k < l} C(n, k) <= 2**n.
        total, tail, low, term = 1 << n, 0, 0, 1
        while 40 * (tail + term) <= total:
            tail += term
            low += 1
            term = term * (n - low + 1) // low  # C(n, low)
    low = max(1, low)
    return low, n + 1 - low


def median_interval(samples: Sequence[float]) -> tuple[float, float] | None:
    """The 95 % interval of the median of `samples`, or None when there are too few."""
    ranks = median_ranks(len(samples))
    if ranks is None:
        return None
    ordered = sorted(samples)
    return float(ordered[ranks[0] - 1]), float(ordered[ranks[1] - 1])


def half_width_pct(low: float, high: float, centre: float) -> float | None:
    """Half the interval's width in percent of the headline (what `p50 ± x %` prints)."""
    if not (centre > 0 and math.isfinite(centre)):
        return None
    return 100.0 * (high - low) / 2 / centre


def p50_interval(samples: Sequence[float], p50: float) -> dict[str, Any]:
    """What a record stores as `p50_ci` (seconds): low and high are None for too few samples."""
    bounds = median_interval(samples)
    out: dict[str, Any] = {"level": LEVEL, "method": "order statistics", "low": None,
                           "high": None, "half_width_pct": None}
    if bounds is not None:
        out.update(low=bounds[0], high=bounds[1], half_width_pct=half_width_pct(*bounds, p50))
    return out


def block_size(n: int) -> int:
    """Consecutive values per block: floor(n ** (1/3)), at least 1."""
    return max(1, math.floor(n ** (1 / 3) + 1e-9))


def block_means(values: Sequence[float]) -> list[float] | None:
    """The means of the whole blocks of `values` (block_size consecutive values each); None
    with fewer than MIN_BLOCKS of them."""
    size = block_size(len(values))
    whole = len(values) // size
    if whole < MIN_BLOCKS:
        return None
    return [math.fsum(values[i * size:(i + 1) * size]) / size for i in range(whole)]


def block_bootstrap_mean(values: Sequence[float], *, resamples: int = BOOTSTRAP_RESAMPLES,
                         seed: int = BOOTSTRAP_SEED) -> tuple[float, float] | None:
    """The 95 % percentile interval of the mean of `values` (times per iteration, in time
    order) by a bootstrap over blocks of floor(n ** (1/3)) consecutive values; None with fewer
    than MIN_BLOCKS blocks."""
    n = len(values)
    if n == 0:
        return None
    size = block_size(n)
    sums = [math.fsum(values[i:i + size]) for i in range(0, n, size)]
    counts = [len(values[i:i + size]) for i in range(0, n, size)]
    m = len(sums)
    if m < MIN_BLOCKS:
        return None
    rng = random.Random(seed)
    indices = range(m)
    means = []
    for _ in range(resamples):
        picked = rng.choices(indices, k=m)
        means.append(math.fsum(sums[i] for i in picked) / sum(counts[i] for i in picked))
    means.sort()
    tail = (1 - LEVEL) / 2
    low = means[max(0, math.floor(tail * resamples))]
    high = means[min(resamples - 1, math.ceil((1 - tail) * resamples) - 1)]
    return low, high
