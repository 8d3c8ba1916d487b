"""rpc_throughput: `rpc_async` with up to `credits` requests in flight (a sliding window).

One iteration sends MESSAGES_PER_CREDIT x credits requests (at least MIN_MESSAGES, at most
ITERATION_BYTES_CAP of payload), keeping `credits` unanswered at any time (fewer where the cap
leaves fewer messages: figures["credits"] is what ran, figures["credits_requested"] what was
asked); the peer acknowledges each without payload.  credits = 1 is
synchronous.  messages/s = messages per iteration / time; MB/s counts the payload one way.
The window drains at the end of each iteration; with at least 4 x credits messages per
iteration the drain is a small part of it.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import torch.distributed.rpc as rpc

from .common import PEER, drive, payload, require_pair, sink
from .options import ITERATION_BYTES_CAP

FAMILY = "rpc_throughput"
MESSAGES_PER_CREDIT = 4
MIN_MESSAGES = 32


def messages_per_iteration(credits: int, nbytes: int = 0) -> int:
    """Messages per iteration: MESSAGES_PER_CREDIT x credits (at least MIN_MESSAGES), within
    ITERATION_BYTES_CAP, at least one."""
    wanted = max(MIN_MESSAGES, MESSAGES_PER_CREDIT * credits)
    if nbytes > 0:
        wanted = min(wanted, ITERATION_BYTES_CAP // nbytes)
    return max(1, wanted)


def run_throughput(distbench: Any, rpc_agent: Any, nbytes: int, credits: int) -> None:
    require_pair(rpc_agent.rank, rpc_agent.world_size)
    if credits < 1:
        raise ValueError(f"credits must be >= 1, got {credits}")
    peer = rpc_agent.worker_names[PEER]
    data = payload(nbytes)
    messages = messages_per_iteration(credits, nbytes)
    used = min(credits, messages)  # no more in flight than an iteration sends

    def window() -> None:
        in_flight: deque = deque()
        for _ in range(messages):
            if len(in_flight) >= used:
                in_flight.popleft().wait()
            in_flight.append(rpc.rpc_async(peer, sink, args=(data,)))
        while in_flight:
            in_flight.popleft().wait()

    drive(distbench, rpc_agent.rank, window, nbytes=nbytes, family=FAMILY, messages=messages,
          bytes_per_iteration=messages * nbytes, direction="one way",
          figures={"credits": used, "credits_requested": credits})
