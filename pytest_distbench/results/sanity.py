"""Physical sanity rules every record passes before it is printed, saved or gated.

A benchmark that prints one impossible figure is trusted for none. Each rule states a fact no
correct measurement can break; a record that breaks one fails its test with the rule and the
figures, and is kept in the results file marked ``invalid`` (the list of broken rules), never
shown as a figure. The rules are pure: the machine's own limits (MachineBounds) are measured
once per session by the harness and passed in. docs/user-guide.md lists them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .document.record import Record

# A duration-bound run lasts the requested duration within this fraction (no less on the rank
# that timed longest, no more on any rank), or within DURATION_FLOOR_S where that is more: the
# scheduler time a rank of an oversubscribed machine may wait before it sees that the others
# stopped (measured on a 2-core VM: 5 ranks of a 2 s run overran by 0.26 and 0.31 s).
DURATION_TOLERANCE = 0.10
DURATION_FLOOR_S = 0.5
# Floating-point slack for identities that hold exactly in arithmetic (totals and rates).
RELATIVE_SLACK = 1e-6
# The sum of a rank's iteration times cannot exceed the wall time around them; the clock
# reads between iterations are the only slack.
ELAPSED_SLACK = 1.01
# A GPU's memory moves twice its measured copy rate (read and write): what no bandwidth of a
# CUDA world can exceed.
DEVICE_MEMORY_FACTOR = 2.0


@dataclass(frozen=True)
class MachineBounds:
    """What this machine can physically do, measured once per session.

    `copy_gbps`: the fastest memory copy torch makes here (decimal GB/s, the best of an
    in-cache and a DRAM-sized buffer): no transfer between processes, which copies at least
    once, moves bytes faster. `round_trip_s`: the shortest one-byte round trip between two
    processes through the kernel here: a message that waits for its acknowledgement (credits
    1) cannot go faster. `device_copy_gbps`: the fastest device-to-device copy a rank of a
    CUDA world measured on its GPU (in and out of its L2 cache, copies replayed in a CUDA
    graph between events), bytes copied per second: a copy reads and writes each byte, so the
    GPU's memory moves twice that, and no collective delivers bytes into it faster.
    """

    copy_gbps: float | None = None
    round_trip_s: float | None = None
    device_copy_gbps: float | None = None

    def as_dict(self) -> dict[str, float | None]:
        return asdict(self)


def violations(record: Record, bounds: MachineBounds | None = None) -> list[str]:
    """The rules `record` breaks, each as one sentence with its figures ([] when none)."""
    found: list[str] = []
    found += _times(record)
    found += _counts(record)
    found += _duration(record)
    if bounds is not None:
        found += _bandwidth(record, bounds)
        found += _message_rate(record, bounds)
    return found


def _times(record: Record) -> list[str]:
    samples = record.get("samples") or []
    bad = [x for x in samples if not (isinstance(x, (int, float)) and math.isfinite(x) and x > 0)]
    if not samples:
        return ["times positive and finite: the record has no samples"]
    if bad:
        return [f"times positive and finite: {len(bad)} of {len(samples)} samples are not "
                f"(e.g. {bad[0]!r} s)"]
    return []


def _counts(record: Record) -> list[str]:
    found = []
    samples = record.get("samples") or []
    iterations = record.get("iterations")
    if iterations is not None and iterations != len(samples):
        found.append(f"counts consistent: iterations {iterations} but {len(samples)} samples")
    figures = record.get("figures") or {}
    per_iteration = figures.get("messages_per_iteration")
    total = figures.get("total_messages")
    if _number(per_iteration) and _number(total) and total != per_iteration * len(samples):
        found.append(f"counts consistent: {total} messages recorded, but "
                     f"{per_iteration} per iteration x {len(samples)} iterations = "
                     f"{per_iteration * len(samples)}")
    total_s = figures.get("total_s")
    rate = figures.get("msgs_per_s")
    if _number(total) and _number(total_s) and _number(rate) and total_s > 0:
        expected = total / total_s
        if abs(rate - expected) > RELATIVE_SLACK * expected:
            found.append(f"rate consistent: {rate:.6g} msgs/s recorded, but {total} messages in "
                         f"{total_s:.6g} s is {expected:.6g} msgs/s")
    elapsed: Sequence[Any] = record.get("elapsed_s") or []
    for rank, (own, region) in enumerate(
            zip(record.get("rank_samples") or [], elapsed, strict=False)):
        if own and _number(region) and sum(own) > region * ELAPSED_SLACK:
            found.append(f"times consistent: rank {rank}'s iterations add up to "
                         f"{sum(own):.6g} s, longer than its whole timed region "
                         f"({region:.6g} s)")
    return found


def _duration(record: Record) -> list[str]:
    """A duration run may not stop early; it may overrun by what stopping between iterations
    costs (the chunk in flight when the ranks agree): DURATION_TOLERANCE, DURATION_FLOOR_S or
    two of its slowest iterations, whichever is most.

    Early is judged on the longest rank's timed region: the ranks stop together when any one's
    clock reaches the duration, and a rank that left the start barrier later (scheduled out,
    on an oversubscribed machine) times a shorter region of the same run. Late is judged per
    rank: no rank may run on past the stop."""
    requested = record.get("duration_s")
    if not _number(requested) or requested <= 0 or record.get("stopped_at_sample_cap"):
        return []
    samples = [x for x in record.get("samples") or [] if _number(x)]
    early = DURATION_TOLERANCE * requested
    late = max(early, DURATION_FLOOR_S, 2 * max(samples, default=0.0))
    timed = [(rank, e) for rank, e in enumerate(record.get("elapsed_s") or []) if _number(e)]
    if not timed:
        return []
    longest = max(e for _, e in timed)
    off = [(rank, e) for rank, e in timed if e > requested + late]
    if longest < requested - early:
        off = [(rank, e) for rank, e in timed if e == longest] + off
    if not off:
        return []
    shown = ", ".join(f"rank {rank} {e:.3g} s" for rank, e in off)
    return [f"duration kept: the run was asked to last {requested:g} s (no less than "
            f"{requested - early:.3g} s, no more than {requested + late:.3g} s) and lasted "
            f"{shown}"]


def _bandwidth(record: Record, bounds: MachineBounds) -> list[str]:
    if record.get("device") == "cuda":
        return _device_bandwidth(record, bounds)
    busbw = record.get("busbw_gbps")
    limit = bounds.copy_gbps
    # Host memory bounds host transfers only: a GPU's links and memory are faster.
    if record.get("device") not in (None, "cpu") or not (_number(busbw) and _number(limit)):
        return []
    if busbw <= limit:
        return []
    return [f"bandwidth below memory copy: bus bandwidth {busbw:.4g} GB/s is above this "
            f"machine's fastest memory copy ({limit:.4g} GB/s)"]


def _device_bandwidth(record: Record, bounds: MachineBounds) -> list[str]:
    """Every byte a collective delivers on a GPU is written to (or, reduce_scatter's input,
    read from) its memory, which moves at most what a copy moves through it: twice the
    measured copy rate (a copy reads and writes each byte). Links are slower than that."""
    copy = bounds.device_copy_gbps
    if not _number(copy) or copy <= 0:
        return []
    limit = DEVICE_MEMORY_FACTOR * copy
    over = [(label, value) for label, value in (("algorithm", record.get("algbw_gbps")),
                                                ("bus", record.get("busbw_gbps")))
            if _number(value) and value > limit]
    return [f"bandwidth within the GPU's memory: {label} bandwidth {value:.4g} GB/s is above "
            f"twice this GPU's measured copy rate ({copy:.4g} GB/s: a copy reads and writes "
            f"each byte, so its memory moved {limit:.4g} GB/s)" for label, value in over]


def _message_rate(record: Record, bounds: MachineBounds) -> list[str]:
    figures = record.get("figures") or {}
    limit = bounds.round_trip_s
    if figures.get("credits") != 1 or not _number(limit) or limit <= 0:
        return []
    fastest = 1 / limit
    rates = {key: figures.get(key) for key in ("msgs_per_s", "msgs_per_s_p50")}
    over = {key: rate for key, rate in rates.items() if _number(rate) and rate > fastest}
    if not over:
        return []
    shown = ", ".join(f"{key} {rate:,.0f}" for key, rate in over.items())
    return [f"message rate within the round trip: at credits 1 every message waits for its "
            f"acknowledgement, so at most {fastest:,.0f} msgs/s fit this machine's shortest "
            f"round trip ({limit * 1e6:.3g} us); recorded {shown}"]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(
        value)
