"""The CUDA timings of the plugin against the same loops written by hand, in one run.

    python benchmarks/bench_cuda_timing.py [--quick] [--batch=20] [--batches=50] [--out=F.json]

Needs one CUDA GPU with NCCL; without one it says so and exits with status 2 (nothing is
measured on a CPU). At world size 1 on nccl, for every size from 4 B to 1 GiB in x4 steps:

  hand   : all_reduce loops written with torch alone, in this process:
           batch = `--batch` calls back to back between two CUDA events, per-iteration =
           elapsed / batch, p50 over `--batches` batches (what nccl-tests does);
           graph = the same batch captured once in a CUDA graph, replayed between events (-G);
           each  = host clock around one call plus torch.cuda.synchronize(), p50 over calls.
  plugin : the built-in test_all_reduce through `pytest --distbench`, once per timing
           (--distbench-cuda-timing=batch, --distbench-cuda-graph, --distbench-cuda-timing=each)
           with the same batch size and sample count, its p50 read from the results file.

The hand loops run before and after the plugin's sessions (their drift is printed), and the
ratios are plugin p50 / mean of the two hand p50s. The target (issue 21): batch within 5 % at
every size. The "each" columns show what launch plus synchronization add to every call.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZES = [4 * 4**k for k in range(15)]  # 4 B .. 1 GiB
QUICK_SIZES = [4, 4096, 1 << 20, 64 << 20]
WARMUP = 5
MODES = ("batch", "graph", "each")


def no_gpu_reason() -> str | None:
    import torch
    import torch.distributed as dist

    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is False: no GPU is visible"
    if not dist.is_nccl_available():
        return "this torch has no NCCL"
    return None


def size_text(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"


# -- by hand ----------------------------------------------------------------------------------


def hand_loops(sizes: list[int], batch: int, batches: int) -> dict[str, dict[int, float]]:
    """p50 seconds per iteration of each hand-written loop, per size (this process's GPU)."""
    import torch
    import torch.distributed as dist

    out: dict[str, dict[int, float]] = {mode: {} for mode in MODES}
    for nbytes in sizes:
        x = torch.ones(max(nbytes // 4, 1), dtype=torch.float32, device="cuda")

        def call(x: torch.Tensor = x) -> None:
            dist.all_reduce(x)

        for _ in range(WARMUP):
            call()
        torch.cuda.synchronize()
        out["batch"][nbytes] = statistics.median(
            events_per_iteration(lambda: [call() for _ in range(batch)], batch)
            for _ in range(batches))
        graph = capture(call, batch)
        graph.replay()  # the first replay uploads the graph
        out["graph"][nbytes] = statistics.median(
            events_per_iteration(graph.replay, batch) for _ in range(batches))
        each = []
        for _ in range(batches):
            began = time.perf_counter()
            call()
            torch.cuda.synchronize()
            each.append(time.perf_counter() - began)
        out["each"][nbytes] = statistics.median(each)
        del graph, x
        torch.cuda.empty_cache()
    return out


def events_per_iteration(launch: Callable[[], object], iterations: int) -> float:
    import torch

    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    launch()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / iterations


def capture(call: Callable[[], None], iterations: int):
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(iterations):
            call()
    return graph


# -- through the plugin -----------------------------------------------------------------------


def plugin_runs(sizes: list[int], batch: int, batches: int,
                tmp: Path) -> tuple[dict[str, dict[int, float]], dict[int, list[int] | None]]:
    """p50 per size of the built-in test_all_reduce, once per timing; and GPU memory peaks."""
    options = {
        "batch": ["--distbench-cuda-timing=batch"],
        "graph": ["--distbench-cuda-timing=batch", "--distbench-cuda-graph"],
        "each": ["--distbench-cuda-timing=each"],
    }
    out: dict[str, dict[int, float]] = {}
    memory: dict[int, list[int] | None] = {}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    for mode, extra in options.items():
        path = tmp / f"{mode}.json"
        command = [
            sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--distbench",
            "--pyargs", "pytest_distbench.suites.test_collectives", "-k", "test_all_reduce",
            "--backend=nccl", "--world-size=1",
            "--tensor-size=" + ",".join(f"{n}B" for n in sizes),
            f"--distbench-warmup={WARMUP}", f"--distbench-iterations={batches}",
            f"--distbench-cuda-batch={batch}", "--distbench-gpu-memory",
            f"--distbench-json={path}", *extra,
        ]
        result = subprocess.run(command, cwd=tmp, env=env, capture_output=True, text=True,
                                timeout=3600)
        if result.returncode != 0 or not path.exists():
            raise SystemExit(f"the {mode} session failed:\n{result.stdout}\n{result.stderr}")
        print(result.stdout.split("distbench results", 1)[-1].rstrip())  # its table
        records = [b["distbench"] for b in json.loads(path.read_text())["benchmarks"]]
        out[mode] = {r["nbytes"]: r["summary"]["p50"] for r in records}
        if mode == "batch":
            memory = {r["nbytes"]: r.get("peak_gpu_allocated_bytes") for r in records}
    return out, memory


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="four sizes only")
    parser.add_argument("--batch", type=int, default=20,
                        help="iterations per batch, hand and plugin alike (nccl-tests' -n)")
    parser.add_argument("--batches", type=int, default=50, help="batches (samples) per size")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON")
    args = parser.parse_args()
    reason = no_gpu_reason()
    if reason:
        print(f"bench_cuda_timing: needs a CUDA GPU with NCCL, and {reason}; nothing was "
              "measured (docs/gpu.md lists what a GPU session should run)", file=sys.stderr)
        return 2

    import torch
    import torch.distributed as dist

    sizes = QUICK_SIZES if args.quick else SIZES
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    try:
        before = hand_loops(sizes, args.batch, args.batches)
        with tempfile.TemporaryDirectory() as tmp:
            plugin, memory = plugin_runs(sizes, args.batch, args.batches, Path(tmp))
        after = hand_loops(sizes, args.batch, args.batches)
    finally:
        dist.destroy_process_group()

    hand = {m: {n: (before[m][n] + after[m][n]) / 2 for n in sizes} for m in MODES}
    print(f"\n# all_reduce, nccl, world size 1, {torch.cuda.get_device_name(0)}, batch "
          f"{args.batch}, {args.batches} samples; p50 per iteration (us); ratio = plugin/hand")
    header = ["size"] + [f"{who} {m}" for m in MODES for who in ("hand", "plugin", "ratio")]
    header += ["hand drift", "GPU alloc (MiB)"]
    print("  ".join(f"{h:>14}" for h in header))
    worst = 0.0
    rows = []
    for n in sizes:
        cells = [size_text(n)]
        for m in MODES:
            ratio = plugin[m][n] / hand[m][n]
            if m == "batch":
                worst = max(worst, abs(ratio - 1))
            cells += [f"{hand[m][n] * 1e6:.2f}", f"{plugin[m][n] * 1e6:.2f}", f"{ratio:.3f}"]
        drift = before["batch"][n] / after["batch"][n] - 1
        peaks = memory.get(n)
        cells += [f"{drift:+.1%}", "-" if not peaks else f"{peaks[0] / 2**20:.0f}"]
        print("  ".join(f"{c:>14}" for c in cells))
        rows.append({"nbytes": n, "hand": {m: hand[m][n] for m in MODES},
                     "plugin": {m: plugin[m][n] for m in MODES}, "hand_drift": drift,
                     "peak_gpu_allocated_bytes": peaks})
    verdict = "met" if worst <= 0.05 else "NOT met"
    print(f"\nbatch timing: worst |plugin/hand - 1| = {worst:.1%} (target <= 5 %: {verdict})")
    if args.out:
        args.out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(0),
                                        "torch": torch.__version__,
                                        "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                                        "batch": args.batch, "batches": args.batches,
                                        "rows": rows, "worst_batch_deviation": worst}, indent=2))
    return 0 if worst <= 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
