"""Summaries of raw timing samples, in seconds."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields

__all__ = [
    "Summary",
    "algbw_gbps",
    "busbw_gbps",
    "median",
    "per_iteration_max",
    "percentile",
    "rank_skew",
    "stall_count",
    "summarize",
]


@dataclass(frozen=True)
class Summary:
    """Order statistics and moments of one sample set (seconds, except ``n``)."""

    n: int
    min: float
    p50: float
    p75: float
    p90: float
    p95: float
    p99: float
    max: float
    mean: float
    stddev: float
    iqr: float

    def as_dict(self) -> dict[str, float | int]:
        """Field name to value, in declaration order."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _check_samples(samples: Sequence[float], what: str = "samples") -> None:
    if len(samples) == 0:
        raise ValueError(f"no {what}: at least one timing sample is needed")
    bad = [x for x in samples if not math.isfinite(x)]
    if bad:
        raise ValueError(f"{what} contain {len(bad)} non-finite value(s), e.g. {bad[0]!r}")


def percentile(sorted_samples: Sequence[float], q: float) -> float:
    """The q-th percentile (q in [0, 100]) of already sorted, finite samples.

    Linear interpolation between closest ranks, like numpy's default ``"linear"`` method.
    """
    n = len(sorted_samples)
    if n == 0:
        raise ValueError("percentile of no samples")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q={q!r} is outside [0, 100]")
    # Exact rational arithmetic, rounded once at the end: the float formula a + (b - a) * t
    # can leave [a, b], is not monotone in q, and its midpoint can differ from the median
    # by an ulp. Correct rounding gives all three for free. Python's int / int rounds
    # correctly.
    q_num, q_den = float(q).as_integer_ratio()
    den = 100 * q_den
    lo, rem = divmod((n - 1) * q_num, den)  # rank position = lo + rem / den
    a = float(sorted_samples[lo])
    if rem == 0:
        return a
    b = float(sorted_samples[lo + 1])  # rem > 0 implies lo < n - 1
    if not (math.isfinite(a) and math.isfinite(b)):
        raise ValueError(f"percentile of non-finite samples ({a!r}, {b!r})")
    a_num, a_den = a.as_integer_ratio()
    b_num, b_den = b.as_integer_ratio()
    return (a_num * b_den * (den - rem) + b_num * a_den * rem) / (a_den * b_den * den)


def summarize(samples: Sequence[float]) -> Summary:
    """Summarize timing samples; raises ``ValueError`` if empty or not all finite."""
    _check_samples(samples)
    ordered = sorted(samples)
    n = len(ordered)
    mean = math.fsum(ordered) / n
    # fsum + division can land an ulp outside the data range (e.g. for identical values).
    mean = min(max(mean, ordered[0]), ordered[-1])
    if n > 1:
        # Two-pass with fsum: accurate, and much faster than statistics.stdev's exact
        # fraction arithmetic on many thousands of samples.
        stddev = math.sqrt(math.fsum((x - mean) ** 2 for x in ordered) / (n - 1))
    else:
        stddev = 0.0
    p25, p75 = percentile(ordered, 25), percentile(ordered, 75)
    return Summary(
        n=n,
        min=float(ordered[0]),
        p50=percentile(ordered, 50),
        p75=p75,
        p90=percentile(ordered, 90),
        p95=percentile(ordered, 95),
        p99=percentile(ordered, 99),
        max=float(ordered[-1]),
        mean=mean,
        stddev=stddev,
        iqr=p75 - p25,
    )


def per_iteration_max(rank_samples: Sequence[Sequence[float]]) -> list[float]:
    """Per-iteration time of a collective: the slowest rank's sample for each iteration.

    ``rank_samples[r][i]`` is rank r's time for iteration i; all ranks must have the
    same number of samples.
    """
    if len(rank_samples) == 0:
        raise ValueError("no ranks: per-iteration max needs samples from at least one rank")
    lengths = [len(samples) for samples in rank_samples]
    if len(set(lengths)) > 1:
        raise ValueError(f"ranks have different sample counts: {lengths}")
    return [float(max(column)) for column in zip(*rank_samples, strict=True)]


def median(values: Sequence[float]) -> float:
    """The median of finite values (the midpoint of the middle two for an even count)."""
    # Local rather than statistics.median: importing statistics pulls in random,
    # fractions and decimal, and this module is imported by every pytest controller.
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    low, high = ordered[mid - 1], ordered[mid]
    return low + (high - low) / 2  # not (low + high) / 2: two huge values would overflow


def rank_skew(rank_samples: Sequence[Sequence[float]]) -> float:
    """Straggler indicator: slowest rank's p50 over the median of per-rank p50s.

    1.0 means balanced (and is returned for a single rank, or when the median is 0).
    """
    if len(rank_samples) == 0:
        raise ValueError("no ranks: rank skew needs samples from at least one rank")
    medians = []
    for rank, samples in enumerate(rank_samples):
        _check_samples(samples, f"rank {rank} samples")
        medians.append(percentile(sorted(samples), 50))
    middle = median(medians)
    if middle <= 0:
        return 1.0
    return max(medians) / middle


def stall_count(samples: Sequence[float], ratio: float = 5.0) -> int:
    """How many samples exceed ``ratio`` times the median: visible stalls, not noise."""
    _check_samples(samples)
    if not ratio > 0:
        raise ValueError(f"stall ratio must be positive, got {ratio!r}")
    limit = ratio * percentile(sorted(samples), 50)
    return sum(1 for x in samples if x > limit)


def algbw_gbps(nbytes: int, seconds: float) -> float:
    """Algorithm bandwidth in decimal GB/s (1e9 bytes per second).

    Raises ``ValueError`` for ``seconds <= 0`` (or non-finite) and ``nbytes < 0``.
    """
    if nbytes < 0:
        raise ValueError(f"byte count must not be negative, got {nbytes!r}")
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"time must be positive and finite, got {seconds!r} s")
    return nbytes / seconds / 1e9


def busbw_gbps(algbw: float, factor: float) -> float:
    """Bus bandwidth: algorithm bandwidth times the collective's bus factor."""
    return algbw * factor
