"""p2p_bandwidth: rank 0 streams a window of W non-blocking sends to rank 1, which answers
with one 1-byte acknowledgement per window (osu_bw).  MB/s = W * size / time per window."""

from __future__ import annotations

from collections.abc import Callable

from .common import Endpoint, PointToPoint, first_pair


def windowed_stream(e: Endpoint) -> Callable[[], None]:
    """One window from the leader to the follower, then the follower's acknowledgement."""
    transport, peer = e.transport, e.peer
    if e.leader:
        window = transport.batch(e.sends(e.window), ())
        recv, ack = transport.recv, e.ack_in

        def send_window() -> None:
            window()
            recv(ack, peer)

        return send_window
    window = transport.batch((), e.recvs(e.window))
    send, ack = transport.send, e.ack_out

    def receive_window() -> None:
        window()
        send(ack, peer)

    return receive_window


BANDWIDTH = PointToPoint(
    name="p2p_bandwidth",
    pairs=first_pair,
    iteration=windowed_stream,
    messages_per_iteration=lambda window, pairs: window,
)
