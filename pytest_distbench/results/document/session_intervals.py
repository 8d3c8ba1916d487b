"""A record's printed interval: its run's sampling interval widened by the session's measured
run-to-run noise (statistics/noise.py), written where every reader already looks.

`p50_ci` and a rate's `figures.msgs_per_s_ci_*` / `mbps_ci_*` / `rate_ci_pct` become the
session interval; the run's own intervals move to `sampling_ci` and `figures.sampling_rate_ci`
(kept, never printed as the headline ±). Applying it again with a better noise estimate starts
from the kept sampling intervals, so the last call wins.
"""

from __future__ import annotations

import math

from ..statistics.interval import LEVEL, half_width_pct
from ..statistics.noise import RunNoise, regimes, session_interval
from .record import Record

METHOD = ("the run's sampling interval combined with the run-to-run noise measured in this "
          "session (statistics/noise.py)")
NOT_MEASURED = "run-to-run noise not measured"


def is_rate(record: Record) -> bool:
    """A record whose headline is a rate over the whole timed region (p2p bandwidth, message
    rate), with its own interval in its figures (a p2p latency has the rate's figures too,
    but prints its p50)."""
    figures = record.get("figures") or {}
    return figures.get("headline_statistic") == "mean" and "rate_ci_pct" in figures


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


def apply_noise(record: Record, noise: RunNoise | None, group: str, *,
                why: str = NOT_MEASURED, target: float | None = None,
                noise_stopped: bool = False) -> None:
    """Rewrite `record`'s printed intervals from its sampling ones and `noise` (None: no
    interval, `why` says so). `target`: the user's precision target, which `precision.met`
    is judged against (the run itself may have stopped on a looser sampling target);
    `noise_stopped`: that looser target came from the noise, so a stop on it is the noise's."""
    if "sampling_ci" not in record:
        record["sampling_ci"] = record.get("p50_ci")
    sampling = record.get("sampling_ci") or {}
    p50 = (record.get("summary") or {}).get("p50")
    figure = headline(record)
    runs = [] if figure is None else [figure, *(record.get("revisits") or [])]
    seen = regimes(runs)
    regime_runs = runs if len(seen) > 1 else []
    rate = is_rate(record)
    bounds = _widened(p50, sampling.get("low"), sampling.get("high"), noise,
                      [] if rate else regime_runs)
    record["p50_ci"] = {
        "level": LEVEL, "method": METHOD,
        "low": None if bounds is None else bounds[0],
        "high": None if bounds is None else bounds[1],
        "half_width_pct": None if bounds is None else half_width_pct(*bounds, p50),
        "run_noise": None if noise is None else {"group": group, **noise.as_dict()},
        "why": None if bounds is not None else why,
    }
    if regime_runs:
        record["p50_ci"]["regimes"] = [[value, count] for value, count in seen]
    if rate:
        _apply_rate(record, noise, regime_runs)
    _judge_precision(record, target, noise_stopped)


def _widened(figure: object, low: float | None, high: float | None, noise: RunNoise | None,
             regime_runs: list[float]) -> tuple[float, float] | None:
    """The session interval of `figure` from its run's own (low, high; None where the run
    had too few samples for one) and `noise`, spanning `regime_runs` (the point's runs where
    they landed in different regimes); None without noise or a positive figure."""
    if noise is None or not isinstance(figure, (int, float)) or figure <= 0:
        return None
    own = None if low is None or high is None else (low, high)
    bounds = session_interval(figure, own, noise)
    if bounds is not None and regime_runs:
        bounds = (min(bounds[0], *regime_runs), max(bounds[1], *regime_runs))
    return bounds


def _apply_rate(record: Record, noise: RunNoise | None, regime_runs: list[float]) -> None:
    figures = record["figures"] = dict(record["figures"])
    if "sampling_rate_ci" not in figures:
        figures["sampling_rate_ci"] = {"low": figures.get("msgs_per_s_ci_low"),
                                       "high": figures.get("msgs_per_s_ci_high"),
                                       "pct": figures.get("rate_ci_pct")}
    own = figures["sampling_rate_ci"]
    rate = figures.get("msgs_per_s")
    bounds = _widened(rate, own.get("low"), own.get("high"), noise, regime_runs)
    nbytes = record.get("nbytes") or 0
    low, high = bounds if bounds is not None else (None, None)
    figures.update(
        msgs_per_s_ci_low=low, msgs_per_s_ci_high=high,
        mbps_ci_low=None if low is None else low * nbytes / 1e6,
        mbps_ci_high=None if high is None else high * nbytes / 1e6,
        rate_ci_pct=None if bounds is None else half_width_pct(low, high, rate),
    )


def _judge_precision(record: Record, target: float | None, noise_stopped: bool) -> None:
    precision = record.get("precision")
    if not isinstance(precision, dict):
        return
    precision = record["precision"] = dict(precision)
    precision.setdefault("sampling_achieved", precision.get("achieved"))
    if target is not None:
        precision["target"] = target
    if is_rate(record):
        pct = (record.get("figures") or {}).get("rate_ci_pct")
    else:
        pct = record["p50_ci"].get("half_width_pct")
    achieved = None if pct is None else pct / 100
    precision["achieved"] = achieved
    precision["met"] = achieved is not None and achieved <= precision["target"]
    if noise_stopped and precision.get("stopped_by") == "precision":
        precision["stopped_by"] = "noise"
