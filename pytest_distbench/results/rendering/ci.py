"""A record's headline interval as the tables, JUnit and plots print it: `p50 ± x %`.

The interval is the record's `p50_ci`: since schema 2 the session interval (the run's sampling
interval widened by the run-to-run noise the session measured, results/document/
session_intervals.py); a record from a file written before it existed gets the sampling
interval from its samples (statistics/interval.py), which is all such a file knows.
"""

from __future__ import annotations

import math

from ..document.record import Record
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
    """(low, high) seconds of the p50's 95 % interval, or None with too few samples."""
    stored = record.get("p50_ci")
    if isinstance(stored, dict) and "low" in stored:
        low, high = stored.get("low"), stored.get("high")
        return None if low is None or high is None else (float(low), float(high))
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


def missing_reason(record: Record | None, short: bool = False) -> str:
    """Why `record` has no interval: what its `p50_ci` says (`short`: just "no ±", for a
    table cell under the session's noise line, which says why), else too few samples."""
    why = ((record or {}).get("p50_ci") or {}).get("why")
    if not why:
        return TOO_FEW
    if why.endswith(" yet"):  # at the test's end, before the session measured its noise
        return "± at the end" if short else f"no ± yet: {why} (the tables and results file " \
            "at the end have it)"
    return "no ±" if short else f"no ±: {why}"


def pct_text(pct: float | None, record: Record | None = None) -> str:
    """`± 4.1 %` (two significant digits), or why there is none."""
    if pct is None or not math.isfinite(pct):
        return f"({missing_reason(record, short=True)})"
    if pct >= 10:
        return f"± {pct:.0f} %"
    return f"± {pct:.2g} %"


# After the interval of a point that ran out of budget before its precision target.
SHORT_MARK = "*"
SHORT_NOTE = (f"{SHORT_MARK} = short of the --distbench-precision target: the budget ran out, "
              "or the run-to-run noise is wider")


def with_pct(text: str, pct: float | None, record: Record | None) -> str:
    """`359 ± 4.1 %`, marked when `record` missed its precision target."""
    return f"{text} {pct_text(pct, record)}" + (SHORT_MARK if short_of_target(record) else "")


def short_of_target(record: Record | None) -> bool:
    precision = (record or {}).get("precision")
    return isinstance(precision, dict) and precision.get("met") is False
