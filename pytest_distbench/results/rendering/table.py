"""End-of-session result tables in the style of nccl-tests: one per (family, backend, world)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tabulate import tabulate

from ... import registry, units
from . import ci, fit
from .plot_spec import significant

GroupKey = tuple[str, str, int, str, str]  # family, backend, world size, device, placement


def grouped(records: Iterable[dict[str, Any]]) -> list[tuple[GroupKey, list[dict[str, Any]]]]:
    """Records by table (family, backend, world size, device, placement), in first-seen order,
    each table's rows by size."""
    groups: dict[GroupKey, list[dict[str, Any]]] = {}
    for record in records:
        if record.get("invalid"):  # broke a sanity rule: kept in the file, never a figure
            continue
        key = (record["family"], record["backend"], record["world_size"], record["device"],
               record.get("placement") or "")
        groups.setdefault(key, []).append(record)
    for rows in groups.values():
        rows.sort(key=lambda r: (r["nbytes"] is None, r["nbytes"] or 0, r["id"]))
    return list(groups.items())


# Placements worth a word in a table's title: absolute times depend on them (docs/gating.md).
_PLACEMENT_NOTES = {"pack": "ranks packed on one CPU", "none": "ranks unpinned"}


def placement_note(placement: str) -> str | None:
    """What a table's title says of its placement, or None for the usual ones."""
    return _PLACEMENT_NOTES.get(placement)


# What the nccl-tests style table's headline is; every table's title says its own.
HEADLINE = "time: p50 of the slowest rank per iteration ± 95 % CI"


def headline(family: str) -> str | None:
    """The headline statistic a family's table shows (its title says it); None when its
    own style headlines no statistic."""
    if registry.table_style(family) is None:
        return HEADLINE
    return registry.table_headline(family)


def title(family: str, backend: str, world_size: int, device: str, placement: str,
          timing: str | None = None) -> str:
    """`# all_reduce  backend=gloo  ranks=2  device=cpu  | time: p50 of ...`"""
    text = f"# {family}  backend={backend}  ranks={world_size}  device={device}"
    note = placement_note(placement)
    if note:
        text += f"  ({note})"
    if timing:
        text += f"  ({timing})"
    said = headline(family)
    return text + (f"  | {said}" if said else "")


def render_tables(records: Iterable[dict[str, Any]], *, memory: bool = False,
                  details: bool = False) -> str:
    """Every group's table; `memory` (--distbench-gpu-memory) adds the host RSS and GPU
    memory columns to every table, not only to those of pressured runs; `details` (-v) adds
    the detail block a family registered (the agent/observer seed's own format)."""
    blocks = []
    for (family, backend, world_size, device, placement), rows in grouped(records):
        title_line = title(family, backend, world_size, device, placement, timing_note(rows))
        # A family with a table style of its own (OSU, arras, ...) uses it; the rest print
        # nccl-tests style.
        style = registry.table_style(family)
        text = style(rows) if style else render_group(rows, memory=memory)
        detail = registry.table_details(family) if details else None
        if detail is not None:
            text += "\n" + detail(rows)
        if (memory or _pressured(rows)) and RSS_HEADER not in text:
            # A family style without the column still shows the memory pressure left behind.
            text += "".join(f"\n# {RSS_HEADER} {r['name']}: {peak_rss_cell(r)}" for r in rows)
        if memory and GPU_HEADERS[0] not in text:
            text += "".join(f"\n# {header} {r['name']}: {_mib_cell(r, key)}" for r in rows
                            for header, key in zip(GPU_HEADERS, GPU_FIELDS, strict=True))
        blocks.append(fit.wrap_text(title_line + "\n" + text))
    return "\n\n".join(blocks)


# What a table's title says of how its samples were taken, when not by the host clock around
# each call (record["timing"], docs/gpu.md).
_TIMING_NOTES = {
    "cuda-each": "timing=cuda-each: host clock, device synchronized after every call "
                 "(launch and synchronization included)",
    "cuda-batch": "timing=cuda-batch: CUDA events around {batch} back-to-back iterations per "
                  "sample",
    "cuda-graph": "timing=cuda-graph: CUDA events around a graph replay of {batch} iterations "
                  "per sample",
}


def timing_note(rows: list[dict[str, Any]]) -> str | None:
    """The title's word on timing: None for host timing (every CPU table until now)."""
    timings = sorted({r.get("timing") for r in rows} & set(_TIMING_NOTES))
    if not timings:
        return None
    if len(timings) > 1:
        return f"timing={'/'.join(timings)}: mixed, see each record's timing"
    batches = sorted({r["batch_iterations"] for r in rows if r.get("batch_iterations")})
    if not batches:
        batch = "?"
    elif len(batches) == 1:
        batch = str(batches[0])
    else:  # auto batch sizes differ with the message size
        batch = f"{batches[0]}-{batches[-1]}"
    return _TIMING_NOTES[timings[0]].format(batch=batch)


RSS_HEADER = "peak RSS/rank (MiB)"
GPU_HEADERS = ("GPU peak alloc/rank (MiB)", "GPU peak reserved/rank (MiB)")
GPU_FIELDS = ("peak_gpu_allocated_bytes", "peak_gpu_reserved_bytes")


def _pressured(rows: list[dict[str, Any]]) -> bool:
    return any(r.get("pressure") for r in rows)


def peak_rss_cell(record: dict[str, Any]) -> str:
    """Each rank's peak RSS during the test in MiB, rank 0 first: "412/1438/1437"."""
    return _mib_cell(record, "peak_rss_bytes")


def _mib_cell(record: dict[str, Any], key: str) -> str:
    peaks = record.get(key)
    if not peaks:
        return "-"
    return "/".join(f"{p / 2**20:.0f}" for p in peaks)


def render_group(rows: list[dict[str, Any]], tablefmt: str = "simple", *,
                 memory: bool = False) -> str:
    """The nccl-tests style table of one group's rows."""
    with_bytes = [r for r in rows if r["nbytes"] is not None]
    table = []
    for r in rows:
        s = r["summary"]
        table.append(
            [
                _size(r["nbytes"]),
                r["count"] if r["count"] is not None else "-",
                r["dtype"] or "-",
                ci.with_pct(units.format_duration_us(s["p50"]), ci.p50_pct(r), r),
                units.format_duration_us(s["mean"]),
                units.format_duration_us(s["p95"]),
                bandwidth_cell(r["algbw_gbps"]),
                bandwidth_cell(r["busbw_gbps"]),
                r["wrong"] if r["wrong"] is not None else "N/A",
                f"{r['skew']:.2f}x",
                f"{r['stalls']}/{r['iterations']}",
            ]
        )
    headers = [
        "size", "count", "type", P50_HEADER, MEAN_HEADER, "p95 (us)", "algbw", "busbw",
        "#wrong", "skew", "stalls",
    ]
    if memory or _pressured(rows):  # memory is worth a column when asked or pressured
        headers.append(RSS_HEADER)
        for line, r in zip(table, rows, strict=True):
            line.append(peak_rss_cell(r))
    if memory:
        headers.extend(GPU_HEADERS)
        for line, r in zip(table, rows, strict=True):
            line.extend(_mib_cell(r, key) for key in GPU_FIELDS)
    if tablefmt == "simple":  # a terminal's: headers wrap to fit (markdown renders its own)
        text = fit.table(table, headers, colalign=("right",) * len(headers))
    else:
        text = tabulate(table, headers=headers, tablefmt=tablefmt, disable_numparse=True,
                        colalign=("right",) * len(headers))
    if with_bytes:
        average = sum(r["busbw_gbps"] for r in with_bytes) / len(with_bytes)
        text += f"\n# Avg bus bandwidth: {bandwidth_cell(average)} (decimal, from p50)"
    if any(ci.short_of_target(r) for r in rows):
        text += f"\n# {ci.SHORT_NOTE}"
    text += "".join(f"\n# {note}" for note in merged_size_notes(rows))
    return text


P50_HEADER = "p50 (us) ± 95% CI"
MEAN_HEADER = "mean (us) nccl-tests/PARAM"


def merged_size_notes(rows: list[dict[str, Any]]) -> list[str]:
    """One note per row that stands for several requested sizes (measured once)."""
    notes = []
    for r in rows:
        requested = r.get("requested_nbytes") or []
        if len(requested) > 1 and r["nbytes"] is not None:
            sizes = ", ".join(units.format_size(n) for n in requested)
            notes.append(f"requested sizes {sizes} all move {_size(r['nbytes'])} at "
                         f"{r['world_size']} ranks: measured once, shown once")
    return notes


def _size(nbytes: int | None) -> str:
    if nbytes is None:
        return "-"
    text = units.format_size(nbytes)
    # A size rounded to fit the ranks (64 MiB - 4 B) must not print as a round 64 MiB.
    return text if units.parse_size(text.replace(" ", "")) == nbytes else f"{nbytes} B"


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


LEGEND = (
    "times are per iteration, slowest rank per iteration; headline = p50 ± half the 95 % "
    "confidence interval of the median (order statistics), in % of the p50; mean = what "
    "nccl-tests and PARAM comms print (stalls pull it up); bandwidths from the p50; "
    "GB/s = 1e9 bytes/s, MB/s = 1e6, KB/s = 1e3; skew = slowest rank p50 / median rank p50; "
    "stalls = iterations slower than 5x p50"
)
