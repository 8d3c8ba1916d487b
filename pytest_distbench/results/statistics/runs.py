"""One run's p50 against the p50s of a baseline's earlier runs (its learned run-to-run spread).

One run cannot show run-to-run noise; a baseline with a history can. With MIN_RUNS or more
runs, a benchmark's verdict compares the new p50 with the spread of the stored p50s: a robust
z on log p50s, with a t quantile for the few runs the spread is learned from, together with
the threshold, decided by the rule of every comparison (vocabulary.decide): the z's one-sided
p-value (Student's t, k - 1 degrees of freedom) at the point's level, and the change beyond the
threshold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .distributions import student_t_quantile, student_t_sf
from .paired import DEFAULT_ALPHA, DEFAULT_POWER, robust_sd
from .stats import median
from .vocabulary import Kind, decide

MIN_RUNS = 3


@dataclass(frozen=True)
class HistoryVerdict:
    kind: Kind  # vocabulary.decide's
    change: float  # current / median of the stored p50s - 1
    z: float  # robust z of log p50 against the stored runs
    detectable: float  # smallest slowdown this history can tell from noise (fraction)
    runs: int
    p_value: float = 1.0  # the z's one-sided p (t, runs - 1 dof) in the direction it moved
    level: float = DEFAULT_ALPHA
    baseline_p50: float = math.nan  # the median of the stored p50s: what the change is against


def judge_history(stored_p50s: Sequence[float], current_p50: float, threshold: float, *,
                  alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> HistoryVerdict:
    """The verdict of one p50 against the same benchmark's stored p50s (at least 2)."""
    values = [float(v) for v in stored_p50s]
    if len(values) < 2:
        raise ValueError("a history verdict needs at least two stored runs")
    if not all(v > 0 and math.isfinite(v) for v in values + [current_p50]):
        raise ValueError("p50s must be finite and positive")
    logs = [math.log(v) for v in values]
    centre = median(logs)
    # The new run is one more draw from the same spread: its distance from the centre has
    # the run-to-run spread plus the centre's own uncertainty.
    spread = robust_sd(logs) * math.sqrt(1 + 1 / len(logs))
    dof = len(logs) - 1
    t_alpha = student_t_quantile(1 - alpha, dof)
    t_power = student_t_quantile(power, dof)
    distance = math.log(current_p50) - centre
    z = distance / spread if spread > 0 else (0.0 if distance == 0 else math.copysign(
        math.inf, distance))
    change = math.exp(distance) - 1
    p_slower, p_faster = student_t_sf(z, dof), student_t_sf(-z, dof)
    kind = decide(p_slower=p_slower, p_faster=p_faster, level=alpha, low=distance,
                  high=distance, threshold=threshold)
    return HistoryVerdict(kind, change, z, math.expm1((t_alpha + t_power) * spread), len(logs),
                          p_slower if distance >= 0 else p_faster, alpha, math.exp(centre))
