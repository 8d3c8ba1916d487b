"""The one place records are made: what every rank measured (`wire.Measurement`s, however
they travelled) merged into one Record per `distbench.measure()` call, summarised and checked.

A record leaves here with what its own run knows: samples, summary, figures, the run's own
sampling interval (`sampling_ci`) and, for a precision-targeted run, its stop. Its printed
interval (`p50_ci`, a rate's `figures.*_ci_*`) and `precision.achieved/met` are written once,
at the end of the test loop, by results/document/session_intervals.seal.
"""

from __future__ import annotations

from typing import Any

import pytest

from ... import registry
from ...registry import completed_figures
from ...results import peaks, sanity
from ...results.document.record import Pressure, Record
from ...results.document.schema import RecordError, check_record
from ...results.statistics import interval, stats
from ...settings import Settings, of_session
from ..environment.physical import gpu_names, machine_bounds, refined_bounds
from ..wire import Measurement, PrecisionStop


def records_of_run(item: pytest.Function, key: Any, per_rank: list[list[Measurement]],
                   settings: Settings, live_reports: dict[str | None, list[Any]],
                   one_host: bool) -> tuple[list[Record], str]:
    """One run's records, whole: merged from every rank, what the test printed live, held to
    the physical sanity rules, their share of the peak; and the text of the rules broken
    ("" if none)."""
    records = build_records(item, key, per_rank, settings)
    for record, measurement in zip(records, per_rank[0], strict=True):
        reports = live_reports.get(measurement.name)
        if reports:
            record["live_reports"] = reports
    broken = mark_invalid(records)
    add_peaks(of_session(item.config).peak_busbw or {}, records, one_host)
    return records, broken


def add_peaks(declared: dict[str, float], records: list[Record], one_host: bool) -> None:
    """Each valid record's bandwidth as a share of its peak (results/peaks.py): the declared
    one, else measured here, else published for its GPU (`one_host`: worlds on one host
    only). Only records of nccl-tests style tables, whose legend names the peak (a family's
    own style shows its own figures)."""
    for record in records:
        if (not record.get("invalid") and not record.get("incomplete")
                and registry.table_style(record["family"]) is None):
            peak = peaks.peak_for(record, declared, machine_bounds(), gpu_names(), one_host)
            record["of_peak"] = peaks.of_peak(record, peak)


def mark_invalid(records: list[Record]) -> str:
    """Hold every record to the physical sanity rules; a record that breaks one is marked
    `invalid` (kept in the results file, never shown as a figure). The failure text, or ""."""
    lines = []
    for record in records:
        broken = sanity.violations(record, machine_bounds())
        if broken and sanity.violations(record) != broken:  # a machine limit broken: confirm it
            broken = sanity.violations(record, refined_bounds())
        if broken:
            record["invalid"] = broken
            lines.append(f"{record['name']}: " + "; ".join(broken))
    if not lines:
        return ""
    return ("a figure that is physically impossible is not printed (kept in the results file "
            "marked invalid):\n" + "\n".join(lines))




def _pressure_record(ms: list[Measurement]) -> Pressure | None:
    """The record's `pressure`: what ran, in which ranks, and their environment if asked."""
    pressured = [(r, m.pressure) for r, m in enumerate(ms) if m.pressure is not None]
    if not pressured:
        return None
    first = dict(pressured[0][1])
    first.pop("env", None)
    out: Pressure = {"ranks": [r for r, _ in pressured], **first}
    out["log_lines_written"] = sum(p.get("log_lines_written", 0) for _, p in pressured)
    envs = {str(r): p["env"] for r, p in pressured if "env" in p}
    if envs:
        out["env"] = envs
    return out


def _per_rank(values: Any) -> list[int] | None:
    """One value per rank, or None where any rank has none (a CPU world's GPU memory, a
    platform without an RSS reading)."""
    values = list(values)
    return None if any(v is None for v in values) else values


def build_records(
    item: pytest.Function, key: Any, per_rank: list[list[Measurement]], settings: Settings
) -> list[Record]:
    """Merge what every rank measured (`per_rank`, rank 0 first) into one record per
    measure() call."""
    shapes = {tuple((m.name, len(m.samples)) for m in ms) for ms in per_rank}
    if len(shapes) != 1:
        pytest.fail(
            "the ranks made different distbench.measure() calls (names and iteration counts "
            f"per rank: {[[(m.name, len(m.samples)) for m in ms] for ms in per_rank]}); "
            "every rank must measure the same things",
            pytrace=False,
        )
    callspec = getattr(item, "callspec", None)
    # storage turns values JSON cannot hold into their repr when the file is written.
    params = {
        k: v for k, v in (callspec.params.items() if callspec else ()) if not k.startswith(
            "distbench_")
    }
    marker = item.get_closest_marker("distbench")
    threshold = settings.threshold if marker and "threshold" in marker.kwargs else None
    records = []
    for index in range(len(per_rank[0])):
        record = record_of(item, key, [per_rank[r][index] for r in range(key.world_size)],
                           params, threshold)
        try:
            check_record(record)
        except RecordError as exc:  # a bad record fails its own test, naming the field
            pytest.fail(str(exc), pytrace=False)
        records.append(record)
    return records


def record_of(item: pytest.Function, key: Any, ms: list[Measurement], params: dict[str, Any],
              threshold: float | None) -> Record:
    """The one place a measurement, as every rank sent it (`wire.Measurement`, rank 0 first),
    becomes a Record. The keys' order is the order a results file shows them in."""
    first = ms[0]
    suffix = f"::{first.name}" if first.name else ""
    record: Record = {
        "id": item.nodeid + suffix,
        "name": item.name + suffix,
        "family": first.family or item.originalname,
        "backend": key.backend,
        "world_size": key.world_size,
        "device": key.device_type,
        "placement": key.bind,
        "params": params,
        "nbytes": first.nbytes,
        "count": first.count,
        "dtype": first.dtype,
        "busbw_factor": first.busbw_factor,
        "moves_no_data": first.moves_no_data,
        "warmup": first.warmup,
        "wrong": None if first.wrong is None else sum(m.wrong or 0 for m in ms),
        "threshold": threshold,
        "figures": first.figures,
        "peak_rss_bytes": _per_rank(m.peak_rss_bytes for m in ms),
        "duration_s": first.duration_s,
        "pressure": _pressure_record(ms),
        "timing": first.timing,
        "batch_iterations": first.batch_iterations,
        "peak_gpu_allocated_bytes": _per_rank(m.peak_gpu_allocated_bytes for m in ms),
        "peak_gpu_reserved_bytes": _per_rank(m.peak_gpu_reserved_bytes for m in ms),
    }  # samples and summary, which every Record has, are added by summarize_record below
    if first.incomplete:
        record["incomplete"] = first.incomplete
    timed = [r for r, m in enumerate(ms) if m.timed]
    if len(timed) < len(ms):
        record["timed_ranks"] = timed
    if all(m.elapsed_s is not None for m in ms):
        record["elapsed_s"] = [m.elapsed_s if m.timed else None for m in ms]
    # An untimed rank's samples are an empty list: its loop is no figure of anything.
    summarize_record(record, [m.samples if m.timed else [] for m in ms])
    record["figures"] = completed_figures(record)
    _precision_record(record, first.stop)
    return record


def _precision_record(record: Record, stop: PrecisionStop | None) -> None:
    """record["precision"] of a precision-targeted run: the target, what stopped the run and
    what its own sampling interval achieved. `achieved` and `met` judge the printed interval,
    which only the end of the test loop knows: session_intervals.seal writes them."""
    if stop is None:
        return
    if stop.statistic == "mean":
        pct = (record.get("figures") or {}).get("rate_ci_pct")
    else:
        pct = (record.get("sampling_ci") or {}).get("half_width_pct")
    record["precision"] = {"target": stop.target, "statistic": stop.statistic,
                           "stopped_by": stop.stopped_by,
                           "sampling_achieved": None if pct is None else pct / 100}


def summarize_record(record: Record, rank_samples: list[list[float]]) -> None:
    """Fill in what a record derives from its per-rank samples (an iteration lasts as long
    as its slowest rank): samples, summary, its p50's 95 % interval, bandwidths, skew,
    stalls. A rank whose list is empty took no part (record["timed_ranks"]) and is left out of
    every figure. A call that moves no data (record["moves_no_data"]) has no bandwidth: its
    bytes over its time would be a rate of nothing (one rank's in-place all_reduce printed
    5,099,682 GB/s on an H200)."""
    timed = [s for s in rank_samples if s]
    samples = stats.per_iteration_max(timed)
    summary = stats.summarize(samples)
    nbytes = None if record.get("moves_no_data") else record.get("nbytes")
    algbw = stats.algbw_gbps(nbytes, summary.p50) if nbytes and summary.p50 > 0 else None
    record.update(
        iterations=len(samples),
        samples=samples,
        rank_samples=rank_samples,
        summary=summary.as_dict(),
        sampling_ci=interval.p50_interval(samples, summary.p50),
        algbw_gbps=algbw,
        busbw_gbps=None if algbw is None else stats.busbw_gbps(algbw, record["busbw_factor"]),
        skew=stats.rank_skew(timed),
        stalls=stats.stall_count(samples),
    )
