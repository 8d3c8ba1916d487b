"""End-of-session result tables in the style of nccl-tests: one per (family, backend, world)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tabulate import tabulate

from ... import registry, units
from ...units import size_cell
from .. import peaks
from ..document.record import Record
from . import ci, fit, names
from .plot_spec import bandwidth_cell

GroupKey = tuple[str, str, int, str, str]  # family, backend, world size, device, placement


def grouped(records: Iterable[Record]) -> list[tuple[GroupKey, list[Record]]]:
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


def render_tables(records: Iterable[Record], *, memory: bool = False,
                  details: bool = False) -> str:
    """Every group's table; `memory` (--distbench-gpu-memory) adds the host RSS and GPU
    memory columns to every table, not only to those of pressured runs; `details` (-v) adds
    the detail block a family registered (the agent/observer seed's own format)."""
    blocks = []
    for (family, backend, world_size, device, placement), rows in grouped(records):
        try:
            title_line = title(family, backend, world_size, device, placement,
                               timing_note(rows))
        except Exception as exc:  # noqa: BLE001 - the title's failure must not lose the rows
            title_line = f"# {family}  backend={backend}  ranks={world_size}: {_failed(exc)}"
        text = family_text(family, rows, memory=memory, details=details)
        if (memory or _pressured(rows)) and RSS_HEADER not in text:
            # A family style without the column still shows the memory pressure left behind.
            text += "".join(f"\n# {RSS_HEADER} {r['name']}: {peak_rss_cell(r)}" for r in rows)
        if memory and GPU_HEADERS[0] not in text:
            text += "".join(f"\n# {header} {r['name']}: {_mib_cell(r, key)}" for r in rows
                            for header, key in zip(GPU_HEADERS, GPU_FIELDS, strict=True))
        blocks.append(fit.wrap_text(title_line + "\n" + text))
    return "\n\n".join(blocks)


def family_text(family: str, rows: list[Record], tablefmt: str = "simple", *,
                memory: bool = False, details: bool = False) -> str:
    """One group's table: the family's own style (OSU, arras, ...) or nccl-tests style, and
    with `details` the detail block the family registered (the agent/observer seed's format).

    A renderer that fails on some row must not take the others down (nor the session's other
    tables, nor pytest-benchmark's, which print after ours): the rows are then drawn one at a
    time and a row that still fails is replaced by a line saying why.
    """
    style = registry.table_style(family)
    detail = registry.table_details(family) if details else None

    def draw(some: list[dict[str, Any]]) -> str:
        text = style(some) if style else render_group(some, tablefmt, memory=memory)
        return text + (f"\n{detail(some)}" if detail is not None else "")

    try:
        return draw(rows)
    except Exception:  # noqa: BLE001 - which row failed is found below, one row at a time
        pass
    parts = []
    for row in rows:
        try:
            parts.append(draw([row]))
        except Exception as exc:  # noqa: BLE001 - shown in the row's place
            parts.append(f"# {row.get('name', '?')}: {_failed(exc)}")
    return "\n".join(parts)


def _failed(exc: BaseException) -> str:
    first = (str(exc).splitlines() or [""])[0]
    return f"not shown, the table could not render it ({type(exc).__name__}: {first})"


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


def timing_note(rows: list[Record]) -> str | None:
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


def _pressured(rows: list[Record]) -> bool:
    return any(r.get("pressure") for r in rows)


def peak_rss_cell(record: Record) -> str:
    """Each rank's peak RSS during the test in MiB, rank 0 first: "412/1438/1437"."""
    return _mib_cell(record, "peak_rss_bytes")


def _mib_cell(record: Record, key: str) -> str:
    peaks = record.get(key)
    if not peaks:
        return "-"
    return "/".join(f"{p / 2**20:.0f}" for p in peaks)


def render_group(rows: list[Record], tablefmt: str = "simple", *,
                 memory: bool = False) -> str:
    """The nccl-tests style table of one group's rows."""
    # An incomplete row's samples are only its bound: no bandwidth to average.
    with_bytes = [r for r in rows if r.get("busbw_gbps") is not None
                  and not r.get("incomplete")]
    table = []
    for r in rows:
        s = r["summary"]
        incomplete = ci.incomplete_text(r)
        if incomplete:  # its samples are only the bound: no figure to show
            table.append([size_cell(r["nbytes"]), r["count"] if r["count"] is not None else "-",
                          r["dtype"] or "-", incomplete] + ["-"] * 7)
            continue
        table.append(
            [
                size_cell(r["nbytes"]),
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
    if any(r.get("of_peak") for r in rows):  # beside the bandwidths, where a peak is known
        at = headers.index("busbw") + 1
        headers.insert(at, PEAK_HEADER)
        for line, r in zip(table, rows, strict=True):
            line.insert(at, peaks.pct_cell(r))
    # Rows a size, count and type do not tell apart say whose they are.
    table, headers, align = names.name_column(rows, table, headers, _nccl_key,
                                              ("right",) * len(headers))
    if memory or _pressured(rows):  # memory is worth a column when asked or pressured
        headers.append(RSS_HEADER)
        for line, r in zip(table, rows, strict=True):
            line.append(peak_rss_cell(r))
    if memory:
        headers.extend(GPU_HEADERS)
        for line, r in zip(table, rows, strict=True):
            line.extend(_mib_cell(r, key) for key in GPU_FIELDS)
    align = (*align, *("right",) * (len(headers) - len(align)))
    if tablefmt == "simple":  # a terminal's: headers wrap to fit (markdown renders its own)
        text = fit.table(table, headers, colalign=align)
    else:
        text = tabulate(table, headers=headers, tablefmt=tablefmt, disable_numparse=True,
                        colalign=align)
    if with_bytes:
        average = sum(r["busbw_gbps"] for r in with_bytes) / len(with_bytes)
        text += f"\n# Avg bus bandwidth: {bandwidth_cell(average)} (decimal, from p50)"
    peak_line = peaks.legend(rows)
    if peak_line:
        text += f"\n# {peak_line}"
    text += "".join(f"\n# {note}" for note in no_data_notes(rows))
    if any(ci.short_of_target(r) for r in rows):
        text += f"\n# {ci.SHORT_NOTE}"
    text += "".join(f"\n# {note}" for note in merged_size_notes(rows))
    return text


def _nccl_key(record: Record) -> tuple[Any, ...]:
    """What the nccl-tests style table shows of a row besides its figures."""
    return record["nbytes"], record["count"], record["dtype"]


def no_data_notes(rows: list[Record]) -> list[str]:
    """What an algbw and busbw of `-` mean where a row's call moved no data."""
    reasons = sorted({str(r["moves_no_data"]) for r in rows if r.get("moves_no_data")})
    return [f"algbw/busbw - = no data moved ({reason}): a rate of nothing is no figure"
            for reason in reasons]


P50_HEADER = "p50 (us) ± 95% CI"
PEAK_HEADER = "% of peak"
# Breakable after its comma: one word "nccl-tests/PARAM" held every table of the main job
# at 8 ranks past 120 columns.
MEAN_HEADER = "mean (us) nccl-tests, PARAM"


# What a size cell is, said under a table whose rows were requested at another size.
SIZE_DEFINITION = ("size = the bytes measured: a requested size becomes whole elements of the "
                   "type, at least one per rank where each rank holds a share of the buffer")


def merged_size_notes(rows: list[Record]) -> list[str]:
    """One note per row that stands for several requested sizes (measured once) or for a
    requested size other than the one it shows, and then what the size column is."""
    notes = []
    for r in rows:
        requested = r.get("requested_nbytes") or []
        if r["nbytes"] is None or requested in ([], [r["nbytes"]]):
            continue
        if len(requested) > 1:
            sizes = ", ".join(size_cell(n) for n in requested)
            notes.append(f"requested sizes {sizes} all move {size_cell(r['nbytes'])} at "
                         f"{r['world_size']} ranks: measured once, shown once")
        else:
            notes.append(f"requested size {size_cell(requested[0])} moves "
                         f"{size_cell(r['nbytes'])} at {r['world_size']} ranks: the row shows "
                         "what was measured")
    return notes + [SIZE_DEFINITION] * bool(notes)


LEGEND = (
    "times are per iteration, slowest rank per iteration; headline = p50 ± half the 95 % "
    "interval of the point's value in this session ({interval}), in % of the p50; mean = what "
    "nccl-tests and PARAM comms print (stalls pull it up); bandwidths from the p50; "
    "GB/s = 1e9 bytes/s, MB/s = 1e6, KB/s = 1e3; skew = slowest rank p50 / median rank p50; "
    "stalls = iterations slower than 5x p50"
)
WIDENED = "the run's sampling interval widened by the run-to-run noise measured below"
OWN_ONLY = "the run's own sampling interval: no run-to-run noise was measured, see below"


def legend(records: Iterable[Record]) -> str:
    """The legend over the tables: it promises run-to-run noise only where some row carries
    it (not with --distbench-revisits=0, under a launcher, or where no point ran twice)."""
    widened = any(isinstance((r.get("p50_ci") or {}).get("run_noise"), dict) for r in records)
    return LEGEND.format(interval=WIDENED if widened else OWN_ONLY)
