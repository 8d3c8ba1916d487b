"""The one harness every point-to-point benchmark runs through (OSU style).

Each member (latency.py, bandwidth.py, ...) states only what differs: which ranks pair up,
what one side of a pair does in one timed iteration, which side receives payloads, and how
many messages an iteration moves.  Everything else -- payload buffers, the check, the figures
and the single call of ``distbench.measure`` -- lives here.

Payloads are bytes (uint8), so any size, ``1MiB+1B`` included, is moved exactly.  Each send
buffer ("slot") carries its own pattern, a function of the sending rank, the slot and the
position, never 0; receive buffers are zeroed before the check, so a message that never
arrived, arrived truncated, landed in the wrong slot or came from the wrong rank shows up as
wrong bytes.  The check counts the wrong bytes left by the timed loop, then runs one more
iteration on zeroed receive buffers and counts again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from ..transports import make_transport
from ..transports.base import Route, Transport
from .rates import effective_window, slot_count

__all__ = [
    "Endpoint",
    "PointToPoint",
    "make_endpoint",
    "measure_messages",
    "pattern",
    "run_p2p",
    "first_pair",
    "half_pairs",
]

# Patterns repeat with a prime period, so a shift by any amount that is not a multiple of it
# (a truncated or offset message) changes the bytes.
_PERIOD = 251


def pattern(source: int, slot: int, nbytes: int, device: torch.device | str = "cpu"
            ) -> torch.Tensor:
    """The payload rank `source` sends from buffer `slot`: nbytes of uint8 in 1..251."""
    base = (source * 37 + slot * 11) % _PERIOD
    period = (base + 7 * torch.arange(_PERIOD, dtype=torch.int64, device=device)) % _PERIOD + 1
    period = period.to(torch.uint8)
    return period.repeat(-(-nbytes // _PERIOD))[:nbytes].contiguous()


def measure_messages(
    distbench: Any,
    fn: Callable[[], Any],
    *,
    nbytes: int,
    family: str,
    check: Callable[[], int],
    figures: dict[str, Any],
    pressure_ranks: list[int] | None = None,
    ranks: list[int] | None = None,
    headline: str = "mean",
) -> None:
    """The one call of `distbench.measure` for the p2p and message-rate families.

    `pressure_ranks`: where CPU/memory pressure runs during the timed region (None = every
    rank; the message-rate family pressures its computation ranks only). `ranks`: the ranks
    on a message path, the only ones timed (None = every rank). `headline`: "mean" for a
    rate over the timed region, "p50" for a latency.
    """
    distbench.measure(fn, nbytes=nbytes, count=nbytes, dtype="uint8", family=family,
                      check=check, figures=figures, pressure_ranks=pressure_ranks,
                      ranks=ranks, headline=headline)


@dataclass
class Endpoint:
    """One rank's side of a pair: its peer, its payload buffers and the transport."""

    transport: Transport
    rank: int
    peer: int
    leader: bool  # the first rank of the pair (the one that starts, in one-way tests)
    window: int
    send_slots: list[torch.Tensor]
    recv_slots: list[torch.Tensor]
    ack_out: torch.Tensor
    ack_in: torch.Tensor

    def sends(self, count: int) -> list[Route]:
        """`count` messages to the peer, from the send buffers round robin."""
        return [(self.send_slots[i % len(self.send_slots)], self.peer) for i in range(count)]

    def recvs(self, count: int) -> list[Route]:
        """`count` messages from the peer, into the receive buffers round robin."""
        return [(self.recv_slots[i % len(self.recv_slots)], self.peer) for i in range(count)]

    def wrong_bytes(self) -> int:
        """Bytes in the receive buffers that differ from what the peer sends."""
        wrong = 0
        for slot, buffer in enumerate(self.recv_slots):
            want = pattern(self.peer, slot, buffer.numel(), buffer.device)
            wrong += int((buffer != want).sum().item())
        return wrong

    def clear(self) -> None:
        for buffer in self.recv_slots:
            buffer.zero_()


def make_endpoint(transport: Transport, rank: int, peer: int, leader: bool, window: int,
                  nbytes: int, device: torch.device) -> Endpoint:
    slots = slot_count(window, nbytes)
    return Endpoint(
        transport=transport,
        rank=rank,
        peer=peer,
        leader=leader,
        window=window,
        send_slots=[pattern(rank, s, nbytes, device) for s in range(slots)],
        recv_slots=[torch.zeros(nbytes, dtype=torch.uint8, device=device) for _ in range(slots)],
        ack_out=torch.ones(1, dtype=torch.uint8, device=device),
        ack_in=torch.zeros(1, dtype=torch.uint8, device=device),
    )


Pairs = Callable[[int], list[tuple[int, int]]]


def first_pair(world_size: int) -> list[tuple[int, int]]:
    """Ranks 0 and 1 (the other ranks, if any, wait)."""
    return [(0, 1)]


def half_pairs(world_size: int) -> list[tuple[int, int]]:
    """n/2 pairs: rank i sends to rank i + n/2 (as osu_mbw_mr); an odd last rank waits."""
    half = world_size // 2
    return [(i, i + half) for i in range(half)]


@dataclass(frozen=True)
class PointToPoint:
    """What one p2p benchmark states; :func:`run_p2p` does the rest.

    - ``iteration(endpoint)``: this side's timed iteration, built once (buffers, batches).
    - ``messages_per_iteration(window, pairs)``: messages one iteration moves, all pairs.
    - ``receivers``: "both" sides receive payloads, or only the "follower".
    - ``round_trip``: an iteration is a round trip; one-way latency is half of it.
    - ``uses_window``: takes ``--distbench-window``.
    """

    name: str
    pairs: Pairs
    iteration: Callable[[Endpoint], Callable[[], None]]
    messages_per_iteration: Callable[[int, int], int]
    receivers: str = "follower"
    round_trip: bool = False
    uses_window: bool = True


def _idle() -> None:
    return None


def run_p2p(
    distbench: Any,
    member: PointToPoint,
    nbytes: int,
    window: int = 1,
    transport: str | Transport = "process_group",
) -> None:
    """Benchmark `member` at `nbytes` (exact bytes) in this rank through `distbench.measure`.

    `transport` is a name from ``families.transports.TRANSPORTS`` or a Transport instance.
    """
    world_size, rank = distbench.world_size, distbench.rank
    pairs = member.pairs(world_size)
    if world_size < 2 or not pairs:
        pytest.skip(f"{member.name} needs at least 2 ranks; this world has {world_size}")
    if isinstance(transport, str):
        transport = make_transport(transport, distbench)
    used_window = effective_window(window, nbytes) if member.uses_window else 1
    endpoint = None
    for a, b in pairs:
        if rank in (a, b):
            endpoint = make_endpoint(transport, rank, b if rank == a else a, rank == a,
                                     used_window, nbytes, distbench.device)
    fn = member.iteration(endpoint) if endpoint is not None else _idle
    checks = endpoint is not None and (member.receivers == "both" or not endpoint.leader)

    def check() -> int:
        if endpoint is None:
            return 0
        wrong = endpoint.wrong_bytes() if checks else 0  # what the timed loop left
        endpoint.clear()
        fn()
        return wrong + (endpoint.wrong_bytes() if checks else 0)

    figures: dict[str, Any] = {
        "messages_per_iteration": member.messages_per_iteration(used_window, len(pairs)),
        "pairs": len(pairs),
        "transport": transport.name,
        "round_trip": member.round_trip,
    }
    if member.uses_window:
        figures["window"] = used_window
        figures["window_requested"] = window
    measure_messages(distbench, fn, nbytes=nbytes, family=member.name, check=check,
                     figures=figures, ranks=sorted({r for pair in pairs for r in pair}),
                     headline="p50" if member.round_trip else "mean")
