"""store_ops: latency and throughput of each store operation with N clients at once.

Every client (the server's own included) runs `rounds` operations of one kind back to back
on keys of its own, all clients at the same time; each operation is timed on its own. The
samples are every operation's latency (seconds), from every client: a round trip, except
for set and multi_set, which return once the request is sent (TCPStore reads no reply); ops/s is
the total count over the wall time of the phase on rank 0 (from the ranks' start barrier to
their end barrier, so it includes one gloo barrier).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from . import plan
from .common import DidNotComplete, StoreConfig, record_facts, record_incomplete, simulated_store

FAMILY = "store_ops"
VALUE = b"distbench-value!"  # 16 bytes
BATCH = 4  # keys per multi_get / multi_set


@dataclass(frozen=True)
class Op:
    """One store operation: how to prepare a client's keys, run it once, and check it."""

    name: str
    prepare: Callable[[Any, int], None]
    run: Callable[[Any, int, int], bool]  # (store, client id, i) -> result is right
    # set and multi_set return once the request is sent: TCPStore waits for no reply.
    round_trip: bool = True


def _key(cid: int, what: str = "v") -> str:
    return f"ops/{cid}/{what}"


def _batch(cid: int) -> list[str]:
    return [_key(cid, f"m{j}") for j in range(BATCH)]


def _set_own(store: Any, cid: int) -> None:
    store.set(_key(cid), VALUE)


def _nothing(store: Any, cid: int) -> None:
    return None


def _set(store: Any, cid: int, i: int) -> bool:
    store.set(_key(cid), VALUE)
    return True


def _get(store: Any, cid: int, i: int) -> bool:
    return store.get(_key(cid)) == VALUE


def _add(store: Any, cid: int, i: int) -> bool:
    return store.add(_key(cid, "n"), 1) == i + 1


def _prepare_cas(store: Any, cid: int) -> None:
    store.set(_key(cid, "cas"), "0")


def _compare_set(store: Any, cid: int, i: int) -> bool:
    want = str((i + 1) % 2).encode()
    return store.compare_set(_key(cid, "cas"), str(i % 2), want.decode()) == want


def _wait(store: Any, cid: int, i: int) -> bool:
    store.wait([_key(cid)])  # the key exists: one round trip, no waiting on anyone
    return True


def _multi_set(store: Any, cid: int, i: int) -> bool:
    store.multi_set(_batch(cid), [VALUE] * BATCH)
    return True


def _prepare_multi_get(store: Any, cid: int) -> None:
    store.multi_set(_batch(cid), [VALUE] * BATCH)


def _multi_get(store: Any, cid: int, i: int) -> bool:
    return list(store.multi_get(_batch(cid))) == [VALUE] * BATCH


OPS: dict[str, Op] = {op.name: op for op in (
    Op("set", _nothing, _set, round_trip=False),
    Op("get", _set_own, _get),
    Op("add", _nothing, _add),
    Op("compare_set", _prepare_cas, _compare_set),
    Op("wait", _set_own, _wait),
    Op("multi_set", _nothing, _multi_set, round_trip=False),
    Op("multi_get", _prepare_multi_get, _multi_get),
)}


def available_ops() -> list[str]:
    """The operations this torch's TCPStore has (multi_get/multi_set came in 2.x)."""
    return [name for name in OPS if hasattr(dist.TCPStore, name)]


def _loop(op: Op, rounds: int) -> Callable[[Any, int], tuple[list[float], int]]:
    def task(store: Any, cid: int) -> tuple[list[float], int]:
        op.prepare(store, cid)
        times, wrong = [], 0
        for i in range(rounds):
            began = time.perf_counter()
            ok = op.run(store, cid, i)
            times.append(time.perf_counter() - began)
            wrong += 0 if ok else 1
        return times, wrong

    return task


def run_ops(distbench: Any, tcp_store: Any, clients: int, backend: str,
            config: StoreConfig) -> None:
    measured = []
    stopped: tuple[str, DidNotComplete] | None = None
    try:
        with simulated_store(distbench, tcp_store, clients, backend, config) as sim:
            _run_ops(sim, config, measured)
    except DidNotComplete as exc:
        # The operations measured before it keep their records; the rest did not run.
        stopped = (exc.what if exc.what in OPS else "connect", exc)
    for name, samples, wrong, figures in measured:
        # The controller adds `wrong` over ranks: only the server's rank reports the total.
        distbench.record(samples, family=FAMILY, name=name, figures=figures,
                         wrong=wrong if distbench.rank == plan.SERVER_RANK else 0)
    if stopped is not None:
        name, exc = stopped
        record_incomplete(distbench, FAMILY, exc, name=name, op=name, rounds=config.rounds)


def _run_ops(sim: Any, config: StoreConfig, measured: list[Any]) -> None:
    """Each operation in turn on every client at once; appends (name, samples, wrong,
    figures) to `measured` as each completes."""
    facts = record_facts(sim)
    for name in available_ops():
        task = _loop(OPS[name], config.rounds)
        dist.barrier(group=sim.group)
        began = time.perf_counter()
        results, mine = sim.run_phase(task, lambda store, t=task: t(store, 0), label=name)
        dist.barrier(group=sim.group)
        wall = time.perf_counter() - began
        per_client = [r for r in results if r] + ([mine] if mine else [])
        latencies = [t for times, _ in per_client for t in times]
        wrong = sum(w for _, w in per_client)
        everyone = sim.exchange.all(f"{name}/latencies", [latencies, wrong])
        wall = sim.exchange.from_server(f"{name}/wall", wall)
        samples = [t for lat, _ in everyone for t in lat]
        figures = dict(facts, op=name, rounds=config.rounds,
                       round_trip=OPS[name].round_trip,
                       **plan.latency_summary(samples, wall))
        measured.append((name, samples, sum(w for _, w in everyone), figures))
