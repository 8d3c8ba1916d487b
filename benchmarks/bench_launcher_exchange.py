"""Launcher mode's per-test exchange, over the store and over gloo, alone (no pytest).

    python -m torch.distributed.run --standalone --nproc-per-node=4 \\
        benchmarks/bench_launcher_exchange.py

Per exchange, alternating, three passes of each:
  store        the launcher's store (torchrun's agent hosts it): the ranks other than 0 set
               their outcome, rank 0 reads them with one multi_get and sets a verdict, which
               the others read;
  rank0-store  the same through a second store whose server is a thread of rank 0;
  socket       one TCP connection from each other rank to rank 0: outcomes in, verdicts out,
               as length-prefixed JSON frames;
  gloo         one all_gather and one broadcast of 256 bytes (a lower bound, without the size
               exchange that variable-size outcomes would need).
Ranks 0 and 1 print wall and CPU time per exchange.
"""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

EXCHANGES = 400  # per pass
OUTCOME = json.dumps({"status": "passed", "message": "", "measurements": [], "output": "",
                      "order": None, "released": False, "info": None})


def main() -> None:
    rank, ws = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                          is_master=False, timeout=timedelta(seconds=60))
    dist.init_process_group("gloo", store=dist.PrefixStore("pg/", store), rank=rank,
                            world_size=ws)
    buf = torch.zeros(256, dtype=torch.uint8)
    gathered = [torch.zeros(256, dtype=torch.uint8) for _ in range(ws)]

    # A second store hosted by rank 0 itself (its server is a thread of rank 0's process, not
    # the torchrun agent): the others find its port through the launcher's store.
    if rank == 0:
        own = dist.TCPStore(os.environ["MASTER_ADDR"], 0, is_master=True,
                            timeout=timedelta(seconds=60), wait_for_workers=False)
        store.set("own-port", str(own.port))
    else:
        own = dist.TCPStore(os.environ["MASTER_ADDR"], int(store.get("own-port")),
                            is_master=False, timeout=timedelta(seconds=60))

    def exchange_through(s: dist.Store, key: str) -> None:
        if rank == 0:
            s.multi_get([f"{key}/outcome/{r}" for r in range(1, ws)])
            s.set(f"{key}/verdict", OUTCOME)
        else:
            s.set(f"{key}/outcome/{rank}", OUTCOME)
            s.multi_get([f"{key}/verdict"])

    # Direct sockets: rank 0 listens, every other rank holds one connection to it.
    import socket
    import struct

    if rank == 0:
        listener = socket.create_server((os.environ["MASTER_ADDR"], 0))
        store.set("sock-port", str(listener.getsockname()[1]))
        peers = []
        for _ in range(ws - 1):
            conn, _addr = listener.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            peers.append(conn)
        listener.close()
    else:
        conn = socket.create_connection((os.environ["MASTER_ADDR"], int(store.get("sock-port"))))
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    payload = OUTCOME.encode()
    frame = struct.pack("!I", len(payload)) + payload

    def read_frame(c: socket.socket) -> bytes:
        head = c.recv(4, socket.MSG_WAITALL)
        (n,) = struct.unpack("!I", head)
        return c.recv(n, socket.MSG_WAITALL)

    def via_socket(key: str) -> None:
        if rank == 0:
            for c in peers:
                json.loads(read_frame(c))
            for c in peers:
                c.sendall(frame)
        else:
            conn.sendall(frame)
            json.loads(read_frame(conn))

    def via_store(key: str) -> None:
        exchange_through(store, key)

    def via_rank0_store(key: str) -> None:
        exchange_through(own, key)

    def via_gloo(key: str) -> None:
        dist.all_gather(gathered, buf)
        dist.broadcast(buf, 0)

    results: dict[str, list[str]] = {}
    passes = [("store", via_store), ("rank0-store", via_rank0_store), ("socket", via_socket),
              ("gloo", via_gloo)] * 3
    for p, (name, exchange) in enumerate(passes):
        dist.barrier()
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(EXCHANGES):
            exchange(f"p{p}/t{i}")
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        results.setdefault(name, []).append(
            f"wall {wall / EXCHANGES * 1e3:.3f} ms cpu {cpu / EXCHANGES * 1e3:.3f} ms")
    if rank in (0, 1):
        print(f"rank {rank}: {results}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
