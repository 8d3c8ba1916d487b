"""The GPU's own copy rate, measured once when a CUDA world starts in each of its ranks.

What the sanity rules hold a CUDA world's bandwidths to (results/sanity.py), as the host's
memory copy bounds a CPU world's (environment/physical.py), and the measured peak a one-GPU
world's bandwidths are shown as a share of (results/peaks.py). Device-to-device copies timed as
the collectives are with --distbench-cuda-graph: captured back to back in a CUDA graph, one
replay between two CUDA events (cuda_timing), so no launch gap lowers the rate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .cuda_timing import BatchTimer, capture_batch

# Sizes whose source and destination fit a large GPU's L2 cache (A100 40 MB, H100/H200 50 MB)
# and one far out of it: the fastest bounds every transfer. Data resident in L2 moves faster
# than through HBM: one H200's all_gather of 16 MiB in a graph ran at 2,884 GB/s, its 1 GiB at
# 2,095 GB/s (docs/gpu.md); a bound of HBM alone would call the first impossible.
PROBE_BYTES = (4 << 20, 16 << 20, 256 << 20)
COPIES = 10
# A few replays, the best kept: a first one can run before the GPU's clocks ramp up.
BATCHES = 3


def copy_rate_gbps(copy: Callable[[], None], nbytes: int, cuda: Any) -> float | None:
    """The fastest of BATCHES replays of a graph of COPIES back-to-back `copy()` calls of
    `nbytes` each, as bytes copied per second (decimal GB/s); None if none took measurable
    time."""
    timer = BatchTimer(capture_batch(copy, COPIES, cuda), COPIES, cuda)
    best = min(timer() for _ in range(BATCHES))
    return nbytes / best / 1e9 if best > 0 else None


def device_copy_gbps(device: Any) -> float | None:
    """This GPU's fastest device-to-device copy over PROBE_BYTES, or None where it cannot be
    measured (too little free memory, a copy that cannot be captured): a missing bound judges
    nothing, a wrong one fails real figures."""
    try:
        import torch
    except ImportError:
        return None
    rates = []
    for nbytes in PROBE_BYTES:
        try:
            rates.append(_copy_on(torch, device, nbytes))
        except Exception:  # noqa: BLE001 - out of memory, a busy device: no bound from this size
            continue
        finally:
            torch.cuda.empty_cache()  # the probe's buffers are no test's memory
    known = [r for r in rates if r]
    return max(known) if known else None


def _copy_on(torch: Any, device: Any, nbytes: int) -> float | None:
    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return copy_rate_gbps(lambda: dst.copy_(src), nbytes, torch.cuda)
