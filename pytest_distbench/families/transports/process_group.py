"""The process group's own send/recv/isend/irecv (gloo on CPU, NCCL on GPU)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from .base import Route, Transport


class ProcessGroupTransport(Transport):
    """Point-to-point through the test's process group.

    gloo: blocking `send`/`recv`, and `isend`/`irecv` for a batch, each waited in turn.
    NCCL: a batch is one `batch_isend_irecv` (one NCCL group), the only way two ranks can send
    to each other at once without each stream waiting on the other's receive.
    """

    name = "process_group"

    def __init__(self, distbench: Any) -> None:
        """Made in every rank of the world (idle ranks too): see the NCCL note below."""
        # The default group is passed as None: torch's p2p calls take a measurably slower path
        # (~5 % of a 1-byte message here) when handed the WORLD group object explicitly.
        self.group = None if distbench.group is dist.group.WORLD else distbench.group
        self.grouped = distbench.backend == "nccl"
        if self.grouped:
            # batch_isend_irecv must not be the first NCCL call of the group unless every
            # rank takes part; one collective over all ranks sets the communicator up.
            dist.all_reduce(torch.zeros(1, device=distbench.device), group=self.group)

    def send(self, tensor, peer: int) -> None:
        dist.send(tensor, peer, group=self.group)

    def recv(self, tensor, peer: int) -> None:
        dist.recv(tensor, peer, group=self.group)

    def batch(self, sends: Sequence[Route], recvs: Sequence[Route]) -> Callable[[], None]:
        group = self.group
        if self.grouped:
            ops = [dist.P2POp(dist.irecv, t, p, group) for t, p in recvs]
            ops += [dist.P2POp(dist.isend, t, p, group) for t, p in sends]

            def run_grouped() -> None:
                for work in dist.batch_isend_irecv(ops):
                    work.wait()

            return run_grouped
        if len(sends) == 1 and not recvs:
            # One message is a plain blocking send (what a hand-written loop does).
            (tensor, peer), = sends
            return lambda: dist.send(tensor, peer, group=group)
        if len(recvs) == 1 and not sends:
            (tensor, peer), = recvs
            return lambda: dist.recv(tensor, peer, group=group)
        recv_routes, send_routes = tuple(recvs), tuple(sends)
        held: list[Any] = [None]

        def run() -> None:
            # Receives are posted first so a peer's sends always find them.
            works = [dist.irecv(t, p, group=group) for t, p in recv_routes]
            works += [dist.isend(t, p, group=group) for t, p in send_routes]
            for work in works:
                work.wait()
            # The last work to complete outlives the call (until the next call's waits are
            # done); the others are released here, with the list. Releasing the last one right
            # after its wait, just before the acknowledgement, ran a 1 B window of 10 at 0.44x
            # of the same loop written inline; holding the whole window until the next one
            # was posted, at 0.91x; this, as an inline loop does, at 1.00x (docs/p2p.md).
            if works:
                held[0] = works[-1]

        return run
