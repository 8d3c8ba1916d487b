"""The run-to-run noise of a session, and the interval a figure gets from it.

A run's samples tell how well the figure is known while that run lasts; on a shared or
oversubscribed machine the next run of the same point lands somewhere else (an offset of its
own: a scheduler regime, a cache state, a neighbour's load). The session measures that spread
itself: some points run again later in the session (revisits), and the spread of log figure
between runs of the same point, pooled over a stratum of similar points (one family, backend,
world size and run length, and one time scale: TIME_CLASSES), is that stratum's run-to-run
noise. A point whose own runs spread far more than its neighbours' (a regime flip, a stall)
is left out of the pool (own_spread_points): its interval spans its own runs instead, and its
neighbours keep theirs. A figure's interval is its run's sampling interval widened by that
noise on a log scale, with a Student t quantile for the few runs the noise is learned from:
the interval of the value the point takes *in this session*, not of the run that happened to
measure it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from .distributions import student_t_quantile
from .interval import LEVEL

__all__ = ["RunNoise", "own_spread_points", "pooled_run_noise", "regimes", "sampling_target",
           "session_interval", "stopped_by_noise", "stratum_noise", "t_975", "time_class"]

# A run stops for the noise once its sampling half-width is this fraction of the noise's:
# the combined interval is then within 12 % of the narrowest the noise allows.
NOISE_FLOOR_SHARE = 0.5
# Runs of one point whose figures differ by more than this factor are different regimes.
REGIME_RATIO = 1.5
# A point whose runs' spread (standard deviation of log figure) is more than this many times
# its stratum's others' is its own: a flip or a stall, not the stratum's noise.
OWN_SPREAD_RATIO = 4.0
# Below this spread (0.5 %) the others' is no yardstick: timer and sampling noise alone.
SPREAD_FLOOR = 0.005
# Time scales whose points share a noise: the upper bounds (seconds per iteration) of each
# class and its name. Launch-bound points (microseconds) and bandwidth- or latency-bound ones
# (milliseconds and up) are disturbed differently (measured: docs/user-guide.md, "What the ±
# means").
TIME_CLASSES = ((1e-4, "under 100 us"), (1e-2, "100 us-10 ms"), (1.0, "10 ms-1 s"),
                (math.inf, "1 s and over"))


def t_975(dof: int) -> float:
    """The 97.5 % quantile of Student's t with `dof` degrees of freedom (>= 1)."""
    if dof < 1:
        raise ValueError("a t quantile needs at least one degree of freedom")
    return student_t_quantile(0.975, dof)


@dataclass(frozen=True)
class RunNoise:
    """The run-to-run spread of one group's figures."""

    sd_log: float  # pooled standard deviation of log(figure) between runs of one point
    dof: int  # its degrees of freedom: runs minus points, over the points with 2+ runs
    runs: int
    points: int

    def half_log(self) -> float:
        """Half the 95 % interval of the point's log value around one run's log figure."""
        return t_975(self.dof) * self.sd_log

    def pct(self) -> float:
        """That half-width in percent of the figure (the upper side, the larger one)."""
        return 100.0 * math.expm1(self.half_log())

    def as_dict(self) -> dict[str, float | int]:
        return {"sd_log": self.sd_log, "dof": self.dof, "runs": self.runs,
                "points": self.points, "half_width_pct": self.pct()}


def time_class(seconds: float) -> str:
    """The name of the time scale (TIME_CLASSES) of a point taking `seconds` per iteration."""
    return next(name for bound, name in TIME_CLASSES if seconds < bound)


def _squares(values: Sequence[float]) -> tuple[float, int]:
    """The sum of squared deviations of the runs' log figures from their mean, and its degrees
    of freedom (runs - 1; 0 for fewer than two usable runs)."""
    logs = [math.log(v) for v in values if v > 0 and math.isfinite(v)]
    if len(logs) < 2:
        return 0.0, 0
    centre = math.fsum(logs) / len(logs)
    return math.fsum((x - centre) ** 2 for x in logs), len(logs) - 1


def pooled_run_noise(runs_by_point: Mapping[Hashable, Sequence[float]],
                     leave_out: Iterable[Hashable] = ()) -> RunNoise | None:
    """The pooled run-to-run spread of the points' figures (each point's runs, > 0), without
    the points of `leave_out`; None when no other point has two runs."""
    left_out = set(leave_out)
    squares = 0.0
    dof = runs = points = 0
    for point, values in runs_by_point.items():
        own, own_dof = _squares(values)
        if point in left_out or not own_dof:
            continue
        squares += own
        dof += own_dof
        runs += own_dof + 1
        points += 1
    if dof == 0:
        return None
    return RunNoise(math.sqrt(squares / dof), dof, runs, points)


def stratum_noise(runs_by_point: Mapping[Hashable, Sequence[float]]) -> RunNoise | None:
    """The run-to-run noise of one stratum: its points' runs pooled, less the points whose
    runs are their own story (own_spread_points)."""
    return pooled_run_noise(runs_by_point, own_spread_points(runs_by_point))


def own_spread_points(runs_by_point: Mapping[Hashable, Sequence[float]]) -> set[Hashable]:
    """The points whose runs are their own story: in different regimes (regimes()), or spread
    more than OWN_SPREAD_RATIO times the pooled spread of the other points of their stratum
    (one flip among many quiet pairs must not set everyone's noise). Only ever a minority of
    the points run twice: where most of them flip, flipping is the stratum's noise (none)."""
    revisited = [p for p, values in runs_by_point.items() if _squares(values)[1]]
    own = {p for p in revisited if len(regimes(runs_by_point[p])) > 1}
    for point, values in runs_by_point.items():
        squares, dof = _squares(values)
        if point in own or not dof:
            continue
        others = pooled_run_noise(runs_by_point, own | {point})
        if others is not None and math.sqrt(squares / dof) > OWN_SPREAD_RATIO * max(
                others.sd_log, SPREAD_FLOOR):
            own.add(point)
    return own if 2 * len(own) <= len(revisited) else set()


def session_interval(figure: float, sampling: tuple[float, float] | None,
                     noise: RunNoise) -> tuple[float, float] | None:
    """The 95 % interval of the point's value in this session: each side of the run's
    sampling interval (log distance from the figure; none where the run had too few samples
    for one) combined in quadrature with the run-to-run noise. None for a figure <= 0."""
    if not (figure > 0 and math.isfinite(figure)):
        return None
    between = noise.half_log()
    low, high = figure * math.exp(-between), figure * math.exp(between)
    if sampling is not None and sampling[0] > 0 and sampling[1] > 0:
        # A side the run's own interval reaches further is that side itself: through a log and
        # back it could come out a rounding inside it, narrower than the run's own.
        low, high = min(low, sampling[0], figure), max(high, sampling[1], figure)
    return low, high


def sampling_target(target: float, noise: RunNoise | None) -> float:
    """The sampling half-width (fraction of the figure) a precision-targeted run stops at:
    where the combined interval meets `target`, or, where the noise alone is near or past
    it, where more samples could narrow the combined interval by little."""
    if noise is None:
        return target
    reach, floor = _reach_and_floor(target, noise)
    return max(reach, floor)


def stopped_by_noise(target: float, noise: RunNoise) -> bool:
    """Whether sampling_target's stop is the noise's: the noise alone is near or past the
    target, so a run stopped there cannot meet it."""
    reach, floor = _reach_and_floor(target, noise)
    return floor > reach


def _reach_and_floor(target: float, noise: RunNoise) -> tuple[float, float]:
    """The sampling half-width at which the combined interval meets `target` (0 where the
    noise alone is past it), and the one past which more samples buy little."""
    between = math.expm1(noise.half_log())
    reach = math.sqrt(target ** 2 - between ** 2) if between < target else 0.0
    return reach, NOISE_FLOOR_SHARE * between


def regimes(values: Sequence[float], ratio: float = REGIME_RATIO) -> list[tuple[float, int]]:
    """The runs of one point grouped where sorted neighbours differ by more than `ratio`:
    [(median of the group, runs in it), ...], one entry when the runs agree."""
    ordered = sorted(v for v in values if v > 0 and math.isfinite(v))
    if not ordered:
        return []
    groups: list[list[float]] = [[ordered[0]]]
    for value in ordered[1:]:
        if value > groups[-1][-1] * ratio:
            groups.append([])
        groups[-1].append(value)
    return [(_median(g), len(g)) for g in groups]


def _median(values: Sequence[float]) -> float:
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


assert LEVEL == 0.95  # the quantiles above are for a 95 % interval
