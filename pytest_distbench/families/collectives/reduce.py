"""reduce: SUM to root 0 in place; only the root's result is defined, so only it is checked.

Size is the tensor each rank holds; busbw factor 1 (nccl-tests).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .common import (
    ROOT,
    Buffers,
    Collective,
    contribution,
    reduced,
    reduction_period,
    unit_factor,
    whole_tensor,
)


def _run(b: Buffers):
    return dist.reduce(b.input, dst=ROOT, op=dist.ReduceOp.SUM, group=b.group)


def _input_at(b: Buffers, positions: torch.Tensor) -> torch.Tensor:
    return contribution(b.rank, b.world_size, positions, b.input.dtype)


def _output_at(b: Buffers, positions: torch.Tensor) -> torch.Tensor | None:
    if b.rank != ROOT:
        return None
    return reduced(b.world_size, positions, b.output.dtype)


REDUCE = Collective(
    name="reduce",
    busbw_factor=unit_factor,
    layout=whole_tensor,
    run=_run,
    input_at=_input_at,
    output_at=_output_at,
    period=reduction_period,
    in_place=True,
)
