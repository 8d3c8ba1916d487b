"""Launcher mode's per-test exchange, over the store and over gloo, alone (no pytest).

    python -m torch.distributed.run --standalone --nproc-per-node=4 \\
        benchmarks/bench_launcher_exchange.py

Per exchange: the store (every rank sets its outcome, rank 0 reads all with one multi_get and
sets a verdict, the others read it) against gloo (one all_gather and one broadcast of 256
bytes: a lower bound, without the size exchange that variable-size outcomes would need).
Ranks 0 and 1 print wall and CPU time per exchange, two passes of each, alternating.
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

    def via_store(key: str) -> None:
        store.set(f"{key}/outcome/{rank}", OUTCOME)
        if rank == 0:
            store.multi_get([f"{key}/outcome/{r}" for r in range(1, ws)])
            store.set(f"{key}/verdict", OUTCOME)
        else:
            store.multi_get([f"{key}/verdict"])

    def via_gloo(key: str) -> None:
        dist.all_gather(gathered, buf)
        dist.broadcast(buf, 0)

    results: dict[str, list[str]] = {}
    for p, (name, exchange) in enumerate([("store", via_store), ("gloo", via_gloo)] * 2):
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
