"""Figures of a test as JUnit properties (`--junitxml`) and its headline for the `-v` line.

Both come from the test's records; pytest copies `item.user_properties` to the report, and
junitxml writes each pair as a `<property name= value=>` of the testcase.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from . import ci

Property = tuple[str, Any]


def record_properties(record: Mapping[str, Any], verdict: Any = None,
                      prefix: str = "") -> list[Property]:
    """p50_us, p95_us, algbw_gbps, busbw_gbps, the family's figures, and the gate's verdict."""
    props: list[Property] = [("family", record.get("family"))]
    incomplete = record.get("incomplete")
    if incomplete:  # its samples are only the bound: no figure
        props.append(("incomplete", f"{ci.incomplete_text(record)}: {incomplete['reason']}"))
    else:
        props += _figure_properties(record, verdict)
    return [(prefix + name, value) for name, value in props if value is not None]


def _figure_properties(record: Mapping[str, Any], verdict: Any) -> list[Property]:
    summary = record.get("summary") or {}
    props: list[Property] = []
    for q in ("p50", "p95"):
        if _finite(summary.get(q)):
            props.append((f"{q}_us", round(summary[q] * 1e6, 6)))
    props += _p50_ci(record)
    for key in ("algbw_gbps", "busbw_gbps"):
        if _finite(record.get(key)):
            props.append((key, _round(record[key])))
    if record.get("nbytes") is not None:
        props.append(("nbytes", record["nbytes"]))
    if record.get("requested_nbytes"):
        props.append(("requested_nbytes", ",".join(map(str, record["requested_nbytes"]))))
    props.append(("iterations", record.get("iterations")))
    props += _flatten(_shown_figures(record), "")
    if verdict is not None:
        props.append(("verdict", verdict.kind))
        if _finite(verdict.change):
            props.append(("change_pct", round(verdict.change * 100, 3)))
        if _finite(verdict.p_value):
            props.append(("p_value", float(f"{verdict.p_value:.3g}")))
        if _finite(getattr(verdict, "level", None)):  # the p-value's share of the family
            props.append(("level", float(f"{verdict.level:.3g}")))
    return props


def _shown_figures(record: Mapping[str, Any]) -> dict[str, Any]:
    """The figures' properties as JUnit has always named them: a rate's printed interval
    (`rate_ci`) under its figures' interval names, the run's own as `sampling_rate_ci`, and
    what the record says of its headline statistic and a stop at the sample cap."""
    figures = dict(record.get("figures") or {})
    rate = record.get("rate_ci")
    if isinstance(rate, dict):
        figures["sampling_rate_ci"] = {"low": figures.get("msgs_per_s_ci_low"),
                                       "high": figures.get("msgs_per_s_ci_high"),
                                       "pct": figures.get("rate_ci_pct")}
        figures.update(msgs_per_s_ci_low=rate.get("low"), msgs_per_s_ci_high=rate.get("high"),
                       mbps_ci_low=rate.get("mbps_low"), mbps_ci_high=rate.get("mbps_high"),
                       rate_ci_pct=rate.get("half_width_pct"))
    if record.get("headline_statistic", "p50") != "p50":
        figures["headline_statistic"] = record["headline_statistic"]
    if record.get("stopped_at_sample_cap"):
        figures["stopped_at_sample_cap"] = True
    return figures


def _p50_ci(record: Mapping[str, Any]) -> list[Property]:
    """p50_ci_low_us, p50_ci_high_us, p50_ci_pct: the p50's 95 % interval (none: too few
    samples for one)."""
    bounds = ci.p50_bounds(dict(record))
    note = ci.basis_note(dict(record))
    if bounds is None:
        return [("p50_ci", ci.missing_reason(record))]
    return [("p50_ci_low_us", round(bounds[0] * 1e6, 6)),
            ("p50_ci_high_us", round(bounds[1] * 1e6, 6)),
            ("p50_ci_pct", _round(ci.p50_pct(dict(record)) or 0.0)),
            *([("p50_ci_basis", note)] if note else [])]


def properties(records: Sequence[Mapping[str, Any]],
               verdicts: Mapping[str, Any] | None = None) -> list[Property]:
    """Every record's properties; a test with several measurements prefixes each by its name."""
    verdicts = verdicts or {}
    out: list[Property] = []
    for record in records:
        name = str(record.get("name", ""))
        measurement = name.split("::", 1)[1] if "::" in name else ""
        prefix = f"{measurement}." if len(records) > 1 and measurement else ""
        if len(records) > 1 and not prefix:
            prefix = f"{records.index(record)}."
        out += record_properties(record, verdicts.get(record.get("id")), prefix)
        if record.get("id") in verdicts and verdicts[record.get("id")] is None:
            out.append((f"{prefix}verdict", "new"))  # gating, but not in the baseline
    return out


def _flatten(figures: Mapping[str, Any], prefix: str) -> list[Property]:
    out: list[Property] = []
    for key, value in figures.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out += _flatten(value, f"{name}.")
        elif isinstance(value, bool) or isinstance(value, (int, str)):
            out.append((name, value))
        elif isinstance(value, float) and math.isfinite(value):
            out.append((name, _round(value)))
        # lists (per-rank figures) stay in the results file: a property holds one value
    return out


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(
        value)


def _round(value: float) -> float:
    return float(f"{value:.6g}")
