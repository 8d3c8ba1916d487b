"""A replay's time broken down by operation kind, group size and size bucket (no torch).

The ranks time every call from its issue to the end of its wait (step.py) and hand in, per
call, its op, group size, bytes (nccl-tests' size: trace.Call.nbytes) and mean seconds per
replay; `aggregate` turns them into the table's rows, the same in every rank.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from .trace import bus_factor

BUCKET_BASE = 4  # size buckets are powers of 4 bytes: [4^k, 4^(k+1))
# torch's calls that write their result over their input: in a group of one rank they move
# no data, and their bytes over their time would be a rate of nothing (issue 41: a DDP step
# on one H200 printed broadcast busbw 1,140 GB/s).
IN_PLACE = ("all_reduce", "broadcast", "reduce")


class Timed(NamedTuple):
    """One call of one rank: what it moved, and how long it took per replay."""

    op: str
    group_size: int
    nbytes: int
    seconds: float


def bucket(nbytes: int) -> int:
    """The lower bound of the size bucket of `nbytes`: 0 for 0 B, else the largest power of
    BUCKET_BASE not above it."""
    if nbytes < 0:
        raise ValueError(f"a size is not negative, got {nbytes}")
    if nbytes == 0:
        return 0
    low = 1
    while low * BUCKET_BASE <= nbytes:
        low *= BUCKET_BASE
    return low


def aggregate(calls: Iterable[Timed]) -> list[dict[str, Any]]:
    """Rows (op, group_size, bucket): calls, bytes and seconds summed over `calls`, the rows'
    share of all their seconds, and algbw/busbw in decimal GB/s (None where no time or no
    bytes: a barrier; or no data moved: an in-place call in a group of one). Ordered by op,
    group size, bucket."""
    sums: dict[tuple[str, int, int], list[float]] = {}
    for c in calls:
        row = sums.setdefault((c.op, c.group_size, bucket(c.nbytes)), [0, 0, 0.0])
        row[0] += 1
        row[1] += c.nbytes
        row[2] += c.seconds
    total = sum(s for _, _, s in sums.values())
    rows = []
    for (op, n, low), (count, nbytes, seconds) in sorted(sums.items()):
        moves = nbytes > 0 and not (n == 1 and op in IN_PLACE)
        algbw = nbytes / seconds / 1e9 if seconds > 0 and moves else None
        rows.append({
            "op": op, "group_size": n, "bucket": low, "calls": int(count),
            "bytes": int(nbytes), "seconds": seconds,
            "share": seconds / total if total > 0 else None,
            "algbw_gbps": algbw,
            "busbw_gbps": None if algbw is None else algbw * bus_factor(op, n),
        })
    return rows
