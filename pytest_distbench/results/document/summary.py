"""What a record derives from its per-rank samples: the one summary of them, made where a
record is built (harness/controller/records.py) and where A/B rounds are merged
(harness/controller/points.py)."""

from __future__ import annotations

from typing import Any

from ..statistics import interval, stats
from .record import Record


def summary_of(record: Record, rank_samples: list[list[float]]) -> dict[str, Any]:
    """What a record derives from its per-rank samples, for its maker to place (an iteration
    lasts as long as its slowest rank): samples, summary, its p50's 95 % interval, bandwidths, skew,
    stalls. A rank whose list is empty took no part (record["timed_ranks"]) and is left out of
    every figure. A call that moves no data (record["moves_no_data"]) has no bandwidth: its
    bytes over its time would be a rate of nothing (one rank's in-place all_reduce printed
    5,099,682 GB/s on an H200)."""
    timed = [s for s in rank_samples if s]
    samples = stats.per_iteration_max(timed)
    summary = stats.summarize(samples)
    nbytes = None if record.get("moves_no_data") else record.get("nbytes")
    algbw = stats.algbw_gbps(nbytes, summary.p50) if nbytes and summary.p50 > 0 else None
    return dict(
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
