"""What a family's plot shows, stated as data: which records, x, y, series, scales, units.

A family states only its axes (a `PlotSpec`, in its families/<f>/family.py); `plot.py` draws
every spec the same way.
Nothing in this module imports torch or matplotlib, so a spec can be read, tested and used for
the one-line figures of `-v` and JUnit without either.

Values are read from a record (the dicts of the results file, see docs/results-schema.md):

- ``field``: a dotted path into the record: ``"nbytes"``, ``"world_size"``,
  ``"params.credits"``, ``"summary.p50"``, ``"figures.agent_latency_s.p50"``.
- ``of_time``: a function of the record and a time per iteration in seconds; the value is drawn
  at the p50 of the samples with a band from the p5 to the p95 (a rate's band comes from the
  p95 and p5 times, so it is still the middle 90 % of the iterations).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ... import units
from ..document.record import Record
from ..statistics.stats import percentile
from .ci import p50_bounds, pct_text

OfTime = Callable[[Record, float], "float | None"]

BAND_LOW, BAND_HIGH = 5, 95


def lookup(record: Record, path: str) -> Any:
    """The value at a dotted path of a record, or None where any part is missing."""
    value: Any = record
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def time_percentile(record: Record, q: float) -> float | None:
    """The q-th percentile of a record's per-iteration times (seconds)."""
    samples = record.get("samples") or []
    if not samples:
        return None
    if q == 50 and isinstance(record.get("summary"), dict) and "p50" in record["summary"]:
        return _number(record["summary"]["p50"])
    return percentile(sorted(samples), q)


@dataclass(frozen=True)
class Value:
    """One plotted quantity of a record: from a field, or derived from its times."""

    label: str
    field: str | None = None
    of_time: OfTime | None = None
    scale: float = 1.0  # e.g. 1e6 for a field in seconds drawn in microseconds
    # A field's own 95 % interval: the (low, high) fields a family stored beside it, or the
    # session's (a rate's `rate_ci`); then `run_interval_fields`, the run's own, where the
    # session placed none (a record before the end of the test loop).
    interval_fields: tuple[str, str] | None = None
    run_interval_fields: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        if (self.field is None) == (self.of_time is None):
            raise ValueError(f"value {self.label!r}: give exactly one of field and of_time")
        if self.interval_fields is not None and self.field is None:
            raise ValueError(f"value {self.label!r}: interval_fields go with a field")

    def at(self, record: Record) -> float | None:
        """The value drawn as the line (p50 time for derived values)."""
        if self.field is not None:
            value = _number(lookup(record, self.field))
            return None if value is None else value * self.scale
        return self._of(record, 50)

    def band(self, record: Record) -> tuple[float, float] | None:
        """(low, high) over the p5..p95 iteration times; None for a plain field."""
        if self.of_time is None:
            return None
        low, high = self._of(record, BAND_LOW), self._of(record, BAND_HIGH)
        if low is None or high is None:
            return None
        return (min(low, high), max(low, high))

    def interval(self, record: Record) -> tuple[float, float] | None:
        """(low, high) of the value at the p50's 95 % interval (order statistics, so any
        monotone function of the time takes the same two samples), or a field's stored
        interval; None for a plain field or too few samples."""
        if self.interval_fields is not None:
            ends = [_number(lookup(record, path)) for path in self.interval_fields]
            if ends == [None, None] and self.run_interval_fields is not None:
                ends = [_number(lookup(record, path)) for path in self.run_interval_fields]
            if ends[0] is None or ends[1] is None:
                return None
            return (min(ends) * self.scale, max(ends) * self.scale)
        bounds = p50_bounds(record) if self.of_time is not None else None
        if bounds is None:
            return None
        ends = [self._at_time(record, seconds) for seconds in bounds]
        if ends[0] is None or ends[1] is None:
            return None
        return (min(ends), max(ends))

    def interval_pct(self, record: Record) -> float | None:
        """Half the interval's width in percent of the value (what `± x %` prints)."""
        ends, value = self.interval(record), self.at(record)
        if ends is None or value is None or value <= 0:
            return None
        return 100.0 * (ends[1] - ends[0]) / 2 / value

    def _of(self, record: Record, q: float) -> float | None:
        return self._at_time(record, time_percentile(record, q))

    def _at_time(self, record: Record, seconds: float | None) -> float | None:
        if seconds is None or seconds <= 0 or self.of_time is None:
            return None
        value = _number(self.of_time(record, seconds))
        return None if value is None else value * self.scale


@dataclass(frozen=True)
class Axis:
    label: str  # what it is: "message size", "credits", "clients"
    unit: str = ""  # "bytes", "us", "GB/s", "msgs/s"; empty for a count
    log: bool = True
    size: bool = False  # ticks in binary units (4 B, 1 KiB, 1 MiB)

    @property
    def text(self) -> str:
        return f"{self.label} ({self.unit})" if self.unit else self.label


@dataclass(frozen=True)
class Panel:
    """One subplot: its y axis and the values drawn on it (one line each, per series)."""

    title: str
    y: Axis
    values: tuple[Value, ...]


@dataclass(frozen=True)
class Headline:
    """A figure for the `-v` line: label, value, unit and how to print it."""

    label: str
    value: Value
    unit: str

    def text(self, record: Record) -> str | None:
        v = self.value.at(record)
        if v is None:
            return None
        # A figure in GB/s reads as the tables' bandwidth cells do (one formatter for both):
        # in the decimal unit it reads at least 0.1 in, not as 0.00212 GB/s beside 2.12 MB/s.
        # A figure in MB/s likewise (one-byte messages: 0.00235 MB/s read 2.35 KB/s).
        shown = (bandwidth_cell(v) if self.unit == "GB/s" else bandwidth_cell(v / 1e3)
                 if self.unit == "MB/s" else f"{significant(v)} {self.unit}")
        text = f"{self.label} {shown}".strip()
        if self.value.of_time is None and self.value.interval_fields is None:
            return text  # a family's own figure without an interval
        return f"{text} {pct_text(self.value.interval_pct(record), record)}"


@dataclass(frozen=True)
class PlotSpec:
    """Everything that differs between the plots of two families."""

    name: str  # file stem, e.g. "collectives"; the split values are appended
    families: tuple[str, ...]  # record "family" values this spec draws
    x: Value
    x_axis: Axis
    panels: tuple[Panel, ...]
    # Records that differ in these paths are different lines ("backend", "world_size", ...).
    series: tuple[str, ...] = ("backend", "world_size")
    # Records that differ in these paths go to different files; any other param that varies
    # besides x and the series (a "sweep": dtype, batch, ...) splits files too.
    split: tuple[str, ...] = ("family",)
    title: str = "{family}"
    headline: tuple[Headline, ...] = ()
    note: str = ""  # one line under the title: what a point is, e.g. "p50, band p5-p95"

    def accepts(self, record: Record) -> bool:
        return record.get("family") in self.families


def significant(value: float, digits: int = 3) -> str:
    """`digits` significant digits without an exponent: 0.000123, 1.23, 123, 12346."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:,.{decimals}f}"
    # Rounding may add a digit (9.996 -> 10.00): recount on the rounded value.
    rounded = float(text.replace(",", ""))
    if rounded != 0 and decimals > 0:
        decimals = max(0, digits - 1 - math.floor(math.log10(abs(rounded))))
        text = f"{value:,.{decimals}f}"
    return text


# Decimal units a bandwidth cell may use, largest first: the first in which the figure reads
# at least 0.1 (a 4 B all_reduce's 0.00000146 GB/s reads 1.46 KB/s, the 64 MiB one's 0.569 GB/s
# stays in GB/s). Each cell says its unit: a size sweep spans seven decades of bandwidth.
_BANDWIDTH_UNITS = (("GB/s", 1.0), ("MB/s", 1e3), ("KB/s", 1e6))


def bandwidth_unit(value_gbps: float) -> tuple[str, float]:
    """The unit one bandwidth figure reads in, and the factor from GB/s to it."""
    for unit, scale in _BANDWIDTH_UNITS:
        if value_gbps * scale >= 0.1:
            return unit, scale
    return _BANDWIDTH_UNITS[-1]


def bandwidth_cell(value_gbps: float | None) -> str:
    """`1.46 KB/s`: three significant digits, never 0.000, in the unit it reads in."""
    if value_gbps is None:
        return "-"
    unit, scale = bandwidth_unit(value_gbps)
    return f"{significant(value_gbps * scale, 3)} {unit}"


def measurement_name(record: Record) -> str | None:
    """The name a test gave its measure() or record() call (record names read
    `test_x[gloo-ws2]::ring_all_reduce`), or None for the test's one unnamed measurement."""
    name = str(record.get("name") or "")
    tail = name.rsplit("]", 1)[-1]
    return tail.rsplit("::", 1)[-1] if "::" in tail else None


# -- the vocabulary the families' specs share, and the spec of a family without one -----------

SIZE = Axis("message size", "bytes", size=True)
TIME_US = Axis("time per iteration", "us")
P50 = ("p50, bars its 95 % interval in this session (sampling and run-to-run noise), band "
       "p5-p95 of the iterations")


def time_us(record: Record, seconds: float) -> float:
    return seconds * 1e6


def positive(record: Record, path: str, default: float) -> float:
    """The number at `path` if it is one above zero, else `default`."""
    value = lookup(record, path)
    return float(value) if isinstance(value, (int, float)) and value > 0 else default


def messages(record: Record) -> float:
    """Messages one timed iteration moves (docs/results-schema.md: messages_per_iteration)."""
    return positive(record, "figures.messages_per_iteration", 1.0)


def msgs_per_s(record: Record, seconds: float) -> float:
    return messages(record) / seconds


def mbps(record: Record, seconds: float) -> float | None:
    nbytes = record.get("nbytes")
    return None if not nbytes else messages(record) * nbytes / seconds / 1e6


NBYTES = Value("message size", field="nbytes")
TIME = Value("p50", of_time=time_us)
MSGS = Value("messages/s", of_time=msgs_per_s)
MBPS = Value("MB/s", of_time=mbps)
# The message families' headline: totals over the timed region (as OSU), with their
# interval (block bootstrap widened by the session's noise), the figure their tables print.
MSGS_TOTAL = Value("messages/s", field="figures.msgs_per_s",
                   interval_fields=("rate_ci.low", "rate_ci.high"),
                   run_interval_fields=("figures.msgs_per_s_ci_low", "figures.msgs_per_s_ci_high"))
MBPS_TOTAL = Value("MB/s", field="figures.mbps",
                   interval_fields=("rate_ci.mbps_low", "rate_ci.mbps_high"),
                   run_interval_fields=("figures.mbps_ci_low", "figures.mbps_ci_high"))
TOTALS = ("total messages / total time (as OSU), bars its 95 % interval in this session "
          "(block bootstrap and run-to-run noise)")
DEFAULT_HEADLINE = (Headline("p50", TIME, "us"),)


def default_spec(family: str) -> PlotSpec:
    """A user's own sized benchmark (no spec of its own): its time against message size."""
    return PlotSpec(name=family, families=(family,), x=NBYTES, x_axis=SIZE,
                    panels=(Panel("time", TIME_US, (TIME,)),), note=P50)


def series_label(keys: Iterable[str], record: Record) -> str:
    parts = []
    for key in keys:
        value = lookup(record, key)
        name = key.rsplit(".", 1)[-1]
        if name == "world_size":
            parts.append(f"{value} ranks")
        elif name == "nbytes" and isinstance(value, int):
            parts.append(units.size_cell(value))
        elif isinstance(value, str):  # a backend, a path, a transport: it names itself
            parts.append(value)
        else:
            parts.append(f"{name}={value}")
    return ", ".join(parts)


@dataclass
class Group:
    """The records of one file: split values and, per series, the records in x order."""

    spec: PlotSpec
    key: tuple[tuple[str, Any], ...]
    series: dict[str, list[Record]] = field(default_factory=dict)


def group_records(spec: PlotSpec, records: Iterable[Record]) -> list[Group]:
    """Split a spec's records into files and lines; a record without an x value is left out."""
    mine = [r for r in records if spec.accepts(r) and spec.x.at(r) is not None]
    if not mine:
        return []
    used = set(spec.series) | set(spec.split)
    # A record field that params holds too ("nbytes") is used under both names.
    used |= {"params." + key.rsplit(".", 1)[-1] for key in spec.series}
    if spec.x.field:
        # x may be read from the record ("nbytes") while params holds it too.
        used |= {spec.x.field, "params." + spec.x.field.rsplit(".", 1)[-1]}
    by_split: dict[tuple[Any, ...], list[Record]] = {}
    for record in mine:
        by_split.setdefault(tuple(repr(lookup(record, k)) for k in spec.split), []).append(record)
    groups: dict[tuple[tuple[str, Any], ...], Group] = {}
    for members in by_split.values():
        # A parameter that varies here but is neither x, a series nor a split is a sweep: its
        # own file (all_reduce at float16 and at float32 are two plots, not one tangle).
        candidates = sorted({f"params.{k}" for r in members for k in (r.get("params") or {})}
                            | {"dtype", "device"})
        sweeps = tuple(p for p in candidates if p not in used
                       and len({repr(lookup(r, p)) for r in members}) > 1)
        for record in members:
            key = tuple((k, lookup(record, k)) for k in tuple(spec.split) + sweeps)
            group = groups.setdefault(key, Group(spec, key))
            group.series.setdefault(series_label(spec.series, record), []).append(record)
    for group in groups.values():
        for rows in group.series.values():
            rows.sort(key=lambda r: spec.x.at(r) or 0.0)
    return list(groups.values())
