"""The one place records are made: what every rank measured (`wire.Measurement`s, however
they travelled) merged into one Record per `distbench.measure()` call, summarised and checked.

A record leaves here with what its own run knows: samples, summary, figures, the run's own
sampling interval (`sampling_ci`) and, for a precision-targeted run, its stop; it becomes a
points.Run with what the controller judged of it (its broken sanity rules, its share of the
peak), never written to again. Its printed interval (`p50_ci`, a rate's `figures.*_ci_*`) and
`precision.achieved/met` are placed by points.record_of.
"""

from __future__ import annotations

from typing import Any

import pytest

from ... import registry
from ...registry import completed_figures
from ...results import peaks, sanity
from ...results.document.record import Pressure, Record
from ...results.document.schema import RecordError, check_record
from ...results.document.session_intervals import stratum_of
from ...results.document.summary import summary_of
from ...settings import Settings, of_session
from ..environment.physical import gpu_names, machine_bounds, refined_bounds
from ..wire import Measurement, PrecisionStop
from .points import Point, Run

# The sizes a test stands for where they are not what it measured: several merged into one,
# or one that the test turns into another (collection.merge_equal_sizes); absent: its own.
REQUESTED_KEY = pytest.StashKey[list[int]]()


def points_of_run(item: pytest.Function, key: Any, per_rank: list[list[Measurement]],
                  settings: Settings, live_reports: dict[str | None, list[Any]],
                  one_host: bool) -> tuple[list[Point], str]:
    """One run's points, one per measure() call: its record merged from every rank, held to
    the physical sanity rules, its share of the peak, what the test printed live, the sizes
    it stands for; and the text of the rules broken ("" if none)."""
    records = build_records(item, key, per_rank, settings)
    invalid = [violations(record) for record in records]
    declared = of_session(item.config).peak_busbw or {}
    bounds, gpus = machine_bounds(), gpu_names()  # as the checks above left them
    requested = item.stash.get(REQUESTED_KEY, None) or None
    points = []
    for record, broken, measurement in zip(records, invalid, per_rank[0], strict=True):
        run = Run(record, broken, peaks.share(record, broken, declared, bounds, gpus, one_host),
                  key.variant)
        # Its stratum (the revisits pool its noise there): only a run with a figure has one.
        family = registry.family_of(record["family"]) or record["family"]
        points.append(Point(record["id"], run,
                            live_reports=live_reports.get(measurement.name) or None,
                            requested_nbytes=requested, stratum="" if run.figure is None
                            else stratum_of(record, settings, family)))
    return points, invalid_text(records, invalid)


def violations(record: Record) -> tuple[str, ...]:
    """The physical sanity rules `record` breaks: a record that breaks one is `invalid`
    (kept in the results file, never shown as a figure)."""
    broken = sanity.violations(record, machine_bounds())
    if broken and sanity.violations(record) != broken:  # a machine limit broken: confirm it
        broken = sanity.violations(record, refined_bounds())
    return tuple(broken)


def invalid_text(records: list[Record], invalid: list[tuple[str, ...]]) -> str:
    """The failure text of the records' broken rules, or ""."""
    lines = [f"{record['name']}: " + "; ".join(broken)
             for record, broken in zip(records, invalid, strict=True) if broken]
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
        "headline_statistic": first.headline_statistic,
        "stopped_at_sample_cap": first.stopped_at_sample_cap,
        "batch_iterations": first.batch_iterations,
        "peak_gpu_allocated_bytes": _per_rank(m.peak_gpu_allocated_bytes for m in ms),
        "peak_gpu_reserved_bytes": _per_rank(m.peak_gpu_reserved_bytes for m in ms),
    }  # samples and summary, which every Record has, are added by summary_of below
    if first.incomplete:
        record["incomplete"] = first.incomplete
    timed = [r for r, m in enumerate(ms) if m.timed]
    if len(timed) < len(ms):
        record["timed_ranks"] = timed
    if all(m.elapsed_s is not None for m in ms):
        record["elapsed_s"] = [m.elapsed_s if m.timed else None for m in ms]
    # An untimed rank's samples are an empty list: its loop is no figure of anything.
    record.update(summary_of(record, [m.samples if m.timed else [] for m in ms]))
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
