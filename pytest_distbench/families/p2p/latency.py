"""p2p_latency: ping-pong between ranks 0 and 1 (osu_latency).

One iteration is a round trip (0 sends, 1 answers with the same size); the reported latency
is one-way, half the round trip.  Both sides check what they receive.
"""

from __future__ import annotations

from collections.abc import Callable

from .common import Endpoint, PointToPoint, first_pair


def _iteration(e: Endpoint) -> Callable[[], None]:
    send, recv, peer = e.transport.send, e.transport.recv, e.peer
    out, into = e.send_slots[0], e.recv_slots[0]
    if e.leader:
        def ping() -> None:
            send(out, peer)
            recv(into, peer)

        return ping

    def pong() -> None:
        recv(into, peer)
        send(out, peer)

    return pong


LATENCY = PointToPoint(
    name="p2p_latency",
    pairs=first_pair,
    iteration=_iteration,
    messages_per_iteration=lambda window, pairs: 2,
    receivers="both",
    round_trip=True,
    uses_window=False,
)
