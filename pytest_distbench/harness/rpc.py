"""RPC inside a world: TensorPipe agents that rendezvous through the world's own store.

init_rpc normally takes a tcp:// URL and makes rank 0 bind a guessed port; instead a
rendezvous handler hands it a prefix of the store the controller already owns.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

_SCHEME = "distbench-store"
_stores: dict[str, tuple[Any, int, int]] = {}
_registered: list[str] = []


@dataclass(frozen=True)
class RpcContext:
    """What the `rpc_agent` fixture gives a test: RPC is up and these are the worker names."""

    name: str
    rank: int
    world_size: int
    worker_names: list[str]


def _handler(url: str, timeout: timedelta = timedelta(seconds=300), **kwargs: Any):
    key = url.split("://", 1)[1].split("?", 1)[0]  # init_rpc appends ?rank=..
    yield _stores[key]


def start_rpc(store: Any, prefix: str, rank: int, world_size: int, timeout_s: float) -> str:
    import torch.distributed as dist
    import torch.distributed.rpc as rpc

    # The package re-exports a function named like the module; import the module itself.
    rendezvous = importlib.import_module("torch.distributed.rendezvous")
    if not _registered:
        rendezvous.register_rendezvous_handler(_SCHEME, _handler)
        _registered.append(_SCHEME)
    _stores[prefix] = (dist.PrefixStore(prefix, store), rank, world_size)
    name = f"worker{rank}"
    options = rpc.TensorPipeRpcBackendOptions(
        init_method=f"{_SCHEME}://{prefix}", rpc_timeout=timeout_s
    )
    rpc.init_rpc(
        name,
        backend=rpc.BackendType.TENSORPIPE,
        rank=rank,
        world_size=world_size,
        rpc_backend_options=options,
    )
    return name


def stop_rpc(timeout_s: float) -> None:
    import torch.distributed.rpc as rpc

    rpc.shutdown(graceful=True, timeout=timeout_s)
