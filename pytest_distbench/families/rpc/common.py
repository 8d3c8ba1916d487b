"""Shared in-rank harness of the RPC family: one rank drives, its peer answers.

Rank 0 (the driver) times the RPC calls; rank 1 (the peer) answers them from its RPC threads
while its own test body times a no-op, so that every rank calls `distbench.measure` the same
number of times, as measure requires.  The record's per-iteration maximum is therefore the
driver's time.  Other ranks of a larger world idle the same way.  The driver's figures carry the
accounting (messages and bytes per iteration, direction) and the rates derived from its p50.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import torch

from . import metrics

DRIVER = 0
PEER = 1


def payload(nbytes: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """A tensor of exactly `nbytes` bytes (uint8), filled with a pattern a check can verify."""
    return (torch.arange(nbytes, dtype=torch.int64) % 251).to(torch.uint8).to(device)


def echo(tensor: torch.Tensor) -> torch.Tensor:
    """The peer's answer for a round trip: the payload itself, sent back."""
    return tensor


def sink(tensor: torch.Tensor) -> None:
    """The peer's answer for throughput: an acknowledgement without payload."""
    return None


def fail_in_handler(message: str) -> None:
    """An RPC handler that raises (used by the tests of failure reporting)."""
    raise RuntimeError(message)


def _noop() -> None:
    return None


def drive(
    distbench: Any,
    rank: int,
    fn: Callable[[], Any],
    *,
    nbytes: int,
    family: str,
    messages: int,
    bytes_per_iteration: int,
    direction: str,
    check: Callable[[], int] | None = None,
    name: str | None = None,
    figures: dict[str, Any] | None = None,
    peer_fn: Callable[[], Any] | None = None,
) -> None:
    """Time `fn` on the driver (`peer_fn` on the peer, no-op elsewhere); attach the rates.

    One iteration is one call of `fn`: `messages` RPCs moving `bytes_per_iteration` payload
    bytes in all; `direction` ("round trip" or "one way") says what a message's time covers.
    """
    driving = rank == DRIVER
    own = {
        "messages_per_iteration": messages,
        "bytes_per_iteration": bytes_per_iteration,
        "direction": direction,
        **(figures or {}),
    }
    own_fn = fn if driving else (peer_fn if rank == PEER and peer_fn else _noop)
    distbench.measure(
        own_fn,
        nbytes=nbytes,
        family=family,
        check=(check or (lambda: 0)) if driving else (lambda: 0),
        name=name,
        figures=own,
        ranks=[DRIVER],  # an iteration is the driver's call; the peer only serves it
    )
    if driving:
        measured = distbench.measurements[-1]
        p50 = statistics.median(measured.samples)
        measured.figures["msgs_per_s"] = metrics.messages_per_s(messages, p50)
        measured.figures["mbps"] = metrics.megabytes_per_s(bytes_per_iteration, p50)


def require_pair(rank: int, world_size: int) -> None:
    import pytest

    if world_size < 2:
        pytest.skip("an RPC round trip needs two ranks (--world-size=2)")
