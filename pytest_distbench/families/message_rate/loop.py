"""The message-rate loop: `credits` messages sent back to back, then one acknowledgement.

Credits are the messages a sender may have in flight before it must wait for an
acknowledgement: the receiver acknowledges every `credits`-th message (one 1-byte message
back), and the sender, its credits used, waits for it.  credits=1 is fully synchronous (a
round trip per message).  One timed iteration is a few such rounds (about 64 messages at small
sizes, at most ~16 MiB), so the one clock read per iteration is spread over many messages and
nothing else runs per message but the transport's own calls.

The transport is pluggable (families/transports): the loop only calls `send`, `recv` and the
prepared batch of sends or receives.  Payloads are checked as in the p2p family.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import repeat
from typing import Any

import pytest

from ..p2p.common import Endpoint, make_endpoint, measure_messages
from ..p2p.rates import rounds_per_iteration
from ..transports import make_transport
from ..transports.base import Transport
from .paths import PATHS, TrafficPath

FAMILY = "message_rate"

__all__ = ["FAMILY", "PATHS", "message_loop", "run_message_rate"]


def message_loop(e: Endpoint, credits: int, rounds: int) -> Callable[[], None]:
    """One iteration on this side: `rounds` x (credits messages, one acknowledgement)."""
    transport, peer = e.transport, e.peer
    if e.leader:
        window = transport.batch(e.sends(credits), ())
        recv, ack = transport.recv, e.ack_in

        def send_rounds() -> None:
            for _ in repeat(None, rounds):  # yields None: no int object per round
                window()
                recv(ack, peer)

        return send_rounds
    window = transport.batch((), e.recvs(credits))
    send, ack = transport.send, e.ack_out

    def receive_rounds() -> None:
        for _ in repeat(None, rounds):
            window()
            send(ack, peer)

    return receive_rounds


def _idle() -> None:
    return None


def run_message_rate(
    distbench: Any,
    path: str | TrafficPath,
    credits: int,
    nbytes: int,
    transport: str | Transport = "process_group",
) -> None:
    """Benchmark messages of `nbytes` along `path` with `credits` in this rank."""
    if isinstance(path, str):
        if path not in PATHS:
            raise ValueError(f"unknown path {path!r}: expected one of {', '.join(PATHS)}")
        path = PATHS[path]
    reason = path.skip_reason(distbench.world_size)
    if reason:
        pytest.skip(reason)
    if isinstance(transport, str):
        transport = make_transport(transport, distbench)
    rank = distbench.rank
    endpoint = None
    if rank in (path.sender, path.receiver):
        sender = rank == path.sender
        endpoint = make_endpoint(transport, rank, path.receiver if sender else path.sender,
                                 sender, credits, nbytes, distbench.device)
    # An iteration carries whole rounds; as many as the batch wants where they fit the time
    # (a slow transport's 64 messages can last longer than a budget's iteration).
    one_round = message_loop(endpoint, credits, 1) if endpoint is not None else _idle
    rounds = distbench.repeats_within(one_round, rounds_per_iteration(credits, nbytes))
    fn = message_loop(endpoint, credits, rounds) if endpoint is not None else _idle

    def check() -> int:
        if endpoint is None:
            return 0
        receives = not endpoint.leader
        wrong = endpoint.wrong_bytes() if receives else 0  # what the timed loop left
        endpoint.clear()
        fn()
        return wrong + (endpoint.wrong_bytes() if receives else 0)

    measure_messages(
        distbench, fn, nbytes=nbytes, family=FAMILY, check=check,
        figures={
            "messages_per_iteration": credits * rounds,
            "credits": credits,
            "rounds_per_iteration": rounds,
            "path": path.name,
            "sender": path.sender,
            "receiver": path.receiver,
            "transport": transport.name,
        },
        # The seed loads the computations, not the client.
        pressure_ranks=list(range(1, distbench.world_size)),
        ranks=[path.sender, path.receiver],
    )
