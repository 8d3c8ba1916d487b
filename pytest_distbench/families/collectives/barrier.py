"""barrier: no payload, so no size, no bandwidth (nbytes and count are None), factor 1.

Runs once per world rather than once per message size.  Its check is that one more barrier
completes: a rank that never arrives makes it hang, which the plugin's timeout reports.
"""

from __future__ import annotations

import torch.distributed as dist

from .common import Buffers, Collective, barrier_device_ids, no_bytes, no_values, unit_factor


def _run(b: Buffers):
    device_ids = barrier_device_ids(b)
    if device_ids is None:
        return dist.barrier(group=b.group)
    return dist.barrier(group=b.group, device_ids=device_ids)


BARRIER = Collective(
    name="barrier",
    busbw_factor=unit_factor,
    layout=no_bytes,
    run=_run,
    input_at=no_values,
    output_at=no_values,
    sized=False,
)
