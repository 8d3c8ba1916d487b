"""Paired statistics for A/B mode: one verdict from R rounds of (baseline, candidate) p50s.

Each round measures the baseline and the candidate back to back, so whatever the machine did
during that round (a slow spell, a noisy neighbour) hits both sides alike. The round's
log ratio log(candidate p50 / baseline p50) cancels it; the verdict works on those R numbers:

- a one-sided Wilcoxon signed-rank test that the ratios lean towards "slower" (zero ratios
  dropped, tied ones given their average rank; the exact null distribution of those ranks up
  to EXACT_SIGNED_RANK_UP_TO rounds, the normal approximation with the tie correction above:
  the p-values scipy.stats.wilcoxon gives, without its import of about 2 s or the enumeration
  of sign flips it runs for ties, which took up to 0.7 s a verdict);
- the Hodges-Lehmann estimate of the ratio (median of the Walsh averages of the log ratios)
  with its distribution-free confidence interval (order statistics of the Walsh averages at the
  signed-rank critical value), the classic companion of the signed-rank test;
- the verdict by the one rule of every comparison (vocabulary.decide): a regression needs both
  p < alpha (the point's level) AND the interval's lower bound above 1 + threshold.

``detectable`` is the smallest slowdown that R rounds with the measured round-to-round spread
tell from no change at false-alarm rate alpha with 95 % power (a minimum detectable effect).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

from .distributions import average_ranks
from .stats import median
from .vocabulary import FAMILY_ALPHA, Kind, decide

DEFAULT_ALPHA = FAMILY_ALPHA  # one point alone; a session's points each get less
DEFAULT_CONFIDENCE = 0.95
DEFAULT_POWER = 0.95
# MAD -> standard deviation for normal data.
MAD_TO_SD = 1.4826
# Asymptotic relative efficiency of the signed-rank test against the t test (normal data): it
# needs pi/3 times as many pairs for the same power.
SIGNED_RANK_EFFICIENCY = 3 / math.pi
# Rounds up to which the signed-rank null distribution is counted exactly: its table grows as
# n^2 (and its counting as n^3), and the normal approximation is good above.
EXACT_SIGNED_RANK_UP_TO = 60


@dataclass(frozen=True)
class PairedVerdict:
    kind: Kind  # vocabulary.decide's: regression, improvement, slower, faster, ...
    ratio: float  # Hodges-Lehmann estimate of candidate / baseline
    ratio_low: float  # confidence interval of the ratio
    ratio_high: float
    p_value: float  # one-sided, in the direction the estimate moved
    detectable: float  # smallest detectable slowdown, a fraction (0.05 = 5 %)
    rounds: int
    threshold: float
    level: float = DEFAULT_ALPHA  # the significance level the test was held to

    @property
    def gateable(self) -> bool:
        """Whether a slowdown of the threshold's size is within what these rounds can show at
        their level (information: detectable decides no verdict)."""
        return self.detectable <= self.threshold


def look_rounds(rounds: int, extra_rounds: int, level: float) -> list[int]:
    """The round counts after which a test is judged: `rounds`, then `rounds` more at a time
    until `extra_rounds` more have run, each look at level / (number of looks), so that by the
    union bound the looks together keep the point's level. Fixed before any round runs. One
    look (at the whole level) where no extra rounds are allowed, or where even the last look
    could not reach its share (the signed-rank test's smallest p is 2^-n)."""
    plan = [rounds]
    while plan[-1] < rounds + extra_rounds:
        plan.append(min(plan[-1] + rounds, rounds + extra_rounds))
    if 0.5 ** plan[-1] >= level / len(plan):
        return [rounds]
    return plan


def open_to_regression(verdict: PairedVerdict) -> bool:
    """Whether more rounds could still make this verdict a regression: not one, and its interval
    reaching past the threshold (slower or inconclusive, not shown beyond it)."""
    return verdict.kind != "regression" and verdict.ratio_high > 1 + verdict.threshold


def log_ratios(baseline: Sequence[float], candidate: Sequence[float]) -> list[float]:
    """log(candidate / baseline) per round; both sides must be positive and paired."""
    if len(baseline) != len(candidate):
        raise ValueError(f"unpaired rounds: {len(baseline)} baseline vs {len(candidate)} candidate")
    if not baseline:
        raise ValueError("no rounds to compare")
    for b, c in zip(baseline, candidate, strict=True):
        if not (b > 0 and c > 0 and math.isfinite(b) and math.isfinite(c)):
            raise ValueError(f"round times must be finite and positive, got {b!r} and {c!r}")
    # A difference of logs is exactly antisymmetric (swapping the variants negates it); the
    # rounding (far below any timer's resolution) keeps equal times at exactly 0 after a
    # common scaling, so ties and zeros do not depend on the unit.
    return [round(math.log(c) - math.log(b), 12) for b, c in zip(baseline, candidate,
                                                                strict=True)]


def robust_sd(values: Sequence[float]) -> float:
    """1.4826 x median absolute deviation: a standard deviation that one wild round cannot
    inflate."""
    if not values:
        return 0.0
    centre = median(values)
    return MAD_TO_SD * median([abs(v - centre) for v in values])


def detectable_change(se_log: float, alpha: float = DEFAULT_ALPHA,
                      power: float = DEFAULT_POWER) -> float:
    """Smallest slowdown (fraction) distinguishable from none, given the standard error of the
    log-ratio estimate: exp((z_(1-alpha) + z_power) x se) - 1."""
    if not (se_log >= 0 and math.isfinite(se_log)):
        return math.inf
    if not (0 < alpha < 1 and 0 < power < 1):
        raise ValueError("alpha and power must lie strictly between 0 and 1")
    z = NormalDist().inv_cdf(1 - alpha) + NormalDist().inv_cdf(power)
    return math.expm1(z * se_log)


def paired_detectable(ratios: Sequence[float], alpha: float = DEFAULT_ALPHA,
                      power: float = DEFAULT_POWER) -> float:
    """detectable_change for the signed-rank test on these log ratios."""
    n = len(ratios)
    if n < 2:
        return math.inf
    se = robust_sd(ratios) / math.sqrt(n * SIGNED_RANK_EFFICIENCY)
    # The exact test cannot reach alpha with too few rounds, whatever the spread.
    if 0.5**n >= alpha:
        return math.inf
    return detectable_change(se, alpha, power)


@lru_cache(maxsize=128)
def _sign_flip_counts(weights: tuple[int, ...]) -> tuple[int, ...]:
    """How many of the 2**len(weights) sign assignments give each sum 0..sum(weights) of the
    positive weights: the signed-rank null distribution for these (integer) ranks."""
    counts = [0] * (sum(weights) + 1)
    counts[0] = 1
    reached = 0
    for w in weights:
        reached += w
        for t in range(reached, w - 1, -1):
            counts[t] += counts[t - w]
    return tuple(counts)


@lru_cache(maxsize=128)
def _signed_rank_cdf(n: int) -> tuple[float, ...]:
    """P(T+ <= t) for t = 0..n(n+1)/2 under the null (no ties): counts of subsets of 1..n."""
    scale = 2.0**n
    cdf, running = [], 0
    for c in _sign_flip_counts(tuple(range(1, n + 1))):
        running += c
        cdf.append(running / scale)
    return tuple(cdf)


def _normal_null(n: int, tie_sizes: Sequence[int] = ()) -> tuple[float, float]:
    """Mean and standard deviation of T+ under the null, less the variance ties take away."""
    variance = n * (n + 1) * (2 * n + 1) / 24 - sum(k**3 - k for k in tie_sizes) / 48
    return n * (n + 1) / 4, math.sqrt(max(variance, 0.0))


def hodges_lehmann_interval(
    ratios: Sequence[float], confidence: float = DEFAULT_CONFIDENCE
) -> tuple[float, float, float]:
    """(estimate, low, high) of the centre of the log ratios, from their Walsh averages.

    The interval is [W_(k), W_(M+1-k)] with M = n(n+1)/2 Walsh averages in order and k - 1 the
    largest t with P(T+ <= t) <= (1 - confidence) / 2. With too few rounds for that confidence
    the interval is the whole real line.
    """
    if not 0 < confidence < 1:
        raise ValueError("confidence must lie strictly between 0 and 1")
    n = len(ratios)
    if n == 0:
        raise ValueError("no rounds")
    walsh = sorted(
        ratios[i] + (ratios[j] - ratios[i]) / 2 for i in range(n) for j in range(i, n)
    )
    estimate = median(walsh)
    tail = (1 - confidence) / 2
    if n > EXACT_SIGNED_RANK_UP_TO:
        m, sd = _normal_null(n)
        k = max(0, math.floor(m - NormalDist().inv_cdf(1 - tail) * sd))
    else:
        cdf = _signed_rank_cdf(n)
        k = 0
        while k < len(cdf) and cdf[k] <= tail:
            k += 1
    if k == 0:
        return estimate, -math.inf, math.inf
    return estimate, walsh[k - 1], walsh[len(walsh) - k]


def signed_rank_p_values(ratios: Sequence[float]) -> tuple[float, float]:
    """(p that candidate is slower, p that it is faster): one-sided Wilcoxon signed-rank."""
    nonzero = [r for r in ratios if r != 0]
    n = len(nonzero)
    if n == 0:
        return 1.0, 1.0
    ranks, tie_sizes = average_ranks([abs(r) for r in nonzero])
    t_plus = sum(rank for rank, r in zip(ranks, nonzero, strict=True) if r > 0)
    if n <= EXACT_SIGNED_RANK_UP_TO:
        # Exact, ties or not: twice an average rank is an integer, so the sign flips of the
        # doubled ranks count the null distribution (scipy enumerates the same flips).
        counts = _sign_flip_counts(tuple(sorted(round(2 * rank) for rank in ranks)))
        t2, scale = round(2 * t_plus), 2.0**n
        return sum(counts[t2:]) / scale, sum(counts[:t2 + 1]) / scale
    mean, sd = _normal_null(n, tie_sizes)
    if sd == 0:
        return 1.0, 1.0
    z = (t_plus - mean) / sd
    normal = NormalDist()
    return 1 - normal.cdf(z), normal.cdf(z)


def judge_paired(
    baseline: Sequence[float],
    candidate: Sequence[float],
    threshold: float,
    *,
    alpha: float = DEFAULT_ALPHA,
    confidence: float = DEFAULT_CONFIDENCE,
    power: float = DEFAULT_POWER,
) -> PairedVerdict:
    """The verdict from per-round times of the two variants (seconds, lower is better), its
    test held to `alpha` (the point's level: vocabulary.point_level in a session)."""
    if not (math.isfinite(threshold) and threshold >= 0):
        raise ValueError(f"threshold must be a finite fraction >= 0, got {threshold!r}")
    ratios = log_ratios(baseline, candidate)
    estimate, low, high = hodges_lehmann_interval(ratios, confidence)
    p_slower, p_faster = signed_rank_p_values(ratios)
    return PairedVerdict(
        kind=decide(p_slower=p_slower, p_faster=p_faster, level=alpha, low=low, high=high,
                    threshold=threshold),
        ratio=math.exp(estimate),
        ratio_low=math.exp(low) if math.isfinite(low) else 0.0,
        ratio_high=math.exp(high) if math.isfinite(high) else math.inf,
        p_value=p_slower if estimate >= 0 else p_faster,
        detectable=paired_detectable(ratios, alpha, power),
        rounds=len(ratios),
        threshold=threshold,
        level=alpha,
    )
