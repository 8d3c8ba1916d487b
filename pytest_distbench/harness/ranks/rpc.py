"""RPC inside a world: TensorPipe agents that rendezvous through the world's own store.

init_rpc normally takes a tcp:// URL and makes rank 0 bind a guessed port; instead a
rendezvous handler hands it a prefix of the store the controller already owns.  An agent lives
for one test: the rank shuts it down when the test ends (gracefully after a pass, locally after
a failure, so a rank whose peer raised never waits for that peer).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

_SCHEME = "distbench-store"
# Above this many ranks the `rpc_agent` fixture restricts TensorPipe to its uv (TCP) transport.
# At start-up every rank connects to rank 0 at once; TensorPipe's shm transport listens on a
# unix socket whose accept queue overflows under that burst on a small machine, and a
# non-blocking connect to a full unix socket fails at once (EAGAIN, "connect: Resource
# temporarily unavailable", tensorpipe/common/socket.cc) where TCP would retry the SYN.  Measured
# on 2 cores: 20 ranks start with shm, 40 and 80 do not; with uv only, 80 ranks run.
SHM_MAX_WORLD = 20
_stores: dict[str, tuple[Any, int, int]] = {}
_registered: list[str] = []


@dataclass(frozen=True)
class RpcContext:
    """What the `rpc_agent` fixture gives a test: RPC is up and these are the worker names."""

    name: str
    rank: int
    world_size: int
    worker_names: list[str]
    transports: tuple[str, ...] | None = None  # None: TensorPipe's own choice (shm, uv, ...)


def fixture_transports(world_size: int) -> list[str] | None:
    """The transports the `rpc_agent` fixture asks TensorPipe for in a world of this size."""
    return None if world_size <= SHM_MAX_WORLD else ["uv"]


def worker_name(rank: int) -> str:
    return f"worker{rank}"


def _handler(url: str, timeout: timedelta = timedelta(seconds=300), **kwargs: Any):
    key = url.split("://", 1)[1].split("?", 1)[0]  # init_rpc appends ?rank=..
    yield _stores[key]


def start_rpc(
    store: Any,
    prefix: str,
    rank: int,
    world_size: int,
    timeout_s: float,
    *,
    transports: list[str] | None = None,
    channels: list[str] | None = None,
    device_maps: dict[str, dict[Any, Any]] | None = None,
    devices: list[Any] | None = None,
) -> str:
    """Start this rank's TensorPipe agent; `transports`/`channels` None = TensorPipe's choice."""
    import torch.distributed as dist
    import torch.distributed.rpc as rpc

    # The package re-exports a function named like the module; import the module itself.
    rendezvous = importlib.import_module("torch.distributed.rendezvous")
    if not _registered:
        rendezvous.register_rendezvous_handler(_SCHEME, _handler)
        _registered.append(_SCHEME)
    _stores[prefix] = (dist.PrefixStore(prefix, store), rank, world_size)
    name = worker_name(rank)
    options = rpc.TensorPipeRpcBackendOptions(
        init_method=f"{_SCHEME}://{prefix}",
        rpc_timeout=timeout_s,
        _transports=transports,
        _channels=channels,
        device_maps=device_maps,
        devices=devices,
    )
    try:
        rpc.init_rpc(
            name,
            backend=rpc.BackendType.TENSORPIPE,
            rank=rank,
            world_size=world_size,
            rpc_backend_options=options,
        )
    finally:
        _stores.pop(prefix, None)  # the agent holds its own reference once started
    return name


def stop_rpc(timeout_s: float, graceful: bool = True) -> None:
    """Shut the agent down: graceful waits for every worker's outstanding work (bounded)."""
    import torch.distributed.rpc as rpc

    rpc.shutdown(graceful=graceful, timeout=timeout_s)
