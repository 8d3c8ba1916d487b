"""Real training steps whose communication bench_replay.py captures and replays (and
docs/replay.md's example). Launch with torchrun; gloo on CPU.

    torchrun --nproc-per-node=4 benchmarks/replay_programs.py ddp --steps 4
    torchrun --nproc-per-node=4 benchmarks/replay_programs.py fsdp2
    torchrun --nproc-per-node=4 benchmarks/replay_programs.py 2d     # data x tensor parallel

Each is a small transformer from torch.nn alone: ddp wraps it in DistributedDataParallel,
fsdp2 shards every layer with fully_shard, 2d runs Megatron-style tensor-parallel MLPs
(column- then row-parallel Linear, an all_reduce over the tensor-parallel pair in forward and
in backward) with the gradients all-reduced over the data-parallel pair.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
from torch import nn

D_MODEL, HEADS, FFN, LAYERS, BATCH, SEQ = 128, 4, 512, 2, 8, 32


def encoder() -> nn.Module:
    layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, FFN, batch_first=True, dropout=0.0)
    return nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)


class _ReduceInBackward(torch.autograd.Function):
    """Identity forward, all_reduce of the gradient over the group in backward (the input
    of a column-parallel layer)."""

    @staticmethod
    def forward(ctx, x, group):  # noqa: ANN001, ANN205 - autograd's signature
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001, ANN205
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceInForward(torch.autograd.Function):
    """all_reduce of the partial sums in forward (a row-parallel layer's output), identity
    backward."""

    @staticmethod
    def forward(ctx, x, group):  # noqa: ANN001, ANN205
        x = x.contiguous()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001, ANN205
        return grad, None


class TensorParallelMLP(nn.Module):
    def __init__(self, group: dist.ProcessGroup, size: int) -> None:
        super().__init__()
        self.group = group
        self.up = nn.Linear(D_MODEL, FFN // size)
        self.down = nn.Linear(FFN // size, D_MODEL, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _ReduceInBackward.apply(x, self.group)
        return _ReduceInForward.apply(self.down(torch.relu(self.up(x))), self.group)


def _two_d(rank: int, world: int) -> tuple[nn.Module, dist.ProcessGroup]:
    if world % 2:
        raise SystemExit("2d needs an even number of ranks (tensor-parallel pairs)")
    tp = dp = None
    for first in range(0, world, 2):  # every rank creates every group, in the same order
        group = dist.new_group([first, first + 1])
        if rank in (first, first + 1):
            tp = group
    for offset in range(2):
        group = dist.new_group(list(range(offset, world, 2)))
        if rank % 2 == offset:
            dp = group
    model = nn.Sequential(*[TensorParallelMLP(tp, 2) for _ in range(LAYERS)])
    return model, dp


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("program", choices=("ddp", "fsdp2", "2d"))
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    data_parallel = None
    if args.program == "ddp":
        model = nn.parallel.DistributedDataParallel(encoder())
    elif args.program == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (world,))
        model = encoder()
        for layer in model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    else:
        model, data_parallel = _two_d(rank, world)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    for _ in range(args.steps):
        optimizer.zero_grad()
        model(torch.randn(BATCH, SEQ, D_MODEL)).square().mean().backward()
        if data_parallel is not None:
            grads = [p.grad for p in model.parameters()]
            flat = torch.cat([g.flatten() for g in grads])
            dist.all_reduce(flat, group=data_parallel)
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
