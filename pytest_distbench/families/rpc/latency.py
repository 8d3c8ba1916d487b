"""rpc_latency: `rpc_sync` round trip of one tensor payload, echoed back by the peer.

One iteration = one round trip (request and reply both carry the payload), so the time is a
round trip, not one-way, and MB/s counts the payload in both directions (2 x nbytes per trip).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed.rpc as rpc

from .common import DRIVER, PEER, drive, echo, payload, require_pair

FAMILY = "rpc_latency"


def run_latency(distbench: Any, rpc_agent: Any, nbytes: int) -> None:
    require_pair(rpc_agent.rank, rpc_agent.world_size)
    peer = rpc_agent.worker_names[PEER]
    data = payload(nbytes)
    last: list[torch.Tensor] = []

    def round_trip() -> None:
        last[:] = [rpc.rpc_sync(peer, echo, args=(data,))]

    def wrong() -> int:
        return int((last[0] != data).sum()) if rpc_agent.rank == DRIVER else 0

    drive(distbench, rpc_agent.rank, round_trip, nbytes=nbytes, family=FAMILY, messages=1,
          bytes_per_iteration=2 * nbytes, direction="round trip", check=wrong)
