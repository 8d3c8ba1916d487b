"""all_gather into one tensor: each rank's chunk lands at offset rank * chunk on every rank.

Size is the OUTPUT (n x per-rank input); busbw factor (n-1)/n (nccl-tests).

Uses ``dist.all_gather_single`` where this torch has it (2.13 deprecates
``all_gather_into_tensor`` in its favour, with a FutureWarning on every call) and
``all_gather_into_tensor`` otherwise; both are the same single-tensor op.  gloo runs it on
CPU as a real all-gather into chunk views of the output.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .common import Buffers, Collective, gathered_output, ring_split_factor, tag, tag_period

_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _run(b: Buffers):
    return _all_gather_single(b.output, b.input, group=b.group)


def _input_at(b: Buffers, positions: torch.Tensor) -> torch.Tensor:
    return tag(b.rank, positions, b.input.dtype)


def _output_at(b: Buffers, positions: torch.Tensor) -> torch.Tensor:
    chunk = b.layout.in_count
    return tag(positions // chunk, positions % chunk, b.output.dtype)


def _segments(b: Buffers) -> tuple[int, int]:
    # The output holds one rank's tags per chunk; the input is one chunk.
    return b.layout.in_count, b.layout.in_count


ALL_GATHER = Collective(
    name="all_gather",
    busbw_factor=ring_split_factor,
    layout=gathered_output,
    run=_run,
    input_at=_input_at,
    output_at=_output_at,
    period=tag_period,
    segments=_segments,
)
