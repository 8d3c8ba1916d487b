"""How steady a small gloo world is under each --distbench-bind placement, side by side.

    python benchmarks/bench_placement.py [--seconds 20] [--rounds 2]

Two rank processes (torch alone, no plugin) run the A/B workload of bench_ab.py, ten 1 KiB
all_reduce calls per step, for --seconds under each placement in turn, alternating:
  core  the main thread of rank r pinned to CPU r after the group is up (the plugin's default)
  pack  every thread of both ranks pinned to the first CPU
  none  no pinning
For each, printed: the median step, the fraction of steps in the fast mode (under 2x the
fastest placement's median), and how well two back-to-back windows of the same run agree:
the robust sd (1.4826 x MAD) of log(window b / window a) for 0.2 s and 1 s windows, by the
windows' p50 and by their fastest step. That last figure is the noise an A/B round sees.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PLACEMENTS = ("core", "pack", "none")


def pin(rank: int, placement: str) -> None:
    usable = sorted(os.sched_getaffinity(0))
    if placement == "core":
        os.sched_setaffinity(0, {usable[rank % len(usable)]})
    elif placement == "pack":
        for task in os.listdir("/proc/self/task"):
            os.sched_setaffinity(int(task), {usable[0]})


def rank_main(rank: int, store: str, placement: str, seconds: float, out: str) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.FileStore(store, 2), rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=120))
    pin(rank, placement)
    x = torch.zeros(256)
    for _ in range(50):
        dist.all_reduce(x)
    stop = torch.zeros(1)
    steps: list[tuple[float, float]] = []
    began = time.perf_counter()
    while True:
        for _ in range(20):
            t = time.perf_counter()
            for _ in range(10):
                dist.all_reduce(x)
            steps.append((t - began, time.perf_counter() - t))
        # Rank 0 decides when to stop; both ranks leave after the same step.
        stop[0] = float(rank == 0 and time.perf_counter() - began > seconds)
        dist.all_reduce(stop)
        if stop[0]:
            break
    dist.destroy_process_group()
    if rank == 0:
        Path(out).write_text(json.dumps(steps))


def run(placement: str, seconds: float, tmp: Path) -> list[tuple[float, float]]:
    store, out = tmp / f"store-{time.monotonic_ns()}", tmp / "steps.json"
    procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), "--store", str(store),
                               "--placement", placement, "--seconds", str(seconds),
                               "--out", str(out)]) for r in range(2)]
    for p in procs:
        if p.wait(timeout=seconds * 10 + 120):
            sys.exit(f"rank failed under {placement}")
    return [tuple(s) for s in json.loads(out.read_text())]


def windows(steps: list[tuple[float, float]], length: float) -> list[list[float]]:
    found, current, start = [], [], 0.0
    for at, took in steps:
        if at - start >= length and current:
            found.append(current)
            current, start = [], at
        current.append(took)
    return found


def pair_spread(steps: list[tuple[float, float]], length: float, stat) -> float:
    values = [math.log(stat(w)) for w in windows(steps, length)]
    diffs = [values[i + 1] - values[i] for i in range(0, len(values) - 1, 2)]
    if len(diffs) < 3:
        return math.nan
    centre = statistics.median(diffs)
    return 1.4826 * statistics.median(abs(d - centre) for d in diffs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rank", type=int, default=None)
    parser.add_argument("--store", default=None)
    parser.add_argument("--placement", default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.rank is not None:
        rank_main(args.rank, args.store, args.placement, args.seconds, args.out)
        return
    got: dict[str, list[tuple[float, float]]] = {p: [] for p in PLACEMENTS}
    with tempfile.TemporaryDirectory() as name:
        for r in range(args.rounds):
            order = PLACEMENTS if r % 2 == 0 else tuple(reversed(PLACEMENTS))
            for placement in order:
                got[placement] += run(placement, args.seconds, Path(name))
    medians = {p: statistics.median(t for _, t in s) for p, s in got.items()}
    fast = min(medians.values())
    print(f"2 ranks, gloo, ten 1 KiB all_reduce per step; {args.rounds} x {args.seconds:g} s "
          "per placement, alternating; robust sd of log(window b / window a):")
    print("placement | median step (ms) | fast-mode steps | 0.2 s p50 | 0.2 s min | "
          "1 s p50 | 1 s min")
    for p, steps in got.items():
        share = sum(t < 2 * fast for _, t in steps) / len(steps)
        cells = [pair_spread(steps, length, stat) for length in (0.2, 1.0)
                 for stat in (statistics.median, min)]
        print(f"{p:>9} | {medians[p] * 1e3:16.2f} | {share * 100:14.0f} % | "
              + " | ".join(f"{c:9.3f}" for c in cells))


if __name__ == "__main__":
    main()
