"""Rendering comparisons for people (terminal table, GitHub markdown) and machines (csv, json).

Files hold seconds; people read microseconds, so printed times are in us and say so in the
header. csv and json stay machine-friendly: csv keeps full-precision numbers (still us, as its
headers say), json keeps seconds like the results files.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from typing import Any

from ...units import size_cell
from ..comparison.verdict import KINDS, Comparison, Verdict
from ..statistics import vocabulary
from . import fit
from .fit import printable

FORMATS = ("table", "markdown", "csv", "json")


def render(comparisons: Comparison | Sequence[Comparison], fmt: str = "table") -> str:
    """Render one comparison (two files) or a series sharing one baseline (3+ files).

    A series is shown side by side: the chosen metric of every file, with each later file's
    change and verdict against the first. The result ends with a newline.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    series = [comparisons] if isinstance(comparisons, Comparison) else list(comparisons)
    if not series:
        raise ValueError("nothing to render: no comparisons given")
    if len(series) == 1:
        return _render_pair(series[0], fmt)
    return _render_series(series, fmt)


def summary_line(comparison: Comparison) -> str:
    """E.g. '1 regression, 0 improvements, 12 unchanged, 1 new, 0 missing'; changes no gate
    could judge only when there are some ('0 regressions, 0 improvements, 3 slower (not
    gateable), ...')."""
    counts = comparison.counts()
    parts = []
    for kind in KINDS:
        n = counts[kind]
        if kind in (*vocabulary.UNGATED, "inconclusive"):  # said only where there are some
            if n:
                parts.append(f"{n} {kind}" + (f" ({vocabulary.NOT_GATEABLE})"
                                               if kind in vocabulary.UNGATED else ""))
            continue
        word = kind
        if kind in ("regression", "improvement") and n != 1:
            word += "s"
        parts.append(f"{n} {word}")
    return ", ".join(parts)


def rule_line(comparison: Comparison) -> str:
    """How verdicts were reached, so a reader of a CI summary can tell noise from a finding."""
    return "; ".join(rule_terms(comparison))


def rule_markdown(comparison: Comparison) -> list[str]:
    """rule_terms as a markdown list, a term a line."""
    return [f"- _{cell_text(term, True)}_" for term in rule_terms(comparison)]


def rule_terms(comparison: Comparison) -> list[str]:
    """The vocabulary's legend (vocabulary.legend_terms), with this comparison's threshold, test
    and family."""
    history = any(v.z is not None for v in comparison.verdicts)
    single = any(v.z is None and v.level is not None for v in comparison.verdicts)
    tests = []
    if history:
        tests.append("the robust z of log p50 against the stored runs' spread, its one-sided p "
                     "from Student's t with k - 1 degrees of freedom (k stored runs); the change "
                     "is against the median of the stored p50s")
    if single:
        tests.append("a one-sided Mann-Whitney U test on the two runs' batch medians, their 95 % "
                     "intervals apart")
    shown = "" if comparison.metric == "p50" else (
        f"; change % shows {comparison.metric} (against the file's own run), the verdict p50")
    levels = [v.level for v in comparison.verdicts if v.level is not None]
    family = vocabulary.family_clause(comparison.alpha, comparison.family, levels,
                                      comparison.family_unit)
    return [f"threshold {comparison.threshold * 100:g}% (unless overridden per benchmark)"
            f"{shown}", *vocabulary.legend_terms(" or ".join(tests) or "the comparison's test",
                                                 family)]


# ---------------------------------------------------------------------------------------------
# Two files


def _render_pair(comparison: Comparison, fmt: str) -> str:
    metric = comparison.metric
    if fmt == "json":
        return _json_dump(_pair_json(comparison))

    if fmt == "csv":
        headers = [
            "benchmark", "family", "size", f"baseline {metric} (us)", f"current {metric} (us)",
            "change %", "p-value", "verdict", "id", "detectable %",
        ]  # fmt: skip
        rows = [
            [
                v.name,
                v.family,
                size_cell(v.nbytes),
                _raw_us(v.baseline_value),
                _raw_us(v.current_value),
                _raw_pct(v.metric_change),
                _raw(v.p_value),
                _verdict_cell(v, markdown=False),
                v.id,
                _raw_pct(v.detectable),
            ]
            for v in comparison.verdicts
        ]
        return _csv(headers, rows)

    headers = [
        "benchmark", "family", "size", f"baseline {metric} (us)", f"current {metric} (us)",
        "change %", "p-value", "detectable", "verdict",
    ]  # fmt: skip
    align = ["left", "left", "right", "right", "right", "right", "right", "right", "left"]
    markdown = fmt == "markdown"
    rows = [
        [
            cell_text(v.name, markdown),
            cell_text(v.family, markdown),
            size_cell(v.nbytes),
            _us(v.baseline_value),
            _us(v.current_value),
            _pct(v.metric_change),
            _p(v.p_value),
            _detectable(v),
            _verdict_cell(v, markdown),
        ]
        for v in comparison.verdicts
    ]
    table = _tabulate(rows, headers, align, markdown)
    lines = []
    if markdown:
        lines += _markdown_warnings([("", comparison.fingerprint_differences)])
        lines += [table, "", _markdown_summary(comparison), "", *rule_markdown(comparison)]
    else:
        lines += [table, "", *_fitted(summary_line(comparison)), *_fitted(rule_line(comparison))]
    return "\n".join(lines) + "\n"


def _pair_json(comparison: Comparison) -> dict[str, Any]:
    return {
        "files": [comparison.baseline_label, comparison.current_label],
        "metric": comparison.metric,
        "threshold": comparison.threshold,
        "alpha": comparison.alpha,
        "family": comparison.family,
        "fingerprint_differences": list(comparison.fingerprint_differences),
        "counts": comparison.counts(),
        "benchmarks": [_verdict_json(v) for v in comparison.verdicts],
    }


def _verdict_json(v: Verdict) -> dict[str, Any]:
    return {
        "id": v.id,
        "name": v.name,
        "family": v.family,
        "nbytes": v.nbytes,
        "verdict": v.kind,
        "baseline_p50_s": _finite(v.baseline_p50),
        "current_p50_s": _finite(v.current_p50),
        "change": _finite(v.change),
        "p_value": _finite(v.p_value),
        "threshold": v.threshold,
        "metric": v.metric,
        "baseline_s": _finite(v.baseline_value),
        "current_s": _finite(v.current_value),
        "metric_change": _finite(v.metric_change),
        "detectable": _finite(v.detectable),
        "gateable": v.gateable if v.detectable is not None else None,
        "noise": v.noise,
        "z": _finite(v.z),
        "level": v.level,
    }


# ---------------------------------------------------------------------------------------------
# Three or more files: one baseline, several later runs


def _render_series(series: list[Comparison], fmt: str) -> str:
    metric = series[0].metric
    labels = [series[0].baseline_label] + [c.current_label for c in series]
    ids: dict[str, Verdict] = {}  # first verdict seen per id, for its name/family/size
    for comparison in series:
        for v in comparison.verdicts:
            ids.setdefault(v.id, v)

    def baseline_value(benchmark_id: str) -> float | None:
        for comparison in series:
            v = comparison.get(benchmark_id)
            if v is not None and v.baseline_value is not None:
                return v.baseline_value
        return None

    if fmt == "json":
        return _json_dump(
            {
                "files": labels,
                "metric": metric,
                "threshold": series[0].threshold,
                "alpha": series[0].alpha,
                "fingerprint_differences": {
                    c.current_label: list(c.fingerprint_differences) for c in series
                },
                "counts": {c.current_label: c.counts() for c in series},
                "benchmarks": [
                    {
                        "id": benchmark_id,
                        "name": first.name,
                        "family": first.family,
                        "nbytes": first.nbytes,
                        "values_s": [_finite(baseline_value(benchmark_id))]
                        + [_finite(_current(c, benchmark_id)) for c in series],
                        "changes": [None]
                        + [_finite(_field(c, benchmark_id, "metric_change")) for c in series],
                        "p_values": [None]
                        + [_finite(_field(c, benchmark_id, "p_value")) for c in series],
                        "verdicts": [None] + [_kind(c, benchmark_id) for c in series],
                    }
                    for benchmark_id, first in ids.items()
                ],
            }
        )

    raw = fmt == "csv"
    markdown = fmt == "markdown"
    headers = ["benchmark", "family", "size", f"{labels[0]} {metric} (us)"]
    align = ["left", "left", "right", "right"]
    for label in labels[1:]:
        headers += [f"{label} {metric} (us)", f"{label} change %", f"{label} verdict"]
        align += ["right", "right", "left"]
    if raw:
        headers.append("id")

    rows = []
    for benchmark_id, first in ids.items():
        if raw:
            row = [first.name, first.family, size_cell(first.nbytes)]
            row.append(_raw_us(baseline_value(benchmark_id)))
        else:
            row = [cell_text(first.name, markdown), cell_text(first.family, markdown),
                   size_cell(first.nbytes)]
            row.append(_us(baseline_value(benchmark_id)))
        for comparison in series:
            v = comparison.get(benchmark_id)
            if v is None:  # neither in the baseline nor in this file
                row += ["" if raw else "-", "", ""]
            elif raw:
                row += [_raw_us(v.current_value), _raw_pct(v.metric_change),
                        _verdict_cell(v, markdown=False)]
            else:
                row += [_us(v.current_value), _pct(v.metric_change), _verdict_cell(v, markdown)]
        if raw:
            row.append(benchmark_id)
        rows.append(row)

    if raw:
        return _csv(headers, rows)
    table = _tabulate(rows, headers, align, markdown)
    if markdown:
        lines = _markdown_warnings([(c.current_label, c.fingerprint_differences) for c in series])
        lines += [table, ""]
        lines += [f"- {cell_text(c.current_label, True)}: {_markdown_summary(c)}" for c in series]
        lines += ["", *rule_markdown(series[0])]
    else:
        lines = [table, ""]
        lines += [part for c in series for part in _fitted(f"{c.current_label}: {summary_line(c)}")]
        lines += _fitted(rule_line(series[0]))
    return "\n".join(lines) + "\n"


def _current(comparison: Comparison, benchmark_id: str) -> float | None:
    return _field(comparison, benchmark_id, "current_value")


def _field(comparison: Comparison, benchmark_id: str, name: str) -> Any:
    v = comparison.get(benchmark_id)
    return None if v is None else getattr(v, name)


def _kind(comparison: Comparison, benchmark_id: str) -> str | None:
    v = comparison.get(benchmark_id)
    return None if v is None else v.kind


# ---------------------------------------------------------------------------------------------
# Cells and containers


def _tabulate(rows: list[list[str]], headers: list[str], align: list[str], markdown: bool) -> str:
    if not markdown:  # a terminal's: fitted to 120 columns as the result tables are
        if all(row[1] in row[0] for row in rows):  # every name says its family (test_<family>)
            rows, headers, align = ([row[:1] + row[2:] for row in rows],
                                    headers[:1] + headers[2:], align[:1] + align[2:])
        return fit.table(rows, headers, colalign=align)
    from tabulate import tabulate  # lazy: only the markdown format needs it

    return tabulate(
        rows,
        headers=headers,
        tablefmt="github" if markdown else "simple",
        disable_numparse=True,  # cells are pre-formatted; keep "+3.0%" and "-" as written
        colalign=align,
    )


def _fitted(line: str) -> list[str]:
    """A line of the terminal format, wrapped to the tables' 120 columns."""
    return fit.wrap(line)


def _markdown_warnings(differences: list[tuple[str, Sequence[str]]]) -> list[str]:
    lines = []
    for label, diffs in differences:
        if not diffs:
            continue
        what = f" ({cell_text(label, True)})" if label else ""
        lines.append(f"> **Warning**: the runs come from different environments{what}:")
        lines += [f"> - {cell_text(d, True)}" for d in diffs]
        lines.append("")
    return lines


def _markdown_summary(comparison: Comparison) -> str:
    text = summary_line(comparison)
    if comparison.regressions:
        first, rest = text.split(", ", 1)
        text = f"**{first}**, {rest}"
    return text


def _verdict_cell(v: Verdict, markdown: bool) -> str:
    if markdown and v.kind == "regression":
        return "**regression**"
    return vocabulary.label(v.kind)


def _detectable(v: Verdict) -> str:
    if v.detectable is None:
        return ""
    text = "inf" if math.isinf(v.detectable) else f"{v.detectable * 100:.1f}%"
    # A single stored run only shows the noise inside the runs: a floor.
    return f">={text}" if v.z is None else text


def cell_text(value: Any, markdown: bool) -> str:
    """A value safe to print in a table's cell: no control characters, and in markdown no
    pipe that would split the cell."""
    text = printable(value)
    if markdown:
        text = text.replace("\\", "\\\\").replace("|", "\\|")
    return text


def _us(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e6:,.2f}"


def _pct(change: float | None) -> str:
    if change is None:
        return ""
    if math.isnan(change):
        return "n/a"
    if math.isinf(change):
        return "+inf%" if change > 0 else "-inf%"
    return f"{change * 100:+.1f}%"


def _p(p_value: float | None) -> str:
    return "" if p_value is None else f"{p_value:.2g}"


def _raw(value: float | None) -> str:
    return "" if value is None else repr(value)


def _raw_us(seconds: float | None) -> str:
    return "" if seconds is None else repr(seconds * 1e6)


def _raw_pct(change: float | None) -> str:
    return "" if change is None else repr(change * 100)


def _finite(value: float | None) -> float | None:
    # JSON has no inf/nan; a change from a zero-time baseline is reported as null.
    if value is None or not math.isfinite(value):
        return None
    return value


def _csv(headers: list[str], rows: list[list[Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(headers)
    writer.writerows(rows)
    return out.getvalue()


def _json_dump(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, allow_nan=False) + "\n"
