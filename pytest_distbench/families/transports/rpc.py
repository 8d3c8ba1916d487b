"""torch.distributed.rpc as a transport: each message is one RPC carrying the tensor.

A send is an RPC that hands the payload to the receiving process, where it waits in an inbox
per sender until `recv` copies it into the receiver's buffer. A blocking `send` returns when
the peer has the payload (rpc_sync); a batch of sends has all its RPCs in flight at once
(rpc_async) and waits for all of them, so credits mean the same as with the process group.

The test must ask for the `rpc_agent` fixture: the agent is the world's TensorPipe agent.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ...harness.ranks.rpc import worker_name
from .base import Route, Transport

# Payloads that arrived in this process, per sending rank, with their place in the sender's
# batch (filled on RPC threads). RPCs in flight together may be handled in any order.
_INBOXES: dict[int, queue.SimpleQueue[tuple[int, torch.Tensor]]] = {}


def _inbox(sender: int) -> queue.SimpleQueue[tuple[int, torch.Tensor]]:
    return _INBOXES.setdefault(sender, queue.SimpleQueue())


def _deliver(sender: int, index: int, payload: torch.Tensor) -> None:
    """Runs in the receiving process, on an RPC thread."""
    _inbox(sender).put((index, payload))


def _positions(routes: Sequence[Route]) -> list[int]:
    """Each route's place among the routes to or from the same peer (what `index` says)."""
    seen: dict[int, int] = {}
    places = []
    for _, peer in routes:
        places.append(seen.get(peer, 0))
        seen[peer] = places[-1] + 1
    return places


class RpcTransport(Transport):
    name = "rpc"

    def __init__(self, distbench: Any) -> None:
        import torch.distributed.rpc as rpc

        try:
            rpc.get_worker_info()
        except RuntimeError:
            raise RuntimeError(
                "the rpc transport needs RPC up in every rank: ask for the `rpc_agent` fixture"
            ) from None
        self._rpc = rpc
        self.rank = distbench.rank
        self.timeout_s = float(getattr(distbench, "timeout_s", 300.0))
        self._names = [worker_name(r) for r in range(distbench.world_size)]
        # Inboxes must exist before a peer's first message lands on an RPC thread.
        for peer in range(distbench.world_size):
            _inbox(peer)

    def send(self, tensor: torch.Tensor, peer: int) -> None:
        self._rpc.rpc_sync(self._names[peer], _deliver, args=(self.rank, 0, tensor))

    def recv(self, tensor: torch.Tensor, peer: int) -> None:
        tensor.copy_(self._take(peer)[1])

    def _take(self, peer: int) -> tuple[int, torch.Tensor]:
        try:
            return _INBOXES[peer].get(timeout=self.timeout_s)
        except queue.Empty:
            raise TimeoutError(
                f"rpc transport: nothing from rank {peer} within {self.timeout_s:g} s"
            ) from None

    def batch(self, sends: Sequence[Route], recvs: Sequence[Route]) -> Callable[[], None]:
        rpc_async, names, rank = self._rpc.rpc_async, self._names, self.rank
        send_args = [(names[p], (rank, i, t)) for (t, p), i in zip(sends, _positions(sends),
                                                                    strict=True)]
        # Where the payload with a given (peer, index) goes.
        targets = {(p, i): t for (t, p), i in zip(recvs, _positions(recvs), strict=True)}
        peers = [p for _, p in recvs]
        take = self._take

        def run() -> None:
            futures = [rpc_async(name, _deliver, args=args) for name, args in send_args]
            for peer in peers:
                index, payload = take(peer)
                targets[(peer, index)].copy_(payload)
            for future in futures:
                future.wait()

        return run
