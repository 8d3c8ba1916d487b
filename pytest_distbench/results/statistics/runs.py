"""One run's p50 against the p50s of a baseline's earlier runs (its learned run-to-run spread).

One run cannot show run-to-run noise; a baseline with a history can. With MIN_RUNS or more
runs, a benchmark's verdict compares the new p50 with the spread of the stored p50s: a robust
z on log p50s, with a t quantile for the few runs the spread is learned from, together with
the threshold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .distributions import student_t_quantile
from .paired import DEFAULT_ALPHA, DEFAULT_POWER, robust_sd
from .stats import median

MIN_RUNS = 3


@dataclass(frozen=True)
class HistoryVerdict:
    kind: str  # "regression", "improvement" or "unchanged"
    change: float  # current / median of the stored p50s - 1
    z: float  # robust z of log p50 against the stored runs
    detectable: float  # smallest slowdown this history can tell from noise (fraction)
    runs: int


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
    limit = math.log1p(threshold)
    if z > t_alpha and distance > limit:
        kind = "regression"
    elif z < -t_alpha and distance < -limit:
        kind = "improvement"
    else:
        kind = "unchanged"
    return HistoryVerdict(kind, change, z, math.expm1((t_alpha + t_power) * spread), len(logs))
