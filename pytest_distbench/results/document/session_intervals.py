"""A record's printed interval, and the one function that writes it.

A record leaves its test with what its run knows (harness/controller/records.py): the run's
own sampling interval (`sampling_ci`, a rate's `figures.msgs_per_s_ci_*`). What the session
learns later (its run-to-run noise, the point's other runs) comes as an `Evidence`, and
`with_interval(record, evidence)` returns the record with its printed interval placed: `p50_ci`,
a rate's `rate_ci`, `precision.achieved/met`.

It is pure, so the same function serves both moments (harness/controller/points.record_of
calls it): during the session (the live closing line, -v, JUnit, the per-test gate) with the
noise measured so far (basis SO_FAR), and once at the end of the test loop, when every point
of the session is sealed (basis SESSION, or ROUNDS for an A/B record, whose rounds are its
runs).
`p50_ci.basis` and `p50_ci.noise_missing` say which interval a reader holds: codes, never
text to parse.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..statistics.interval import LEVEL, half_width_pct
from ..statistics.noise import RunNoise, pooled_run_noise, regimes, session_interval, time_class
from .record import ABField, P50Interval, RateInterval, Record

# p50_ci.basis: which interval the record holds.
SESSION = "session"  # final: written at the end of the test loop
SO_FAR = "so far"  # during the session: with the noise measured so far (never in a file)
ROUNDS = "rounds"  # an A/B record: its candidate rounds are its runs
BASES = (SESSION, SO_FAR, ROUNDS)
# p50_ci.noise_missing: why the interval is the run's own sampling interval alone.
REVISITS_OFF = "revisits off"  # --distbench-revisits=0
UNDER_LAUNCHER = "launcher"  # a launcher's session cannot run a point again
NOT_REVISITED = "not revisited"  # no point of its stratum ran twice (yet)
NOISE_MISSING = (REVISITS_OFF, UNDER_LAUNCHER, NOT_REVISITED)

METHOD = ("the run's sampling interval combined with the run-to-run noise measured in this "
          "session (statistics/noise.py)")
RUN_METHOD = "the run's own sampling interval (statistics/interval.py)"


@dataclass(frozen=True)
class Evidence:
    """What the session knows of one point when its interval is written: the noise of its
    stratum (None: not measured, `noise_missing` says why), the stratum's name, and the
    figures of the point's other runs in this session (revisits, or an A/B record's rounds)."""

    basis: str = SESSION
    noise: RunNoise | None = None
    stratum: str = ""
    other_runs: tuple[float, ...] = ()
    noise_missing: str = NOT_REVISITED


def is_rate(record: Record) -> bool:
    """A record whose headline is a rate over the whole timed region (p2p bandwidth, message
    rate), with its run's own interval in its figures (a p2p latency has the rate's figures
    too, but prints its p50)."""
    return (record.get("headline_statistic") == "mean"
            and "rate_ci_pct" in (record.get("figures") or {}))


def stratum_of(record: Record, settings: Any, family: str) -> str:
    """'collectives gloo ws8 0.5 s budget, 100 us-10 ms': the records whose runs share one
    run-to-run noise (Evidence.stratum; `settings`: the run's, for its length; `family`: the
    name of the family that measures it, registry.family_of). A rate over the whole timed
    region (p2p bandwidth) is a stratum apart from the p50 times of its family: pooled with
    p2p latency's, its ± was 3.4x what its runs needed and the latency's 0.66x
    (benchmarks/bench_coverage.py, docs/user-guide.md)."""
    kind = ", rates" if is_rate(record) else ""
    if getattr(settings, "iterations", None):
        length = f"{settings.iterations} iterations"
    elif getattr(settings, "duration", None):
        length = f"{settings.duration:g} s duration"
    else:
        length = f"{settings.budget:g} s budget"
    scale = time_class(record["summary"]["p50"])
    return f"{family} {record['backend']} ws{record['world_size']} {length}, {scale}{kind}"


def headline(record: Record) -> float | None:
    """The figure the printed interval belongs to: the rate, or the p50 time."""
    if record.get("invalid") or record.get("incomplete"):
        return None
    if is_rate(record):
        value = (record.get("figures") or {}).get("msgs_per_s")
    else:
        value = (record.get("summary") or {}).get("p50")
    if isinstance(value, (int, float)) and value > 0 and math.isfinite(value):
        return float(value)
    return None


def headline_interval(record: Record) -> tuple[float, float] | None:
    """(low, high) seconds of the p50's printed interval, the one every verdict, table and
    plot reads: `p50_ci` once the record has it (a results file's; a copy made by
    with_interval), else the run's own `sampling_ci` (a file of schema 1 has only that as
    `p50_ci`; readers of one without either compute it from the samples)."""
    for key in ("p50_ci", "sampling_ci"):
        stored = record.get(key)
        if isinstance(stored, dict) and "low" in stored:
            low, high = stored.get("low"), stored.get("high")
            return None if low is None or high is None else (float(low), float(high))
    return None


def with_interval(record: Record, evidence: Evidence) -> Record:
    """`record` with its printed interval from `evidence` placed (a new record; `record` is
    left as it is): `p50_ci`, a rate's `rate_ci`, the other runs' figures, the precision
    judged on them."""
    sampling = record.get("sampling_ci") or {}
    if "sampling_ci" not in record and isinstance(record.get("p50_ci"), dict):
        sampling = record["p50_ci"]  # a record read back from a file of schema 1
    p50 = (record.get("summary") or {}).get("p50")
    figure = headline(record)
    runs = [] if figure is None else [figure, *evidence.other_runs]
    seen = regimes(runs)
    regime_runs = runs if len(seen) > 1 else []
    # A point whose own runs the stratum's noise does not cover (a flip, a stall: left out of
    # the pool) has them spanned, like regimes.
    spanned = runs if regime_runs or _beyond(runs, evidence.noise) else []
    rate = is_rate(record)
    bounds = _widened(p50, sampling.get("low"), sampling.get("high"), evidence.noise,
                      [] if rate else spanned)
    ci: P50Interval = {
        "level": LEVEL, "method": METHOD if evidence.noise is not None else RUN_METHOD,
        "low": None if bounds is None else bounds[0],
        "high": None if bounds is None else bounds[1],
        "half_width_pct": None if bounds is None else half_width_pct(*bounds, p50),
        "basis": evidence.basis,
        "run_noise": None if evidence.noise is None else {"group": evidence.stratum,
                                                          **evidence.noise.as_dict()},
        "noise_missing": None if evidence.noise is not None else evidence.noise_missing,
        **({"regimes": [[value, count] for value, count in seen]} if regime_runs else {}),
    }
    placed: Record = {**record, "p50_ci": ci}  # type: ignore[typeddict-item]
    if evidence.other_runs:
        placed = {**placed, "revisits": list(evidence.other_runs)}
    if rate:
        placed = {**placed, "rate_ci": _rate_interval(record, evidence.noise, spanned)}
    if isinstance(record.get("precision"), dict):
        placed = {**placed, "precision": _judged_precision(placed)}
    return placed


def rounds_evidence(ab: ABField) -> Evidence:
    """An A/B record's (`ab`, its "ab" field): its candidate rounds are runs of the point, the
    noise is theirs (the spread of the rounds' p50 on a log scale; a rate's spread is the same
    on that scale)."""
    rounds = list(ab.get("candidate_p50_s") or [])
    noise = pooled_run_noise({"rounds": rounds})
    return Evidence(ROUNDS, noise, f"{len(rounds)} A/B rounds", (),
                    NOT_REVISITED)


def _beyond(runs: list[float], noise: RunNoise | None) -> bool:
    """Whether the point's runs spread past what `noise` allows one run (its own story)."""
    if len(runs) < 2 or noise is None:
        return len(runs) > 1 and noise is None
    logs = [math.log(v) for v in runs]
    return max(logs) - min(logs) > noise.half_log()


def _widened(figure: object, low: float | None, high: float | None, noise: RunNoise | None,
             spanned: list[float]) -> tuple[float, float] | None:
    """The interval of `figure` from its run's own (low, high; None where the run had too
    few samples for one) widened by `noise` (None: the run's own alone), spanning `spanned`
    (the point's runs, where the noise does not cover them); None without a positive figure
    or an interval."""
    if not isinstance(figure, (int, float)) or not figure > 0:
        return None
    own = None if low is None or high is None else (low, high)
    if noise is None:
        bounds = own
    else:
        bounds = session_interval(figure, own, noise)
    if bounds is not None and spanned:
        bounds = (min(bounds[0], *spanned), max(bounds[1], *spanned))
    return bounds


def _rate_interval(record: Record, noise: RunNoise | None,
                   spanned: list[float]) -> RateInterval:
    """A rate's printed interval: the run's own (the family's, in `figures`) widened."""
    figures = record.get("figures") or {}
    rate = figures.get("msgs_per_s")
    bounds = _widened(rate, figures.get("msgs_per_s_ci_low"), figures.get("msgs_per_s_ci_high"),
                      noise, spanned)
    nbytes = record.get("nbytes") or 0
    low, high = bounds if bounds is not None else (None, None)
    return {"level": LEVEL, "low": low, "high": high,
            "half_width_pct": None if bounds is None else half_width_pct(low, high, rate),
            "mbps_low": None if low is None else low * nbytes / 1e6,
            "mbps_high": None if high is None else high * nbytes / 1e6}


def _judged_precision(record: Record) -> dict[str, object]:
    """`precision` with `achieved` and `met` judged on the printed interval, and `own_short`:
    whether the point missed its target by its own spread (its run stopped on the budget, or
    its runs span regimes), which is what the tables' `*` marks, never a neighbour's noise."""
    precision = dict(record["precision"])
    if is_rate(record):
        pct = (record.get("rate_ci") or {}).get("half_width_pct")
    else:
        pct = record["p50_ci"].get("half_width_pct")
    achieved = None if pct is None else pct / 100
    precision["achieved"] = achieved
    precision["met"] = achieved is not None and achieved <= precision["target"]
    precision["own_short"] = not precision["met"] and (
        precision.get("stopped_by") in ("budget", "max_iterations")
        or bool(record["p50_ci"].get("regimes")) or achieved is None)
    return precision
