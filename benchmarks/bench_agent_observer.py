"""The agent/observer test side by side with PyTorch's own RL RPC benchmark, alternating.

    python benchmarks/bench_agent_observer.py --upstream DIR [--rounds 3]
        [--world-sizes 4,10] [--batch true,false] [--episodes 10] [--steps 100]
        [--tolerance 0.10] [--product-args="--distbench-bind=none"] [--spawned]
        [--upstream-threads ranks|torch]

DIR holds upstream's four scripts from pytorch/pytorch benchmarks/distributed/rpc/rl
(launcher.py, agent.py, observer.py, coordinator.py), unmodified; they are not part of this
repository.  For every (world size, batch) point and round, the product runs first in one
round and second in the next: `pytest --distbench --pyargs pytest_distbench.suites -k
agent_observer` at the same settings, and upstream's `launcher.py` in its own spawned
processes.  Printed per point: the median over rounds of agent latency p50, agent throughput
p50, observer latency p50 and observer throughput p50 for each side, the product/upstream
ratio of the medians and the spread of the per-round ratios.  With --spawned the product's
agent/observer classes run without pytest, in processes spawned as upstream's launcher spawns
its own (unpinned, fresh interpreters, env:// rendezvous), which separates the work per step
from the harness's placement.  Exits 1 when a median ratio of
agent latency p50 or agent throughput p50 is outside 1 +- tolerance (`--tolerance 0` to only
print).

Upstream runs as published on torch 2.13 CPU; what this script does at run time, without
editing upstream's files:
- upstream's launcher runs 10 episodes x 100 steps (TOTAL_EPISODES, TOTAL_EPISODE_STEPS);
  other --episodes/--steps values are set on its module before it starts;
- its coordinator rounds latencies to 3 decimals and throughputs to integers before it
  reports them (0.000 s at these sizes); the driver shadows `round` and `int` in the
  coordinator module so that the unrounded percentiles reach its report file;
- each run gets a free --master-port (upstream's default 29501 may be taken).
The driver is a small file written to a temporary directory: launcher.py uses the spawn
context, whose children re-import the main module, so the patches apply in every rank.

Timings on a shared machine move; read the ratios and the spread, and rerun on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

METRICS = ("agent_latency_s", "agent_throughput", "observer_latency_s", "observer_throughput")
UPSTREAM_KEYS = {"agent_latency_s": "agent latency (seconds)",
                 "agent_throughput": "agent throughput",
                 "observer_latency_s": "observer latency (seconds)",
                 "observer_throughput": "observer throughput"}
GATED = ("agent_latency_s", "agent_throughput")

DRIVER = '''\
import sys
sys.path.insert(0, {upstream!r})
import coordinator
coordinator.round = lambda value, ndigits=None: float(value)
coordinator.int = float
import launcher
launcher.TOTAL_EPISODES = {episodes}
launcher.TOTAL_EPISODE_STEPS = {steps}
if __name__ == "__main__":
    launcher.main()
'''

SPAWNED = '''\
import json, os, sys
import numpy as np
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
sys.path.insert(0, {repo!r})


def worker(rank, world_size, port, batch, episodes, steps, queue):
    from pytest_distbench.families.rpc import agent_observer
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    names = [f"worker{{r}}" for r in range(world_size)]
    rpc.init_rpc(names[rank], rank=rank, world_size=world_size)
    if rank == 0:
        result = agent_observer.coordinate(
            names, batch=batch, state_size=(10, 20, 10), nlayers=5, out_features=10,
            episodes=episodes, steps=steps)
        queue.put({{side: float(np.percentile(result[side], 50))
                   for side in ("agent", "observer")}})
    rpc.shutdown()


if __name__ == "__main__":
    world_size, batch, port = int(sys.argv[1]), sys.argv[2] == "True", int(sys.argv[3])
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    procs = [ctx.Process(target=worker, args=(r, world_size, port, batch, {episodes}, {steps},
                                              queue)) for r in range(world_size)]
    for p in procs:
        p.start()
    result = queue.get()
    for p in procs:
        p.join()
    print(json.dumps(result))
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fail(proc: subprocess.CompletedProcess[str], what: str) -> None:
    sys.exit(f"{what} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n"
             f"{proc.stderr[-3000:]}")


def run_product(tmp: Path, world_size: int, batch: bool, episodes: int, steps: int,
                extra: list[str]) -> dict[str, float]:
    out = tmp / f"product-{time.monotonic_ns()}.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--distbench",
         "--pyargs", "pytest_distbench.suites", "-k", "agent_observer",
         f"--world-size={world_size}", f"--distbench-batch={str(batch).lower()}",
         f"--distbench-episodes={episodes}", f"--distbench-steps={steps}",
         f"--distbench-json={out}", *extra],
        capture_output=True, text=True, timeout=1200, cwd=tmp, env=env)
    if proc.returncode != 0:
        _fail(proc, f"product ws{world_size} batch={batch}")
    record = json.loads(out.read_text())["benchmarks"][0]["distbench"]
    return {m: record["figures"]["metrics"][m]["p50"] for m in METRICS}


def run_spawned(tmp: Path, world_size: int, batch: bool, episodes: int,
                steps: int, threads: str) -> dict[str, float]:
    script = tmp / "product_spawned.py"
    script.write_text(SPAWNED.format(repo=str(Path(__file__).resolve().parents[1]),
                                     episodes=episodes, steps=steps))
    proc = subprocess.run(
        [sys.executable, str(script), str(world_size), str(batch), str(_free_port())],
        capture_output=True, text=True, timeout=1200, cwd=tmp,
        env=upstream_env(world_size, threads))
    if proc.returncode != 0:
        _fail(proc, f"product (spawned) ws{world_size} batch={batch}")
    p50 = json.loads(proc.stdout.strip().splitlines()[-1])
    observers = world_size - 2
    return {"agent_latency_s": p50["agent"], "observer_latency_s": p50["observer"],
            # p50 of the per-sample throughputs; equal to this for an odd sample count
            "agent_throughput": (observers if batch else 1) / p50["agent"],
            "observer_throughput": 1 / p50["observer"]}


def upstream_env(world_size: int, threads: str) -> dict[str, str]:
    """Upstream's environment: with threads="ranks", the intra-op threads the product's ranks
    get (harness/ranks/threads.py, torchrun's rule: the host's CPUs shared among the ranks); with
    "torch", torch's own default (every process sized to the whole machine)."""
    env = dict(os.environ)
    if threads == "ranks" and "OMP_NUM_THREADS" not in env:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from pytest_distbench.harness.ranks.threads import intra_op_threads

        usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
            os.cpu_count() or 1)
        env["OMP_NUM_THREADS"] = str(intra_op_threads(env, usable, world_size, None))
    return env


def run_upstream(tmp: Path, upstream: Path, world_size: int, batch: bool, episodes: int,
                 steps: int, threads: str) -> dict[str, float]:
    driver = tmp / "upstream_driver.py"
    driver.write_text(DRIVER.format(upstream=str(upstream), episodes=episodes, steps=steps))
    out = tmp / f"upstream-{time.monotonic_ns()}.json"
    proc = subprocess.run(
        [sys.executable, str(driver), "--world-size", str(world_size), "--batch", str(batch),
         "--master-port", str(_free_port()), "--output-file-path", str(out)],
        capture_output=True, text=True, timeout=1200, cwd=tmp,
        env=upstream_env(world_size, threads))
    if proc.returncode != 0:
        _fail(proc, f"upstream ws{world_size} batch={batch}")
    result = json.loads(out.read_text())["benchmark_results"][0]
    return {m: float(result[UPSTREAM_KEYS[m]]["p50"]) for m in METRICS}


def _fmt(metric: str, value: float) -> str:
    return f"{value * 1e3:8.3f} ms" if metric.endswith("_s") else f"{value:8.0f} /s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, type=Path,
                        help="directory with upstream's launcher.py, agent.py, observer.py, "
                             "coordinator.py")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--world-sizes", default="4,10")
    parser.add_argument("--batch", default="true,false")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--tolerance", type=float, default=0.10)
    parser.add_argument("--spawned", action="store_true",
                        help="run the product's classes in upstream-style spawned processes "
                             "instead of through pytest")
    parser.add_argument("--upstream-threads", choices=("ranks", "torch"), default="ranks",
                        help="ranks: upstream's processes get the intra-op threads the "
                             "product's ranks get (torchrun's rule); torch: torch's default")
    parser.add_argument("--product-args", default="",
                        help="extra pytest arguments for the product's runs, space separated")
    args = parser.parse_args()
    upstream = args.upstream.resolve()
    missing = [f for f in ("launcher.py", "agent.py", "observer.py", "coordinator.py")
               if not (upstream / f).is_file()]
    if missing:
        sys.exit(f"--upstream {upstream}: missing {', '.join(missing)}")
    points = [(int(ws), b.strip().lower() == "true")
              for ws in args.world_sizes.split(",") if ws
              for b in args.batch.split(",") if b]
    runs: dict[tuple[int, bool], dict[str, list[dict[str, float]]]] = {
        p: {"product": [], "upstream": []} for p in points}
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for round_no in range(args.rounds):
            for ws, batch in points:
                sides = [("product", lambda ws=ws, batch=batch: run_spawned(
                              tmp, ws, batch, args.episodes, args.steps,
                              args.upstream_threads) if args.spawned
                          else run_product(tmp, ws, batch, args.episodes, args.steps,
                                           args.product_args.split())),
                         ("upstream", lambda ws=ws, batch=batch: run_upstream(
                              tmp, upstream, ws, batch, args.episodes, args.steps,
                              args.upstream_threads))]
                if round_no % 2:
                    sides.reverse()
                for side, run in sides:
                    runs[(ws, batch)][side].append(run())
                p, u = runs[(ws, batch)]["product"][-1], runs[(ws, batch)]["upstream"][-1]
                print(f"round {round_no + 1} ws{ws} batch={batch}: agent p50 product "
                      f"{p['agent_latency_s'] * 1e3:.3f} ms upstream "
                      f"{u['agent_latency_s'] * 1e3:.3f} ms", flush=True)
    print(f"\n{args.episodes} episodes x {args.steps} steps, state 10-20-10, 5 layers, "
          f"10 features; product "
          f"{'spawned' if args.spawned else ' '.join(['pytest', *args.product_args.split()])}; "
          f"upstream threads: {args.upstream_threads}; "
          f"median of {args.rounds} alternating rounds "
          f"({time.perf_counter() - began:.0f} s); load average {os.getloadavg()[0]:.1f}")
    outside = []
    for ws, batch in points:
        print(f"\nworld size {ws}, batch {batch}")
        for metric in METRICS:
            pv = [r[metric] for r in runs[(ws, batch)]["product"]]
            uv = [r[metric] for r in runs[(ws, batch)]["upstream"]]
            pm, um = statistics.median(pv), statistics.median(uv)
            ratio = pm / um
            per_round = [a / b for a, b in zip(pv, uv, strict=True)]
            print(f"  {metric:20s} product {_fmt(metric, pm)}  upstream {_fmt(metric, um)}  "
                  f"ratio {ratio:.2f}  (rounds {min(per_round):.2f}-{max(per_round):.2f})")
            if metric in GATED and args.tolerance and abs(ratio - 1) > args.tolerance:
                outside.append(f"ws{ws} batch={batch} {metric} {ratio:.2f}")
    if outside:
        print(f"\noutside 1 +- {args.tolerance}: " + "; ".join(outside))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
