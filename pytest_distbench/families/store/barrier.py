"""store_barrier: the study's store-based barrier (add, check count, set last-worker key,
wait), run by all N clients at once, repeated; the sample is one barrier on the server.

As in the study, one untimed barrier syncs the clients and then `rounds` barriers run back
to back, timed on rank 0 (the server's own client). One difference: the study reuses its key,
so its count only equals world_size in the first round and later rounds find the last-worker
key already set (they no longer wait for anyone); here each round has its own key, so every
round is a real barrier.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from . import plan
from .common import DidNotComplete, StoreConfig, record_facts, record_incomplete, simulated_store

FAMILY = "store_barrier"


def store_based_barrier(store: Any, key: str, world_size: int, timeout: timedelta) -> None:
    """The study's barrier: count in, the last one in sets the key, everyone waits for it."""
    store.add(key, 1)
    worker_count = store.add(key, 0)
    last_worker_key = f"{key}:last_worker"
    if worker_count == world_size:
        store.set(last_worker_key, "1")
    store.wait([last_worker_key], timeout)


def barrier_rounds(store: Any, clients: int, rounds: int, timeout: timedelta) -> list[float]:
    """One untimed sync barrier, then `rounds` timed ones; seconds per round."""
    store_based_barrier(store, "store_based_barrier_key:sync", clients, timeout)
    times = []
    for r in range(rounds):
        began = time.perf_counter()
        store_based_barrier(store, f"store_based_barrier_key:{r}", clients, timeout)
        times.append(time.perf_counter() - began)
    return times


def run_barrier(distbench: Any, tcp_store: Any, clients: int, backend: str,
                config: StoreConfig) -> None:
    timeout = timedelta(seconds=config.timeout_s)
    try:
        with simulated_store(distbench, tcp_store, clients, backend, config) as sim:
            results, server_times = sim.run_phase(
                lambda client, _id: barrier_rounds(client, clients, config.rounds, timeout),
                lambda store: barrier_rounds(store, clients, config.rounds, timeout),
                label="barrier")
            samples = sim.exchange.from_server("barrier/times", server_times)
            # Per round, the slowest of this rank's clients, then of all ranks' clients.
            slowest = [max(r) for r in zip(*[r for r in results if r], strict=True)]
            slowest_all = sim.exchange.all("barrier/clients", slowest)
            figures = record_facts(sim)
            figures["rounds"] = config.rounds
            figures["client_barrier_max_s"] = [
                max(v) for v in zip(*[s for s in slowest_all if s], strict=True)]
            if sim.connect_s:
                figures.update(plan.connect_summary(sim.connect_s))
    except DidNotComplete as exc:
        record_incomplete(distbench, FAMILY, exc, rounds=config.rounds)
        return
    distbench.record(samples, family=FAMILY, figures=figures)
