"""all_reduce: SUM in place; every rank ends with the sum of every rank's tensor.

Size is the tensor each rank holds; busbw factor 2(n-1)/n (nccl-tests).
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
    ring_allreduce_factor,
    whole_tensor,
)


def _run(b: Buffers):
    return dist.all_reduce(b.input, op=dist.ReduceOp.SUM, group=b.group)


def _input_at(b: Buffers, positions: torch.Tensor) -> torch.Tensor:
    return contribution(b.rank, b.world_size, positions, b.input.dtype)


def _output_at(b: Buffers, positions: torch.Tensor) -> torch.Tensor:
    return reduced(b.world_size, positions, b.output.dtype)


ALL_REDUCE = Collective(
    name="all_reduce",
    busbw_factor=ring_allreduce_factor,
    layout=whole_tensor,
    run=_run,
    input_at=_input_at,
    output_at=_output_at,
    period=reduction_period,
    in_place=True,
)
