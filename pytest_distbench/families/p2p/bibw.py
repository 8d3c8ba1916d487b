"""p2p_bibw: ranks 0 and 1 each send a window of W messages to the other at once and
receive the other's (osu_bibw).  MB/s counts both directions: 2 * W * size / time."""

from __future__ import annotations

from collections.abc import Callable

from .common import Endpoint, PointToPoint, first_pair


def _iteration(e: Endpoint) -> Callable[[], None]:
    # Every receive and send of the window is in flight at once, in both directions.
    return e.transport.batch(e.sends(e.window), e.recvs(e.window))


BIBW = PointToPoint(
    name="p2p_bibw",
    pairs=first_pair,
    iteration=_iteration,
    messages_per_iteration=lambda window, pairs: 2 * window,
    receivers="both",
)
