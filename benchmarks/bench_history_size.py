"""What a baseline's history costs: bytes per stored run per benchmark, the file at the main
job's size, and the time to read it and find every benchmark's segments (docs/gating.md).

The benchmark ids are the main job's own (`pytest --collect-only --distbench --world-size=8`
on the built-in suites, a subprocess); each run is appended through history.append_run, as
`--distbench-append` does, with each p50 drawn around 1 ms (2 % noise).

    python benchmarks/bench_history_size.py [--runs 100] [--ids N]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pytest_distbench.results.comparison.series import series_of
from pytest_distbench.results.document import make_document, read_document
from pytest_distbench.results.document.history import append_run
from pytest_distbench.results.statistics.stats import summarize

ROOT = Path(__file__).resolve().parent.parent


def main_job_ids() -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "--distbench", "--world-size=8",
         "-p", "no:cacheprovider", "--pyargs", "pytest_distbench.suites"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    if not ids:
        sys.exit(f"no test collected:\n{done.stdout}\n{done.stderr}")
    return ids


def record(benchmark_id: str, p50: float) -> dict:
    samples = [p50 * (1 + 0.01 * (k % 7 - 3)) for k in range(40)]
    return {"id": benchmark_id, "name": benchmark_id.split("::", 1)[1], "family": "all_reduce",
            "backend": "gloo", "world_size": 8, "device": "cpu", "params": {}, "nbytes": 1024,
            "warmup": 5, "iterations": len(samples), "samples": samples,
            "rank_samples": [samples], "summary": summarize(samples).as_dict(), "wrong": 0,
            "skew": 1.0, "stalls": 0, "threshold": None}


ENVIRONMENT = {"torch": "2.13.0+cpu", "cpu_model": "a CPU", "cpu_count": 16, "gpus": [],
               "cuda": None, "nccl": None, "world_sizes": [8], "cpu_probe_s": [0.003, 0.003]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--ids", type=int, default=None, help="use only the first N ids")
    args = parser.parse_args()
    ids = main_job_ids()[:args.ids]
    rng = random.Random(1)
    sizes = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "main.json"
        for _ in range(args.runs):
            doc = make_document([record(b, 0.001 * (1 + rng.gauss(0, 0.02))) for b in ids],
                                ENVIRONMENT, ["pytest", "--distbench"],
                                commit_info={"id": f"{rng.getrandbits(160):040x}", "dirty": False})
            append_run(doc, path, keep=args.runs)
            sizes.append(os.path.getsize(path))
        began = time.perf_counter()
        read = read_document(path)
        series_of(read)  # the first call imports numpy, ruptures and scipy
        first = time.perf_counter() - began
        began = time.perf_counter()
        series_of(read_document(path))
        again = time.perf_counter() - began
    per_run = (sizes[-1] - sizes[1]) / (len(sizes) - 2)
    mean_id = sum(map(len, ids)) / len(ids)
    print(f"{len(ids)} benchmark ids of the main job (mean {mean_id:.0f} characters), "
          f"{args.runs} runs appended")
    print(f"file of 1 run: {sizes[0]:,} bytes; of {args.runs} runs: {sizes[-1]:,} bytes")
    print(f"each stored run adds {per_run:,.0f} bytes: {per_run / len(ids):.0f} bytes per "
          "benchmark")
    print(f"read and segment every benchmark: {first:.2f} s the first time in a process "
          f"(imports included), {again:.2f} s again")


if __name__ == "__main__":
    main()
