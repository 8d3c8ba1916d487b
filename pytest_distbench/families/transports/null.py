"""A transport that moves nothing: what remains of a message loop is the harness's own work.

Not a transport a benchmark measures with (it is not in TRANSPORTS): the harness-cost check in
tests/test_p2p_rates.py and benchmarks/bench_message_rate.py run the message loops over it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from .base import Route, Transport


class NullTransport(Transport):
    name = "null"

    def send(self, tensor: torch.Tensor, peer: int) -> None:
        return None

    def recv(self, tensor: torch.Tensor, peer: int) -> None:
        return None

    def batch(self, sends: Sequence[Route], recvs: Sequence[Route]) -> Callable[[], None]:
        return _nothing


def _nothing() -> None:
    return None
