"""rpc_transports: the same payload, round trip between two ranks, over each transport.

TensorPipe rows: an `rpc_sync` echo on an agent restricted to one transport/channel set.
Process-group rows: rank 0 sends, rank 1 receives and sends back (send/recv on gloo, or on an
nccl group on a GPU machine).  Every row is a round trip, timed by rank 0.  A transport this
machine cannot run skips with the reason (the table lists it too).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.distributed.rpc as rpc

from .agents import tensorpipe_agent
from .catalog import BY_NAME, TRANSPORT_NAMES, Transport, unavailable
from .common import DRIVER, PEER, drive, echo, payload, require_pair

FAMILY = "rpc_transports"
__all__ = ["FAMILY", "TRANSPORT_NAMES", "run_transport"]


def _device(transport: Transport, rank: int) -> torch.device:
    if transport.device != "cuda":
        return torch.device("cpu")
    return torch.device("cuda", rank % torch.cuda.device_count())


def run_transport(distbench: Any, store: Any, process_group: Any, rank: int, world_size: int,
                  transport_name: str, nbytes: int) -> None:
    require_pair(rank, world_size)
    transport = BY_NAME[transport_name]
    reason = unavailable(transport)
    if reason:
        pytest.skip(f"{transport_name}: {reason}")
    device = _device(transport, rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    data = payload(nbytes, device)
    figures = {"transport": transport_name, "description": transport.description}
    if transport.kind == "tensorpipe":
        _over_tensorpipe(distbench, store, rank, world_size, transport, data, figures)
    else:
        _over_process_group(distbench, process_group, rank, transport, data, figures)


def _over_tensorpipe(distbench: Any, store: Any, rank: int, world_size: int,
                     transport: Transport, data: torch.Tensor, figures: dict) -> None:
    nbytes = data.numel()
    maps = None
    devices = None
    if data.device.type == "cuda":
        # Both ranks' tensors live on their own GPU; replies map back the inverse way.
        count = torch.cuda.device_count()
        maps = {f"worker{r}": {data.device.index: r % count}
                for r in range(world_size) if r != rank}
        devices = [data.device]
    with tensorpipe_agent(store, f"rpc-{transport.name}/", rank, world_size,
                          transports=list(transport.tp_transports),
                          channels=list(transport.tp_channels),
                          device_maps=maps, devices=devices) as _:
        peer = f"worker{PEER}"
        last: list[torch.Tensor] = []

        def round_trip() -> None:
            last[:] = [rpc.rpc_sync(peer, echo, args=(data,))]

        def wrong() -> int:
            return int((last[0].to(data.device) != data).sum()) if rank == DRIVER else 0

        drive(distbench, rank, round_trip, nbytes=nbytes, family=FAMILY, messages=1,
              bytes_per_iteration=2 * nbytes, direction="round trip", check=wrong,
              figures=figures)


def _over_process_group(distbench: Any, process_group: Any, rank: int, transport: Transport,
                        data: torch.Tensor, figures: dict) -> None:
    nbytes = data.numel()
    group = process_group if transport.backend == "gloo" else dist.new_group(
        backend=transport.backend)
    reply = torch.empty_like(data)

    def round_trip() -> None:
        if rank == DRIVER:
            dist.send(data, PEER, group=group)
            dist.recv(reply, PEER, group=group)
        elif rank == PEER:
            dist.recv(reply, DRIVER, group=group)
            dist.send(reply, DRIVER, group=group)
        if data.device.type == "cuda":
            torch.cuda.synchronize(data.device)

    def wrong() -> int:
        return int((reply != data).sum()) if rank == DRIVER else 0

    # Both ends take part in every iteration; the record keeps the slower per iteration (the
    # driver's, which includes the peer's turn-around).
    drive(distbench, rank, round_trip, nbytes=nbytes, family=FAMILY, messages=1,
          bytes_per_iteration=2 * nbytes, direction="round trip", check=wrong,
          figures=figures, peer_fn=round_trip)
