"""all_to_all from one tensor: chunk d of rank s's input becomes chunk s of rank d's output.

Size is the per-rank buffer (input and output are both that size); busbw factor (n-1)/n
(nccl-tests).  ``dist.all_to_all_single`` with equal splits; gloo runs it natively on CPU.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .common import Buffers, Collective, ring_split_factor, split_buffer, tag, tag_period


def _run(b: Buffers):
    return dist.all_to_all_single(b.output, b.input, group=b.group)


def _message_tag(b: Buffers, src, dst, offset: torch.Tensor) -> torch.Tensor:
    # One tag sequence per (sender, receiver) pair, so a chunk delivered to the wrong rank or
    # into the wrong slot differs from what belongs there.
    return tag(src * b.world_size + dst, offset, b.input.dtype)


def _input_at(b: Buffers, positions: torch.Tensor) -> torch.Tensor:
    chunk = b.layout.in_count // b.world_size
    return _message_tag(b, b.rank, positions // chunk, positions % chunk)


def _output_at(b: Buffers, positions: torch.Tensor) -> torch.Tensor:
    chunk = b.layout.out_count // b.world_size
    return _message_tag(b, positions // chunk, b.rank, positions % chunk)


def _segments(b: Buffers) -> tuple[int, int]:
    # Each chunk of either buffer belongs to one (sender, receiver) pair.
    return b.layout.in_count // b.world_size, b.layout.out_count // b.world_size


ALL_TO_ALL = Collective(
    name="all_to_all",
    busbw_factor=ring_split_factor,
    layout=split_buffer,
    run=_run,
    input_at=_input_at,
    output_at=_output_at,
    period=tag_period,
    segments=_segments,
)
