"""The ratio of two runs' p50 times with a 95 % interval, for the comparison plot.

Consecutive iterations are not independent (the machine drifts between fast and slow states),
so the interval is a percentile bootstrap over the batch medians the verdict also uses, not over
raw samples: an interval from thousands of correlated samples would be far too narrow.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from .stats import median
from .unpaired import batch_medians

RESAMPLES = 2000
CONFIDENCE = 0.95


def ratio_interval(baseline: Sequence[float], current: Sequence[float],
                   seed: int = 0) -> tuple[float, float, float]:
    """(current p50 / baseline p50, low, high); low <= ratio <= high. Deterministic."""
    base, cur = [float(x) for x in baseline], [float(x) for x in current]
    if not base or not cur:
        raise ValueError("ratio_interval needs samples on both sides")
    ratio = _ratio(median(cur), median(base))
    b, c = batch_medians(base), batch_medians(cur)
    rng = random.Random(seed)
    draws = sorted(
        _ratio(median(rng.choices(c, k=len(c))), median(rng.choices(b, k=len(b))))
        for _ in range(RESAMPLES)
    )
    tail = (1 - CONFIDENCE) / 2
    low = draws[int(tail * (RESAMPLES - 1))]
    high = draws[int((1 - tail) * (RESAMPLES - 1))]
    return ratio, min(low, ratio), max(high, ratio)


def _ratio(cur: float, base: float) -> float:
    if base <= 0:
        return 1.0 if cur <= 0 else float("inf")
    return cur / base
