"""Synthetic records of every family, shaped as CONTRACTS.md / docs/results-schema.md say.

The timings follow simple models (latency + bytes / bandwidth, with noise) so that a plot of
them has the shape a real run has; the tests count series and points, never figures.
"""

from __future__ import annotations

import random
from typing import Any

from results_data import ENVIRONMENT

from pytest_distbench.registry import completed_figures
from pytest_distbench.results.statistics.stats import summarize

SIZES = [4 << (2 * i) for i in range(13)]  # 4 B .. 64 MiB, x4


def record(family: str, *, seconds: float, backend: str = "gloo", world_size: int = 2,
           nbytes: int | None = None, params: dict[str, Any] | None = None,
           figures: dict[str, Any] | None = None, busbw_factor: float | None = None,
           n: int = 60, seed: int = 0) -> dict[str, Any]:
    rng = random.Random(f"{family}{backend}{world_size}{nbytes}{params}{seed}")
    samples = [seconds * (1 + abs(rng.gauss(0, 0.15))) for _ in range(n)]
    summary = summarize(samples).as_dict()
    params = dict(params or {})
    if nbytes is not None:
        params.setdefault("nbytes", nbytes)
    ident = "-".join(str(v) for v in [backend, f"ws{world_size}", *params.values()])
    name = f"test_{family}[{ident}]"
    algbw = nbytes / summary["p50"] / 1e9 if nbytes else None
    made = {
        "id": f"suite.py::{name}", "name": name, "family": family, "backend": backend,
        "world_size": world_size, "device": "cpu", "params": params, "nbytes": nbytes,
        "count": None if nbytes is None else nbytes // 4, "dtype": "float32",
        "busbw_factor": busbw_factor, "warmup": 5, "iterations": n, "samples": samples,
        "rank_samples": [samples] * world_size, "summary": summary, "algbw_gbps": algbw,
        "busbw_gbps": None if algbw is None or busbw_factor is None else algbw * busbw_factor,
        "wrong": 0, "skew": 1.0, "stalls": 0, "threshold": None, "figures": figures or {},
    }
    made["figures"] = completed_figures(made)  # a family's derived figures, as the pipeline's
    return made


def collectives(world_sizes=(2, 4), backends=("gloo",)) -> list[dict[str, Any]]:
    out = []
    for family, factor in (("all_reduce", lambda n: 2 * (n - 1) / n),
                           ("all_gather", lambda n: (n - 1) / n)):
        for backend in backends:
            for ws in world_sizes:
                for size in SIZES:
                    out.append(record(family, backend=backend, world_size=ws, nbytes=size,
                                      seconds=20e-6 * ws + size / 2e9, busbw_factor=factor(ws)))
    for ws in world_sizes:
        out.append(record("barrier", world_size=ws, seconds=15e-6 * ws))
    return out


def p2p() -> list[dict[str, Any]]:
    out = []
    for size in SIZES:
        out.append(record("p2p_latency", nbytes=size, seconds=2 * (8e-6 + size / 3e9),
                          figures={"messages_per_iteration": 2}))
        out.append(record("p2p_bandwidth", nbytes=size, seconds=64 * (4e-6 + size / 3e9),
                          figures={"messages_per_iteration": 64}))
    return out


def message_rate() -> list[dict[str, Any]]:
    out = []
    for path in ("client_to_computation", "computation_to_client", "computation_to_computation"):
        for credits in (1, 2, 4, 8, 16, 32):
            k = 100
            out.append(record("message_rate", world_size=4, nbytes=1024,
                              params={"path": path, "credits": credits},
                              seconds=k * 30e-6 / credits ** 0.6,
                              figures={"messages_per_iteration": k}))
    return out


def _percentiles(value: float) -> dict[str, float]:
    return {"p50": value, "p75": value * 1.1, "p90": value * 1.25, "p95": value * 1.4}


def rpc() -> list[dict[str, Any]]:
    out = []
    for ws in (3, 5, 9):
        agent = 2e-4 * ws
        observer = agent * 1.5
        out.append(record("agent_observer", world_size=ws, seconds=observer, params={
            "batch": True}, figures={"metric": "agent_latency", "metrics": {
                "agent_latency_s": _percentiles(agent),
                "agent_throughput": _percentiles((ws - 1) / agent),
                "observer_latency_s": _percentiles(observer),
                "observer_throughput": _percentiles(1 / observer)}}))
    for transport in ("tensorpipe_shm", "tensorpipe_uv", "gloo_send_recv"):
        for size in SIZES[:9]:
            slow = 3 if transport == "tensorpipe_uv" else 1
            out.append(record("rpc_transports", nbytes=size, params={"transport": transport},
                              seconds=slow * (40e-6 + size / 1e9)))
    return out


def store() -> list[dict[str, Any]]:
    out = []
    for backend, cost in (("libuv", 1.0), ("legacy", 2.5)):
        for clients in (8, 32, 128, 512):
            out.append(record("store_init", world_size=2, params={
                "clients": clients, "store_backend": backend}, seconds=cost * clients * 1e-4))
            out.append(record("store_barrier", world_size=2, params={
                "clients": clients, "store_backend": backend}, seconds=clients * 4e-5))
    return out


def every_family() -> list[dict[str, Any]]:
    return collectives() + p2p() + message_rate() + rpc() + store()


def document(records: list[dict[str, Any]]) -> dict[str, Any]:
    from pytest_distbench.results.document import make_document

    env = dict(ENVIRONMENT, world_sizes=sorted({r["world_size"] for r in records}))
    return make_document(records, env, ["pytest", "--distbench"], commit_info={"id": "x"})
