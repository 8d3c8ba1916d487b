"""The interface every transport implements (process group here; RPC and others later)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

import torch

#: A tensor and the rank it goes to (a send) or comes from (a receive).
Route = tuple[torch.Tensor, int]


class Transport(ABC):
    """Moves whole tensors between two ranks of one world.

    The timed loops call only `send`, `recv` and the callables `batch` returns, so everything
    a transport must prepare (op descriptors, lists) is built once in `batch`, outside the
    timed region: the loops themselves allocate nothing per message.
    """

    #: Name in results (figures["transport"]).
    name: str = "?"

    @abstractmethod
    def send(self, tensor: torch.Tensor, peer: int) -> None:
        """Send `tensor` to `peer` and return when the send buffer may be reused."""

    @abstractmethod
    def recv(self, tensor: torch.Tensor, peer: int) -> None:
        """Receive from `peer` into `tensor` and return when it has arrived."""

    @abstractmethod
    def batch(self, sends: Sequence[Route], recvs: Sequence[Route]) -> Callable[[], None]:
        """A callable that starts all these sends and receives at once and waits for all.

        Every one is in flight before any is waited for: a window of sends, or both directions
        of an exchange (which NCCL must launch as one group, or the two ranks deadlock).
        """
