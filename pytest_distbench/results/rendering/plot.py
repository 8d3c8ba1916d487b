"""PNG plots of a run (one per family and sweep) and of a comparison (ratio per benchmark).

One drawing layer for every family: what differs lives in each family's `PlotSpec`
(families/<f>/family.py). matplotlib is an optional extra (`pip install "pytest-distbench[plot]"`),
imported only here and only when a plot is drawn, with the Agg backend (no display needed).
No torch import: `pytest-distbench plot run.json` works where torch is not installed.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ... import units
from ..document.io import write_output
from ..document.schema import is_figure
from ..statistics.ratio import ratio_interval
from .fit import printable
from .plot_spec import (
    Group,
    PlotSpec,
    Record,
    default_spec,
    group_records,
    lookup,
    significant,
)
from .registered import spec_for, specs

MISSING_MATPLOTLIB = (
    "plots need matplotlib, which is not installed: pip install \"pytest-distbench[plot]\" "
    "(or pip install matplotlib)"
)
VERDICT_COLOURS = {
    "regression": "#d62728",  # red
    "improvement": "#2ca02c",  # green
    "slower": "#ff7f0e",  # orange: seen, but no gate could judge it
    "faster": "#98df8a",  # light green
    "inconclusive": "#bcbd22",  # olive: far apart, not shown to differ
    "unchanged": "#7f7f7f",  # grey
}
ROWS_PER_COMPARISON_PAGE = 60
BAND_ALPHA = 0.18  # a band's fill, in its line's colour (the legend's swatch repeats it)


class PlotUnavailable(RuntimeError):
    """matplotlib is missing; the message names the extra that installs it."""


def matplotlib_available() -> bool:
    try:
        import matplotlib  # noqa: F401 - an installed but broken matplotlib counts as missing
    except ImportError:
        return False
    return True


def pyplot() -> Any:
    if not matplotlib_available():
        raise PlotUnavailable(MISSING_MATPLOTLIB)
    import matplotlib

    matplotlib.use("Agg", force=True)  # headless: CI runners have no display
    import matplotlib.pyplot as plt

    return plt


@dataclass(frozen=True)
class Rendered:
    """A written PNG and what it shows (for the session's notes and for tests)."""

    path: Path
    title: str
    series: tuple[str, ...]  # legend entries of the series (lines per panel = series x values)
    lines_per_panel: tuple[int, ...]


# ---------------------------------------------------------------------------------------------
# Run plots


def plot_document(document: dict[str, Any], out_dir: str | Path) -> list[Rendered]:
    """One PNG per family and sweep of a results document (see storage.make_document)."""
    records = [b["distbench"] for b in document.get("benchmarks", [])]
    environment = document.get("distbench", {}).get("environment", {})
    return plot_records(records, environment, out_dir)


def plot_records(records: Sequence[Record], environment: dict[str, Any],
                 out_dir: str | Path) -> list[Rendered]:
    plt = pyplot()
    records = [r for r in records if is_figure(r)]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Rendered] = []
    used_names: set[str] = set()
    for spec in specs() + _fallback_specs(records):
        for group in group_records(spec, records):
            name = unique_name(_file_stem(group), used_names)
            written.append(_draw_group(plt, group, environment, out / f"{name}.png"))
    return written


def _fallback_specs(records: Sequence[Record]) -> tuple[PlotSpec, ...]:
    families = sorted({str(r.get("family")) for r in records
                       if spec_for(r) is None and r.get("nbytes")})
    return tuple(default_spec(family) for family in families)


def _file_stem(group: Group) -> str:
    parts = []
    for key, value in group.key:
        short = key.rsplit(".", 1)[-1]
        if value is None:  # a split key this family's records do not carry
            continue
        if short == "family":
            parts.append(str(value))
        elif short == "world_size":
            parts.append(f"ws{value}")
        elif short == "backend":
            parts.append(str(value))
        elif short == "nbytes" and isinstance(value, int):
            parts.append(units.size_id(value) if value > 0 else "0B")
        else:
            parts.append(f"{short}{value}")
    stem = "-".join(parts) or group.spec.name
    # Names come from records (maybe from a foreign file): no path separators, bounded length.
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", stem).lstrip(".")[:120] or "plot"


def literal(value: Any) -> str:
    """Text from records, shown literally: matplotlib would parse $...$ as math (and may fail)."""
    text = printable(value, keep="\n")
    return text.replace("$", r"\$")


def unique_name(stem: str, used: set[str]) -> str:
    name, n = stem, 2
    while name in used:
        name, n = f"{stem}-{n}", n + 1
    used.add(name)
    return name


def _title(group: Group) -> str:
    first = next(iter(group.series.values()))[0]
    fields = {k: v for k, v in first.items() if isinstance(v, (str, int, float))}
    title = group.spec.title.format_map(_Missing(fields))
    shown = {"family", "backend", "world_size"} & set(re.findall(r"{(\w+)}", group.spec.title))
    extra = [_show(k, v) for k, v in group.key
             if v is not None and k.rsplit(".", 1)[-1] not in shown | {"family"}]
    return title + (f"  [{', '.join(extra)}]" if extra else "")


class _Missing(dict):
    def __missing__(self, key: str) -> str:
        return "?"


def _show(key: str, value: Any) -> str:
    name = key.rsplit(".", 1)[-1]
    if name == "nbytes" and isinstance(value, int) and value >= 0:
        return units.size_cell(value)
    if name == "world_size":
        return f"{value} ranks"
    return str(value) if name in ("backend", "device") else f"{name}={value}"


def _draw_group(plt: Any, group: Group, environment: dict[str, Any], path: Path) -> Rendered:
    spec = group.spec
    n = len(spec.panels)
    columns = 2 if n > 1 else 1
    rows = -(-n // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(6.4 * columns, 4.2 * rows + 0.9),
                             squeeze=False)
    series_names = sorted(group.series, key=lambda s: _series_order(group.series[s][0], spec))
    counts = []
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = ("-", "--", "-.", ":")
    for index, panel in enumerate(spec.panels):
        ax = axes[index // columns][index % columns]
        drawn = 0
        banded_labels: set[str] = set()
        for s, name in enumerate(series_names):
            rows_of_series = group.series[name]
            for v, value in enumerate(panel.values):
                # One series: a colour per value; several: a colour per series, a dash per value.
                colour = colours[(v if len(series_names) == 1 else s) % len(colours)]
                style = "-" if len(series_names) == 1 else styles[v % len(styles)]
                label = _line_label(name, value.label, len(series_names), len(panel.values))
                lines, band = _draw_line(ax, spec, rows_of_series, value, colour, style, label)
                drawn += lines
                if band:
                    banded_labels.add(literal(label))
        counts.append(drawn)
        xs = [x for rs in group.series.values() for r in rs if (x := spec.x.at(r)) is not None]
        _style_axes(ax, spec, panel, xs)
        if drawn:
            _legend(ax, banded_labels)
    for index in range(n, rows * columns):
        axes[index // columns][index % columns].set_visible(False)
    title = _title(group)
    fig.suptitle(literal(title), fontsize="large", fontweight="bold")
    records = [r for rs in group.series.values() for r in rs]
    fig.text(0.5, 0.005, literal(caption(environment, records, spec.note)), ha="center",
             va="bottom",
             fontsize="x-small", color="#444444", wrap=True)
    fig.tight_layout(rect=(0, 0.05, 1, 0.95))
    save_figure(plt, fig, path)
    return Rendered(path, title, tuple(series_names), tuple(counts))


def save_figure(plt: Any, fig: Any, path: Path) -> None:
    # Drawn in memory, then written as every output is (document/io.py): a symlink, a device
    # or a FIFO where the PNG goes is written through, never replaced by a file.
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=100)
    finally:
        plt.close(fig)
    write_output(path, buffer.getvalue())


def _legend(ax: Any, banded_labels: set[str]) -> None:
    """A legend whose swatch of a banded line is the line over its own band, in its colour."""
    from matplotlib.legend_handler import HandlerTuple
    from matplotlib.patches import Patch

    handles, labels = ax.get_legend_handles_labels()
    shown = [(Patch(color=h.get_color(), alpha=BAND_ALPHA, linewidth=0), h)
             if label in banded_labels else h for h, label in zip(handles, labels, strict=True)]
    ax.legend(shown, labels, fontsize="small", loc="best",
              handler_map={tuple: HandlerTuple(ndivide=1)})


def _series_order(record: Record, spec: PlotSpec) -> tuple:
    values = [lookup(record, key) for key in spec.series]
    return tuple((0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v)) for v in values)


def _line_label(series: str, value: str, n_series: int, n_values: int) -> str:
    if n_values == 1:
        return series if n_series > 1 or series else value
    return value if n_series == 1 else f"{series} {value}"


def _draw_line(ax: Any, spec: PlotSpec, rows: list[Record], value: Any, colour: str,
               style: str, label: str) -> tuple[int, bool]:
    """Draw one line (and its band); return (lines drawn, whether a band was drawn)."""
    xs, ys, lows, highs, bars = [], [], [], [], []
    for record in rows:
        x, y = spec.x.at(record), value.at(record)
        if x is None or y is None or (spec.x_axis.log and x <= 0) or y <= 0:
            continue
        band = value.band(record)
        xs.append(x)
        ys.append(y)
        lows.append(band[0] if band else y)
        highs.append(band[1] if band else y)
        interval = value.interval(record)
        bars.append((y - interval[0], interval[1] - y) if interval else (0.0, 0.0))
    if not xs:
        return 0, False
    ax.plot(xs, ys, style, marker="o", markersize=3.5, color=colour, label=literal(label))
    if any(low or high for low, high in bars):  # the p50's 95 % interval, as error bars
        ax.errorbar(xs, ys, yerr=[[max(0.0, b[0]) for b in bars], [max(0.0, b[1]) for b in bars]],
                    fmt="none", ecolor=colour, elinewidth=1.2, capsize=3)
    banded = any(lo != hi for lo, hi in zip(lows, highs, strict=True))
    if banded:
        ax.fill_between(xs, lows, highs, color=colour, alpha=BAND_ALPHA, linewidth=0)
    return 1, banded


def _style_axes(ax: Any, spec: PlotSpec, panel: Any, xs: Sequence[float]) -> None:
    from matplotlib import ticker

    ax.set_title(panel.title)
    ax.set_xlabel(spec.x_axis.text)
    ax.set_ylabel(panel.y.text)
    if spec.x_axis.log:
        ax.set_xscale("log", base=2 if spec.x_axis.size else 10)
    if panel.y.log:
        ax.set_yscale("log")
        # Plain numbers on every labelled tick: 3 x 10^4 reads worse than 30,000.
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(_number_tick))
        low, high = ax.get_ylim()
        if low > 0 and high / low < 3:
            # Less than a factor of 3 (the percentiles of one world size): a log axis has at
            # most one labelled tick there; evenly spaced ones read better.
            ax.yaxis.set_major_locator(ticker.MaxNLocator(nbins=5))
            ax.yaxis.set_minor_locator(ticker.NullLocator())
        else:
            ax.yaxis.set_minor_formatter(ticker.FuncFormatter(_minor_labeller(low, high)))
    if spec.x_axis.size:
        ax.xaxis.set_major_locator(ticker.LogLocator(base=4, numticks=14))
        ax.xaxis.set_minor_locator(ticker.NullLocator())
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(_size_tick))
        ax.tick_params(axis="x", labelrotation=45)
    elif xs and len(set(xs)) <= 16:
        # Few points of a count (ranks, credits, clients): a tick at each measured value.
        ax.xaxis.set_major_locator(ticker.FixedLocator(sorted(set(xs))))
        ax.xaxis.set_minor_locator(ticker.NullLocator())
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(_number_tick))
    elif spec.x_axis.log:
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(_number_tick))
    if xs and len(set(xs)) == 1:
        # One point (a single world size, one credit count): centre it instead of leaving it
        # on the edge of an axis matplotlib cannot size from one value.
        (x,) = set(xs)
        if spec.x_axis.log:
            ax.set_xlim(x / 2, x * 2)
        else:
            ax.set_xlim(x - 1, x + 1)
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", alpha=0.12)


def _size_tick(value: float, _pos: Any) -> str:
    return units.format_size(int(round(value))) if value >= 1 else ""


def _number_tick(value: float, _pos: Any) -> str:
    if value <= 0:
        return f"{value:g}"
    text = significant(value, 3)
    return text.rstrip("0").rstrip(".") if "." in text else text


def _minor_labeller(low: float, high: float) -> Any:
    """Label the minor ticks of a log axis that spans few decades, so it still has numbers."""
    span = high / low if low > 0 else float("inf")
    if span < 4:
        mantissas: tuple[float, ...] = (2, 3, 4, 5, 6, 7, 8, 9)
    elif span < 12:
        mantissas = (2, 3, 5)
    elif span < 120:
        mantissas = (2, 5)
    else:
        mantissas = ()

    def label(value: float, _pos: Any) -> str:
        if value <= 0:
            return ""
        mantissa = value / 10 ** math.floor(math.log10(value) + 1e-9)
        return _number_tick(value, None) if round(mantissa, 6) in mantissas else ""

    return label




def caption(environment: dict[str, Any], records: Iterable[Record], note: str = "") -> str:
    """The environment line under every plot: torch, backend, CPU, world size, host."""
    records = list(records)
    backends = sorted({str(r.get("backend")) for r in records})
    worlds = sorted({int(r["world_size"]) for r in records if "world_size" in r})
    parts = [f"torch {environment.get('torch', '?')}",
             f"backend {','.join(backends) or '?'}",
             f"world size {','.join(map(str, worlds)) or '?'}"]
    cpu = environment.get("cpu_model") or "?"
    cores = environment.get("cpu_count")
    parts.append(f"CPU {cpu}" + (f" ({cores} logical CPUs)" if cores else ""))
    gpus = environment.get("gpus") or []
    if gpus:
        parts.append(f"GPU {gpus[0]}" + (f" x{len(gpus)}" if len(gpus) > 1 else ""))
    if environment.get("hostname"):
        parts.append(f"host {environment['hostname']}")
    line = " | ".join(parts)
    return f"{note}\n{line}" if note else line


# ---------------------------------------------------------------------------------------------
# Comparison plot


@dataclass(frozen=True)
class RatioRow:
    name: str
    kind: str
    ratio: float
    low: float
    high: float


def comparison_rows(baseline: dict[str, Any], current: dict[str, Any],
                    comparison: Any) -> list[RatioRow]:
    """Per judged benchmark: current/baseline p50 with its 95 % interval, and the verdict."""
    from ..document.schema import records

    base, cur = records(baseline), records(current)
    rows = []
    for v in comparison.verdicts:
        if v.id not in base or v.id not in cur:
            continue
        ratio, low, high = ratio_interval(base[v.id]["samples"], cur[v.id]["samples"])
        if not all(math.isfinite(x) and x > 0 for x in (ratio, low, high)):
            continue  # a zero-time baseline: no ratio to draw on a log axis
        rows.append(RatioRow(_comparison_name(cur[v.id]), v.kind, ratio, low, high))
    return rows


def _comparison_name(record: Record) -> str:
    name = str(record.get("name", record.get("id", "?")))
    return name if len(name) <= 60 else name[:57] + "..."


def plot_comparison(baseline: dict[str, Any], current: dict[str, Any], comparison: Any,
                    out_dir: str | Path) -> list[Rendered]:
    """comparison.png (comparison-2.png, ... past 60 benchmarks): ratio per benchmark."""
    plt = pyplot()
    from matplotlib.patches import Patch

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = comparison_rows(baseline, current, comparison)
    counts = comparison.counts()
    unjudged = counts["new"] + counts["missing"]
    pages = [rows[i:i + ROWS_PER_COMPARISON_PAGE]
             for i in range(0, len(rows), ROWS_PER_COMPARISON_PAGE)] or [[]]
    written = []
    for number, page in enumerate(pages, start=1):
        height = 1.9 + 0.27 * max(len(page), 3)
        fig, ax = plt.subplots(figsize=(10, height))
        ys = list(range(len(page)))[::-1]
        for y, row in zip(ys, page, strict=True):
            colour = VERDICT_COLOURS.get(row.kind, "#000000")
            ax.errorbar([row.ratio], [y], xerr=[[row.ratio - row.low], [row.high - row.ratio]],
                        fmt="o", color=colour, ecolor=colour, capsize=3, markersize=5)
        ax.axvline(1.0, color="black", linewidth=0.8)
        t = comparison.threshold
        for edge in (1 + t, 1 / (1 + t)):
            ax.axvline(edge, color="#999999", linewidth=0.8, linestyle="--")
        ax.set_yticks(ys)
        ax.set_yticklabels([literal(row.name) for row in page], fontsize="small")
        ax.set_xscale("log")
        from matplotlib import ticker

        low = min([r.low for r in page] + [1 / (1 + t)]) / 1.05
        high = max([r.high for r in page] + [1 + t]) * 1.05
        ax.set_xlim(low, high)
        ticks = [x for x in _RATIO_TICKS if low <= x <= high]
        ax.xaxis.set_major_locator(ticker.FixedLocator(ticks))
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(_number_tick))
        ax.xaxis.set_minor_locator(ticker.NullLocator())
        ax.set_xlabel("current / baseline p50 time (> 1 = slower); bars: 95 % interval")
        if page:
            ax.set_ylim(-0.7, len(page) - 0.3)
        kinds = [k for k in VERDICT_COLOURS if any(r.kind == k for r in page)]
        handles = [Patch(color=VERDICT_COLOURS[k], label=k) for k in kinds]
        handles.append(plt.Line2D([], [], color="#999999", linestyle="--",
                                  label=f"threshold {t * 100:g}%"))
        ax.legend(handles=handles, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
        ax.grid(True, axis="x", which="both", alpha=0.3)
        suffix = f" (page {number}/{len(pages)})" if len(pages) > 1 else ""
        title = (f"p50 time ratio: {comparison.current_label} vs {comparison.baseline_label}"
                 f"{suffix}")
        ax.set_title(literal(title), fontweight="bold")
        summary = ", ".join(f"{counts[k]} {k}" for k in counts)
        not_drawn = f"; {unjudged} new/missing not drawn" if unjudged else ""
        environment = current.get("distbench", {}).get("environment", {})
        recs = [b["distbench"] for b in current.get("benchmarks", [])]
        fig.text(0.5, 0.005, literal(f"{summary}{not_drawn}\n" + caption(environment, recs)),
                 ha="center", va="bottom", fontsize="x-small", color="#444444")
        fig.tight_layout(rect=(0, 0.6 / height, 1, 1))
        name = "comparison" if number == 1 else f"comparison-{number}"
        path = out / f"{name}.png"
        save_figure(plt, fig, path)
        written.append(Rendered(path, title, tuple(kinds), (len(page),)))
    return written


_RATIO_TICKS = (0.1, 0.2, 0.25, 0.33, 0.5, 0.67, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2, 3, 4, 5, 10,
                20, 50, 100)
