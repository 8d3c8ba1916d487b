"""Two runs' samples, unpaired: is the current run slower, faster, or the same?

Shown slower: a one-sided Mann-Whitney U test on the batch medians that says "current is
stochastically slower" at ``alpha``; beyond the threshold: a median (p50) slowdown larger than
it (vocabulary.decide, the rule of every comparison). The rank test ignores how far the heavy
tail reaches (an occasional 15x stall moves a mean, not a rank), and the threshold keeps
statistically real but tiny shifts from failing CI.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .distributions import mann_whitney_p_values
from .paired import DEFAULT_ALPHA, SIGNED_RANK_EFFICIENCY, detectable_change, robust_sd
from .stats import median
from .vocabulary import Kind, decide

# Ten batches against ten: the smallest one-sided Mann-Whitney p-value is 1/184756, so a
# consistent shift is significant at alpha=0.01 even though each side is only ten numbers.
BATCHES = 10

def judge(
    baseline_samples: Sequence[float],
    current_samples: Sequence[float],
    threshold: float,
    alpha: float = DEFAULT_ALPHA,
) -> tuple[Kind, float, float]:
    """Judge current against baseline samples (seconds; lower is better).

    Returns (kind, change, p_value): kind is vocabulary.decide's for a comparison that could
    gate (comparison/verdict.py says whether it can); change is current p50 / baseline p50 - 1;
    p_value is the one-sided p-value in the direction the p50 moved. A regression needs
    current p50 > baseline p50 x (1 + threshold); an
    improvement needs baseline p50 > current p50 x (1 + threshold), i.e. throughput up by more
    than the threshold, which makes judge(a, b) and judge(b, a) exact mirror images.
    """
    base_in_order = [float(x) for x in baseline_samples]
    cur_in_order = [float(x) for x in current_samples]
    base, cur = sorted(base_in_order), sorted(cur_in_order)
    if not base or not cur:
        raise ValueError("judge needs at least one baseline and one current sample")
    if not all(math.isfinite(x) for x in base + cur):
        raise ValueError("samples must be finite numbers")
    if not (math.isfinite(threshold) and threshold >= 0):
        raise ValueError(f"threshold must be a finite fraction >= 0, got {threshold!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha!r}")

    base_p50 = median(base)
    cur_p50 = median(cur)
    change = relative_change(base_p50, cur_p50)
    p_slower, p_faster = one_sided_p_values(base_in_order, cur_in_order)
    if cur_p50 > base_p50:
        p_value = p_slower
    elif cur_p50 < base_p50:
        p_value = p_faster
    else:
        p_value = min(p_slower, p_faster)
    moved = log_change(base_p50, cur_p50)
    kind = decide(p_slower=p_slower, p_faster=p_faster, level=alpha, low=moved, high=moved,
                  threshold=threshold)
    return kind, change, p_value


def one_sided_p_values(baseline_samples: Sequence[float], current_samples: Sequence[float]
                       ) -> tuple[float, float]:
    """(p that current is slower, p that it is faster): Mann-Whitney U on the batch medians of
    each run's samples (in time order)."""
    return _one_sided_p_values(sorted(batch_medians(list(baseline_samples))),
                               sorted(batch_medians(list(current_samples))))


def log_change(base: float, cur: float) -> float:
    """log(cur / base), exactly antisymmetric; +-inf against a zero time, 0 for two."""
    if base <= 0 or cur <= 0:
        return 0.0 if base == cur else (math.inf if cur > base else -math.inf)
    return math.log(cur) - math.log(base)


def batch_medians(samples: Sequence[float], batches: int = BATCHES) -> list[float]:
    """Medians of `batches` consecutive runs of samples, in time order.

    Consecutive iterations are not independent: the loopback and the scheduler drift between
    fast and slow states that last many iterations. A rank test on thousands of raw samples
    then calls any such drift significant. Batch medians are close to independent, so the
    test asks whether the run as a whole moved, not whether a few milliseconds of it did.
    With fewer than two samples per batch the raw samples are used.
    """
    if len(samples) < 2 * batches:
        return list(samples)
    edges = [round(i * len(samples) / batches) for i in range(batches + 1)]
    return [median(samples[edges[i]:edges[i + 1]]) for i in range(batches)]


def relative_change(base: float, cur: float) -> float:
    """cur / base - 1 (positive = slower), defined for a zero-time base too."""
    if base == 0:
        # Only possible with a clock too coarse for the operation; any time is then "infinitely"
        # slower, and equal zeros are no change at all.
        return 0.0 if cur == 0 else math.inf
    return cur / base - 1


def _one_sided_p_values(base: list[float], cur: list[float]) -> tuple[float, float]:
    """(p that current is slower, p that current is faster), both one-sided."""
    # Always hand the test the two sets in the same order, whichever is "baseline", so swapping
    # the arguments gives bit-identical p-values and the verdict is exactly symmetric.
    swap = cur > base
    x, y = (base, cur) if swap else (cur, base)
    p_x_greater, p_x_less = mann_whitney_p_values(x, y)
    if swap:  # x is the baseline: "current greater" is "x less"
        return p_x_less, p_x_greater
    return p_x_greater, p_x_less


def within_run_detectable(
    baseline_samples: Sequence[float], current_samples: Sequence[float],
    alpha: float = DEFAULT_ALPHA,
) -> float:
    """Smallest slowdown the batch-median rank test tells from the spread seen INSIDE the two
    runs. Run-to-run noise is invisible to one run per side, so this is a floor, not a promise."""
    sides = []
    for samples in (baseline_samples, current_samples):
        medians = [m for m in batch_medians(list(samples)) if m > 0]
        if len(medians) < 2:
            return math.inf
        logs = [math.log(m) for m in medians]
        sides.append(robust_sd(logs) ** 2 / len(logs))
    return detectable_change(math.sqrt(sum(sides) / SIGNED_RANK_EFFICIENCY), alpha)
