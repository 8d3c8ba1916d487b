"""A TensorPipe agent with transport and channel options, for the length of a `with` block.

The `rpc_agent` fixture gives a test TensorPipe's own choices; a test that compares transports
starts one agent per transport under its own store prefix.  Leaving the block shuts the agent
down: gracefully when the block ended normally (every worker's outstanding work is finished,
bounded by the timeout), locally at once after an exception, so a rank never waits for a peer
that has already failed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ...harness.ranks.rpc import start_rpc, stop_rpc

SHUTDOWN_TIMEOUT_S = 60.0


@contextmanager
def tensorpipe_agent(
    store: Any,
    prefix: str,
    rank: int,
    world_size: int,
    *,
    transports: list[str] | None = None,
    channels: list[str] | None = None,
    device_maps: dict[str, dict[Any, Any]] | None = None,
    devices: list[Any] | None = None,
    timeout_s: float = SHUTDOWN_TIMEOUT_S,
) -> Iterator[str]:
    name = start_rpc(store, prefix, rank, world_size, timeout_s, transports=transports,
                     channels=channels, device_maps=device_maps, devices=devices)
    try:
        yield name
    except BaseException:
        stop_rpc(timeout_s, graceful=False)
        raise
    stop_rpc(timeout_s, graceful=True)
