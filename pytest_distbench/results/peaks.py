"""Each bandwidth as a share of a named peak: is this busbw normal for this machine?

The question users of nccl-tests ask most (its issues 212, 272, 293, 366). A record's peak comes,
first found first, from:

1. the user: `--distbench-peak-busbw=nccl:370,gloo:8` (ini `distbench_peak_busbw`), a bus
   bandwidth per backend, compared with busbw;
2. a measurement (the sanity rules' bounds), on a GPU only: in a world of one rank, its
   device-to-device copy, compared with algbw (busbw is 0 at one rank, and an out-of-place
   collective at one rank is a copy of its bytes). A host's memory copy is no peak: on a
   shared VM it read 4.5 GB/s in one session and 81 GB/s in another, so a CPU world's share
   is against a declared peak or not printed;
3. a published figure for the GPU (PUBLISHED, by its name), for worlds of several GPUs on one
   machine: NVLink's bandwidth per direction, compared with busbw.

No peak found: the record has no share, and the table's legend says how to declare one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .. import registry
from .document.record import OfPeak, Record
from .sanity import MachineBounds

# A record's share where no peak applies: its family's own table style prints its own figures
# (only the nccl-tests style's legend names the peak).
NOT_JUDGED = "not judged"

OPTION = "--distbench-peak-busbw"
# What a declared peak may be, in decimal GB/s: 1 MB/s (a slow link) to 100 TB/s (some 100
# times NVLink 5), so that a share of it is a number a table prints in a few digits (1e-320
# made every share infinite, and every record unfit for the results file).
MIN_DECLARED_GBPS, MAX_DECLARED_GBPS = 1e-3, 1e5

# GPU name (as torch.cuda.get_device_properties names it) -> NVLink bandwidth per direction of
# one GPU, decimal GB/s, and where that figure is published. nccl-tests' busbw of a ring over
# NVLink approaches it (nccl-tests PERFORMANCE.md: busbw "should be close to the hardware peak";
# its issue 212: ring all_reduce about 370 GB/s on 8 H100s).
PUBLISHED: dict[str, tuple[float, str]] = {
    # NVIDIA H200 datasheet: NVLink 900 GB/s (both directions) per GPU, NVLink 4.
    "NVIDIA H200": (450.0, "NVLink 4 per direction, NVIDIA H200 datasheet"),
    # NVIDIA H100 datasheet, SXM5: NVLink 900 GB/s per GPU (the PCIe card is not NVLink 4).
    "NVIDIA H100 80GB HBM3": (450.0, "NVLink 4 per direction, NVIDIA H100 SXM datasheet"),
    # NVIDIA A100 datasheet, SXM4: NVLink 600 GB/s per GPU, NVLink 3.
    "NVIDIA A100-SXM4-80GB": (300.0, "NVLink 3 per direction, NVIDIA A100 SXM datasheet"),
    "NVIDIA A100-SXM4-40GB": (300.0, "NVLink 3 per direction, NVIDIA A100 SXM datasheet"),
}


@dataclass(frozen=True)
class Peak:
    """A peak and which of a record's bandwidths it is compared with."""

    gbps: float
    bandwidth: str  # "busbw" or "algbw"
    source: str


def parse_declared(text: str, backends: Sequence[str]) -> dict[str, float]:
    """`nccl:370,gloo:8` (GB/s per backend, each one of `backends` once) or `370` (every
    backend) -> {backend or "*": GB/s}."""
    declared: dict[str, float] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        backend, _, value = item.rpartition(":")
        backend = backend.strip().lower() or "*"
        try:
            gbps = float(value.strip().removesuffix("GB/s").strip())
        except ValueError:
            raise ValueError(f"invalid peak {item!r}: expected BACKEND:GB/s, e.g. nccl:370, "
                             "or GB/s alone for every backend") from None
        if not (math.isfinite(gbps) and MIN_DECLARED_GBPS <= gbps <= MAX_DECLARED_GBPS):
            raise ValueError(f"invalid peak {item!r}: a bus bandwidth in GB/s from "
                             f"{MIN_DECLARED_GBPS:g} to {MAX_DECLARED_GBPS:g}")
        if backend != "*" and backend not in backends:
            raise ValueError(f"invalid peak {item!r}: unknown backend {backend!r}, expected "
                             f"one of {', '.join(backends)}")
        if backend in declared:
            raise ValueError(f"invalid peak {item!r}: "
                             + ("a peak for every backend" if backend == "*" else
                                f"backend {backend}") + " given twice")
        declared[backend] = gbps
    if not declared:
        raise ValueError("expected BACKEND:GB/s, e.g. nccl:370,gloo:8")
    return declared


def share(record: Record, invalid: Sequence[str], declared: Mapping[str, float],
          bounds: MachineBounds, gpus: Sequence[str], one_host: bool) -> OfPeak | None | str:
    """A valid record's bandwidth as a share of its peak (peak_for, of_peak; `invalid`: the
    sanity rules it broke), or NOT_JUDGED for a record that is invalid, incomplete or of a
    family's own table style."""
    if invalid or record.get("incomplete") or registry.table_style(record["family"]) is not None:
        return NOT_JUDGED
    return of_peak(record, peak_for(record, declared, bounds, gpus, one_host))


def peak_for(record: Record, declared: Mapping[str, float], bounds: MachineBounds,
             gpus: Sequence[str], one_host: bool) -> Peak | None:
    """The peak `record` is shown as a share of, or None (module docstring: the order)."""
    backend = record["backend"]
    value = declared.get(backend, declared.get("*"))
    if value is not None:
        return Peak(value, "busbw", f"declared ({OPTION}, {backend} busbw)")
    if record["device"] != "cuda":
        # A host's copy rate is no peak to hold a figure to: on a shared VM it moved from
        # 4.5 GB/s in one session to 81 GB/s in another. A CPU world's share is the user's
        # declared peak's or none (the legend says how to declare one).
        return None
    copy = bounds.device_copy_gbps  # HBM's copy rate holds from session to session
    if record["world_size"] == 1:  # busbw is 0: what one rank does is copy its bytes, or not
        return Peak(copy, "algbw", "measured: this GPU's device-to-device copy") if copy else None
    known = {PUBLISHED[name] for name in gpus if name in PUBLISHED}
    if one_host and len(known) == 1 and len(set(gpus)) == 1:
        gbps, source = known.pop()
        return Peak(gbps, "busbw", f"published: {gpus[0]}, {source}")
    return None


def of_peak(record: Record, peak: Peak | None) -> OfPeak | None:
    """The record's share of `peak` (None without a peak or without that bandwidth)."""
    if peak is None:
        return None
    value = record.get(f"{peak.bandwidth}_gbps")
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return {"pct": 100.0 * value / peak.gbps, "bandwidth": peak.bandwidth,
            "peak_gbps": peak.gbps, "source": peak.source}


def legend(rows: Sequence[Record]) -> str | None:
    """A table's line naming its peak (`% of peak = busbw / 450 GB/s: published ...`), or how
    to declare one where its rows have bandwidths but no peak; None for rows without any."""
    peaks = {(p["bandwidth"], p["peak_gbps"], p["source"]) for r in rows
             if (p := r.get("of_peak"))}
    if peaks:
        return "; ".join(f"% of peak = {bandwidth} / {_gbps(gbps)} ({source})"
                         for bandwidth, gbps, source in sorted(peaks))
    if not any(r.get("busbw_gbps") is not None for r in rows):
        return None
    backend, device = rows[0]["backend"], rows[0]["device"]
    why = (" (a host's copy rate moves too much between sessions to be one)"
           if device == "cpu" else "")
    return (f"% of peak: no peak known for {backend} on {device} at "
            f"{rows[0]['world_size']} ranks{why}; declare one with {OPTION}={backend}:GB/s "
            "(ini distbench_peak_busbw)")


def pct_cell(record: Record) -> str:
    """`88 %` (two significant digits below 10 %), or `-`."""
    share = record.get("of_peak")
    if not share:
        return "-"
    pct = share["pct"]
    return f"{pct:.2g} %" if pct < 10 else f"{pct:.0f} %"


def _gbps(value: float) -> str:
    return f"{value:.4g} GB/s"
