"""A results document in the formats CI trackers chart: each benchmark's headline and its 95 %
interval, never a statistic the tables do not print.

- `github-action-benchmark`: its `customSmallerIsBetter` list, one entry per benchmark whose
  headline is the p50 time: `name` the benchmark's id, `unit` "us", `value` the p50, `range`
  the p50's interval as "-a/+b" (the tool shows it as text), `extra` the interval, samples,
  timing and mean.
- `github-action-benchmark-bigger`: its `customBiggerIsBetter` list: a rate record's headline
  (messages/s over the whole timed region) or, for the others, the bus bandwidth (GB/s, from
  the p50), each with its interval.
- `bencher`: Bencher Metric Format, id -> {"latency": {value, lower_value, upper_value}} in ns
  from the p50 and its interval, "busbw-gbps" in GB/s, "throughput" (messages/s) for rates.

Records that are no measurement (invalid, incomplete) or have no headline figure are left out
and counted, so the caller can say so.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ...units import format_duration_us, format_figure
from ..document.record import Record
from ..document.session_intervals import headline, is_rate
from .ci import p50_bounds

SMALLER = "github-action-benchmark"
BIGGER = "github-action-benchmark-bigger"
BENCHER = "bencher"
FORMATS = (SMALLER, BIGGER, BENCHER)
# Bencher's measures: its built-in latency (ns) and throughput (operations/s), and one of ours
# (a slug: Bencher creates the measure on first sight).
LATENCY, THROUGHPUT, BUSBW = "latency", "throughput", "busbw-gbps"


@dataclass
class Export:
    """The exported text, and what it holds: how many benchmarks, which were left out and
    why, and how many carry no figure this format charts (`elsewhere`: the other format)."""

    text: str
    written: int = 0
    left_out: Counter[str] = field(default_factory=Counter)
    elsewhere: int = 0


def export(doc: dict[str, Any], fmt: str) -> Export:
    """`doc` (a validated results document) in format `fmt` (one of FORMATS)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    out = Export("")
    figures = list(_figures(doc, out.left_out))
    if fmt == BENCHER:
        payload: Any = {record["id"]: _measures(record) for record in figures}
    else:
        entry = _smaller if fmt == SMALLER else _bigger
        payload = [e for e in (entry(record) for record in figures) if e is not None]
    out.written = len(payload)
    out.elsewhere = len(figures) - out.written
    out.text = json.dumps(payload, indent=2, allow_nan=False) + "\n"
    return out


def _figures(doc: dict[str, Any], left_out: Counter[str]) -> Iterable[Record]:
    """The document's records that are measurements with a headline; the others counted."""
    for bench in doc["benchmarks"]:
        record: Record = bench["distbench"]
        if record.get("invalid"):
            left_out["invalid"] += 1
        elif record.get("incomplete"):
            left_out["incomplete"] += 1
        elif headline(record) is None:
            left_out["without a figure"] += 1
        else:
            yield record


def _smaller(record: Record) -> dict[str, Any] | None:
    if is_rate(record):
        return None
    p50 = record["summary"]["p50"]
    bounds = p50_bounds(record)
    entry: dict[str, Any] = {"name": record["id"], "unit": "us", "value": p50 * 1e6}
    if bounds is not None:
        entry["range"] = (f"-{format_duration_us(max(p50 - bounds[0], 0.0))}"
                          f"/+{format_duration_us(max(bounds[1] - p50, 0.0))}")
    interval = ("none (too few samples)" if bounds is None else
                f"{format_duration_us(bounds[0])} to {format_duration_us(bounds[1])} us")
    entry["extra"] = "\n".join([
        f"p50 95 % interval: {interval}",
        *_common_extra(record),
        f"mean: {format_duration_us(record['summary']['mean'])} us",
    ])
    return entry


def _bigger(record: Record) -> dict[str, Any] | None:
    rate = _rate(record)
    if rate is not None:
        value, bounds = rate
        unit, what = "msgs/s", "messages per second over the whole timed region"
    else:
        busbw = _busbw(record)
        if busbw is None:
            return None
        value, bounds = busbw
        unit, what = "GB/s", "bus bandwidth from the p50 (nccl-tests' busbw, 1 GB = 1e9 B)"
    entry: dict[str, Any] = {"name": record["id"], "unit": unit, "value": value}
    if bounds is not None:
        # Computed apart, a tied interval can miss its value by a rounding: never a "+-".
        entry["range"] = (f"-{format_figure(max(value - bounds[0], 0.0), 3)}"
                          f"/+{format_figure(max(bounds[1] - value, 0.0), 3)}")
    interval = ("none (too few samples)" if bounds is None else
                f"{format_figure(bounds[0])} to {format_figure(bounds[1])} {unit}")
    entry["extra"] = "\n".join([what, f"95 % interval: {interval}", *_common_extra(record)])
    return entry


def _measures(record: Record) -> dict[str, dict[str, float]]:
    """One benchmark's Bencher measures: its headline, and its bus bandwidth where it has one."""
    measures: dict[str, dict[str, float]] = {}
    rate = _rate(record)
    if rate is not None:
        measures[THROUGHPUT] = _metric(*rate)
    else:
        p50 = record["summary"]["p50"]
        bounds = p50_bounds(record)
        measures[LATENCY] = _metric(p50 * 1e9, None if bounds is None else
                                    (bounds[0] * 1e9, bounds[1] * 1e9))
    busbw = _busbw(record)
    if busbw is not None:
        measures[BUSBW] = _metric(*busbw)
    return measures


def _metric(value: float, bounds: tuple[float, float] | None) -> dict[str, float]:
    metric = {"value": value}
    if bounds is not None:
        # A headline and its interval are computed apart: where every sample ties they can
        # miss each other by a rounding, which Bencher reads as a value outside its bounds.
        metric.update(lower_value=min(bounds[0], value), upper_value=max(bounds[1], value))
    return metric


def _rate(record: Record) -> tuple[float, tuple[float, float] | None] | None:
    """A rate record's headline (messages/s) and its interval."""
    if not is_rate(record):
        return None
    figures = record.get("figures") or {}
    # The printed interval (`rate_ci`, placed by the session); a file of schema 2 and before
    # kept it in the figures.
    printed = record.get("rate_ci") or {}
    low = printed.get("low", figures.get("msgs_per_s_ci_low"))
    high = printed.get("high", figures.get("msgs_per_s_ci_high"))
    bounds = None if low is None or high is None else (float(low), float(high))
    return float(figures["msgs_per_s"]), bounds


def _busbw(record: Record) -> tuple[float, tuple[float, float] | None] | None:
    """The bus bandwidth (GB/s, from the p50) and its interval: the p50's, inverted."""
    busbw, p50 = record.get("busbw_gbps"), record["summary"]["p50"]
    if not isinstance(busbw, (int, float)) or not busbw > 0:
        return None
    bounds = p50_bounds(record)
    if bounds is None or not bounds[0] > 0:
        return float(busbw), None
    return float(busbw), (busbw * p50 / bounds[1], busbw * p50 / bounds[0])


def _common_extra(record: Record) -> list[str]:
    return [f"samples: {len(record['samples'])}",
            f"timing: {record.get('timing') or 'not recorded (a file from before it was)'}"]
