"""broadcast: root 0's tensor is copied into every rank's tensor, in place.

Size is the tensor size; busbw factor 1 (nccl-tests).  Every rank is checked: the
non-roots start from the 0 sentinel, so a broadcast that delivers nothing is caught there.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .common import ROOT, Buffers, Collective, tag, tag_period, unit_factor, whole_tensor


def _run(b: Buffers):
    return dist.broadcast(b.input, src=ROOT, group=b.group)


def _input_at(b: Buffers, positions: torch.Tensor) -> torch.Tensor | None:
    if b.rank != ROOT:
        return None
    return tag(ROOT, positions, b.input.dtype)


def _output_at(b: Buffers, positions: torch.Tensor) -> torch.Tensor:
    return tag(ROOT, positions, b.output.dtype)


BROADCAST = Collective(
    name="broadcast",
    busbw_factor=unit_factor,
    layout=whole_tensor,
    run=_run,
    input_at=_input_at,
    output_at=_output_at,
    period=tag_period,
    in_place=True,
)
