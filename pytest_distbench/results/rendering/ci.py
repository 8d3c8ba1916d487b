"""A record's headline interval as the tables, JUnit and plots print it: `p50 ± x %`.

The interval is the one session_intervals.headline_interval picks: the record's `p50_ci` (the
session interval, results/document/session_intervals.py; during the session a view's "so
far"); a record from a file written before it existed gets the sampling interval from its
samples (statistics/interval.py), which is all such a file knows.
"""

from __future__ import annotations

import math

from ..document.record import Record
from ..document.session_intervals import (
    NOT_REVISITED,
    REVISITS_OFF,
    SO_FAR,
    UNDER_LAUNCHER,
    headline_interval,
)
from ..statistics.interval import half_width_pct, median_interval

TOO_FEW = "no CI: n too small"


def incomplete_text(record: Record) -> str | None:
    """'did not complete in 120 s' for a record whose measurement did not finish within its
    bound (record["incomplete"]): what every table row and -v line shows instead of figures."""
    incomplete = record.get("incomplete")
    if not incomplete:
        return None
    return f"did not complete in {incomplete['bound_s']:g} s"


def p50_bounds(record: Record) -> tuple[float, float] | None:
    """(low, high) seconds of the p50's 95 % interval (session_intervals.headline_interval),
    or for a file that has none the sampling interval of its samples; None with too few."""
    if any(isinstance(record.get(key), dict) for key in ("p50_ci", "sampling_ci")):
        return headline_interval(record)
    samples = record.get("samples") or []
    return median_interval(samples) if samples else None


def p50_pct(record: Record) -> float | None:
    """Half the p50 interval's width, percent of the p50 (None: no interval)."""
    bounds = p50_bounds(record)
    p50 = (record.get("summary") or {}).get("p50")
    if bounds is None or not isinstance(p50, (int, float)):
        return None
    return half_width_pct(*bounds, p50)


def rate_pct(record: Record) -> float | None:
    """Half-width percent of a rate of the p50 iteration (k / time): the same order
    statistics, inverted, so the rate's interval is [k / high, k / low]."""
    bounds = p50_bounds(record)
    p50 = (record.get("summary") or {}).get("p50")
    if bounds is None or not isinstance(p50, (int, float)) or bounds[0] <= 0 or p50 <= 0:
        return None
    return 100.0 * p50 * (1 / bounds[0] - 1 / bounds[1]) / 2


# Why a record's ± is the run's own sampling interval (p50_ci.noise_missing), in words.
NOISE_MISSING_TEXT = {
    REVISITS_OFF: "run-to-run noise not measured (--distbench-revisits=0)",
    UNDER_LAUNCHER: "run-to-run noise not measured under a launcher",
    NOT_REVISITED: "run-to-run noise not measured (no point like it ran twice)",
}


def missing_reason(record: Record | None, short: bool = False) -> str:
    """Why `record` has no interval: since every record carries at least its run's own
    (session_intervals), too few samples for one."""
    return TOO_FEW


def basis_note(record: Record | None) -> str:
    """What a -v line or a JUnit property says of the interval it shows ("" for the final
    session interval): `so far` during the session, or that it is the run's own."""
    ci = (record or {}).get("p50_ci") or {}
    missing = ci.get("noise_missing")
    if ci.get("basis") == SO_FAR:
        own = " (the run's own: no point like it ran twice yet)" if missing else ""
        return f"so far{own}; the tables at the end have the session's"
    if missing:
        return f"the run's own ±: {NOISE_MISSING_TEXT.get(missing, missing)}"
    return ""


# A half-width this wide (in % of the figure) says the point has no one value in this session:
# it is printed as a word, defined once above the tables (noise.py), not as a figure.
UNSTABLE_PCT = 100.0
UNSTABLE = "unstable"
UNSTABLE_NOTE = (f"{UNSTABLE} = the point's 95 % interval is as wide as its value or wider "
                 f"(± {UNSTABLE_PCT:.0f} % or more): it has no one value in this session; "
                 "where its runs fell into regimes they are listed above")


def unstable(pct: float | None) -> bool:
    # As printed: a half-width that rounds to 100 % is one.
    return pct is not None and math.isfinite(pct) and round(pct) >= UNSTABLE_PCT


def pct_text(pct: float | None, record: Record | None = None) -> str:
    """`± 4.1 %` (two significant digits), `unstable` past UNSTABLE_PCT, or why there is
    none."""
    if pct is None or not math.isfinite(pct):
        return f"({missing_reason(record, short=True)})"
    if unstable(pct):
        return f"({UNSTABLE})"
    if pct >= 10:
        return f"± {pct:.0f} %"
    return f"± {pct:.2g} %"


# After the interval of a point that ran out of budget before its precision target.
SHORT_MARK = "*"
SHORT_NOTE = (f"{SHORT_MARK} = short of the --distbench-precision target by the point's own "
              "spread: its run ran out of budget, or its runs in this session disagree")


def printed_rate_pct(record: Record) -> float | None:
    """A rate's printed ± (`rate_ci`), or its run's own where the session placed none."""
    printed = record.get("rate_ci")
    if isinstance(printed, dict):
        return printed.get("half_width_pct")
    return (record.get("figures") or {}).get("rate_ci_pct")


def with_pct(text: str, pct: float | None, record: Record | None) -> str:
    """`359 ± 4.1 %`, marked when `record` missed its precision target."""
    return f"{text} {pct_text(pct, record)}" + (SHORT_MARK if short_of_target(record) else "")


def short_of_target(record: Record | None) -> bool:
    """Whether the point missed its precision target by its own spread (its run ran out of
    budget, or its runs span regimes): never by its neighbours' noise. A record of a file
    written before `own_short` existed: missed at all."""
    precision = (record or {}).get("precision")
    if not isinstance(precision, dict):
        return False
    return bool(precision.get("own_short", precision.get("met") is False))
