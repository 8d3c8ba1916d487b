"""Records and environments for the tests of the results file, the verdicts and the CLI."""

from __future__ import annotations

from pytest_distbench.results.statistics.stats import summarize

ENVIRONMENT = {
    "torch": "2.13.0+cpu",
    "python": "3.11.7",
    "platform": "Linux-x86_64",
    "hostname": "bench-host",
    "cpu_model": "Test CPU",
    "cpu_count": 2,
    "gpus": [],
    "cuda": None,
    "nccl": None,
    "gloo": True,
    "world_sizes": [2],
    "env": {"GLOO_SOCKET_IFNAME": "lo"},
}


def benchmark_record(
    size: int, samples: list[float], rank_samples: list[list[float]] | None = None
) -> dict:
    """A complete all_reduce record of `size` bytes at 2 ranks, as the plugin writes it."""
    name = f"test_all_reduce[gloo-ws2-{size}]"
    summary = summarize(samples).as_dict()
    return {
        "id": f"pytest_distbench/suites/test_collectives.py::{name}",
        "name": name,
        "family": "all_reduce",
        "backend": "gloo",
        "world_size": 2,
        "device": "cpu",
        "params": {"nbytes": size},
        "nbytes": size,
        "count": size // 4,
        "dtype": "float32",
        "busbw_factor": 1.0,
        "warmup": 5,
        "iterations": len(samples),
        "samples": samples,
        "rank_samples": rank_samples if rank_samples is not None else [samples, samples],
        "summary": summary,
        "algbw_gbps": size / summary["p50"] / 1e9,
        "busbw_gbps": size / summary["p50"] / 1e9,
        "wrong": 0,
        "skew": 1.0,
        "stalls": 0,
        "threshold": None,
    }


DELETE = object()  # set_at's value that removes the key


def set_at(doc: dict, dotted: str, value: object) -> None:
    """Damage a parsed JSON document: `a.0.b` set to `value` (DELETE removes it)."""
    target = doc
    parts = dotted.split(".")
    for part in parts[:-1]:
        target = target[int(part)] if isinstance(target, list) else target[part]
    last = parts[-1]
    if value is DELETE:
        del target[last]
    elif isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
