"""The GPU's own copy rate, measured once when a CUDA world starts in each of its ranks.

What the sanity rules hold a CUDA world's bandwidths to (results/sanity.py), as the host's
memory copy bounds a CPU world's (environment/physical.py), and the measured peak a one-GPU
world's bandwidths are shown as a share of (results/peaks.py). A device-to-device copy timed
as the collectives are: back to back between two CUDA events (cuda_timing.BatchTimer).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .cuda_timing import BatchTimer, eager_batch

# Large enough that the copy runs at the memory's rate rather than its launch rate (64 MiB
# copies in ~30 us on an H200, 4 MiB in ~3 us, a launch ~2-5 us); a few batches, the best
# kept: a first batch can run before the GPU's clocks ramp up.
PROBE_BYTES = 256 << 20
COPIES = 10
BATCHES = 3


def copy_rate_gbps(copy: Callable[[], None], nbytes: int, cuda: Any) -> float | None:
    """The fastest of BATCHES batches of COPIES back-to-back `copy()` calls of `nbytes` each,
    as bytes copied per second (decimal GB/s); None if no batch took measurable time."""
    timer = BatchTimer(eager_batch(copy, COPIES), COPIES, cuda)
    best = min(timer() for _ in range(BATCHES))
    return nbytes / best / 1e9 if best > 0 else None


def device_copy_gbps(device: Any) -> float | None:
    """This GPU's device-to-device copy rate, or None where it cannot be measured (too little
    free memory, no CUDA): a missing bound judges nothing, a wrong one fails real figures."""
    try:
        import torch

        rate = _copy_on(torch, device)
        torch.cuda.empty_cache()  # the probe's 512 MiB are no test's memory
        return rate
    except Exception:  # noqa: BLE001 - out of memory, a busy device: no bound rather than a wrong one
        return None


def _copy_on(torch: Any, device: Any) -> float | None:
    src = torch.ones(PROBE_BYTES, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)  # the first copy pays for lazy initialization
    return copy_rate_gbps(lambda: dst.copy_(src), PROBE_BYTES, torch.cuda)
