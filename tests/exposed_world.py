"""A two-rank world set up the way torch's defaults do it (no plugin): the control case.

Run as a script; prints the listening sockets that are reachable off loopback while a gloo
process group, a TensorPipe agent and a TCPStore master are up.
"""

from __future__ import annotations

import multiprocessing
import sys
from datetime import timedelta

import listeners


def rank_main(rank: int, port: int, queue) -> None:
    import torch.distributed as dist
    import torch.distributed.rpc as rpc

    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=60))
    dist.init_process_group("gloo", store=dist.PrefixStore("pg/", store), rank=rank,
                            world_size=2)
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=2,
                 rpc_backend_options=rpc.TensorPipeRpcBackendOptions(
                     init_method=f"tcp://127.0.0.1:{port + 1}"))
    if rank == 0:
        rpc.rpc_sync("w1", max, args=(1, 2))
        queue.put(listeners.off_loopback(listeners.listening()))
    rpc.shutdown()
    dist.destroy_process_group()


def main() -> None:
    import socket

    import torch.distributed as dist

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    master = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    ranks = [ctx.Process(target=rank_main, args=(r, port, queue)) for r in range(2)]
    for p in ranks:
        p.start()
    exposed = queue.get(timeout=120)
    for p in ranks:
        p.join(60)
        if p.exitcode is None:
            p.kill()
    del master
    print("EXPOSED", exposed)
    sys.exit(0)


if __name__ == "__main__":
    main()
