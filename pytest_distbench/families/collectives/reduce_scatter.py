"""reduce_scatter from one tensor: SUM of every rank's input; rank r keeps chunk r.

Size is the INPUT (output is size / n); busbw factor (n-1)/n (nccl-tests).

Uses ``dist.reduce_scatter_single`` where this torch has it (2.13 deprecates
``reduce_scatter_tensor`` in its favour) and ``reduce_scatter_tensor`` otherwise.
gloo accepts it on CPU, but implements it (``ProcessGroupGloo::_reduce_scatter_base``) as a
clone of the input, a full all_reduce of the clone and a local copy of this rank's chunk.  The
benchmark still times the real op and reports the nccl-tests size and factor, so gloo's
reduce_scatter busbw reads at about half its all_reduce busbw or less: that is what gloo
delivers, not a measurement artefact.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .common import (
    Buffers,
    Collective,
    contribution,
    reduced,
    reduction_period,
    ring_split_factor,
    scattered_input,
)

_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _run(b: Buffers):
    return _reduce_scatter_single(b.output, b.input, op=dist.ReduceOp.SUM, group=b.group)


def _input_at(b: Buffers, positions: torch.Tensor) -> torch.Tensor:
    return contribution(b.rank, b.world_size, positions, b.input.dtype)


def _output_at(b: Buffers, positions: torch.Tensor) -> torch.Tensor:
    # Output position p of rank r is input position r * chunk + p of the reduced whole.
    return reduced(b.world_size, positions + b.rank * b.layout.out_count, b.output.dtype)


REDUCE_SCATTER = Collective(
    name="reduce_scatter",
    busbw_factor=ring_split_factor,
    layout=scattered_input,
    run=_run,
    input_at=_input_at,
    output_at=_output_at,
    period=reduction_period,
)
