"""RPC through the plugin vs the same thing written by hand with torch alone, alternating.

    python benchmarks/bench_rpc.py [--rounds 5] [--iterations 500] [--world-sizes 10,40]

Prints, on this machine:
  1. rpc_sync round trip of a 4-byte tensor (p50): the plugin's rpc_latency test vs a
     hand-written loop (benchmarks/rpc_by_hand.py), alternating, and their ratio (goal <= 1.05);
  2. the agent/observer benchmark (batch, state 10-20-10, 5 layers, 10 features, 3 episodes x
     20 steps) per world size: the plugin's test vs a hand-written torch-only run, alternating;
     ratios of agent p50, observer p50 and of the wall time of the whole command.
Absolute times on a shared 2-core machine mean little; read the ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHM_MAX_WORLD = 20  # as harness/ranks/rpc.py: larger worlds use TensorPipe's uv transport


def _check(proc: subprocess.CompletedProcess[str], what: str) -> None:
    if proc.returncode != 0:
        sys.exit(f"{what} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n"
                 f"{proc.stderr[-3000:]}")


def _pytest(tmp: Path, *args: str) -> tuple[list[dict], float]:
    out = tmp / f"run-{time.monotonic_ns()}.json"
    began = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--distbench",
         "--pyargs", "pytest_distbench.suites", f"--distbench-json={out}", *args],
        capture_output=True, text=True, timeout=900, cwd=tmp)
    wall = time.perf_counter() - began
    _check(proc, "pytest " + " ".join(args))
    records = [b["distbench"] for b in json.loads(out.read_text())["benchmarks"]]
    return records, wall


def _by_hand(*args: str) -> dict:
    proc = subprocess.run([sys.executable, str(HERE / "rpc_by_hand.py"), *args],
                          capture_output=True, text=True, timeout=900)
    _check(proc, "rpc_by_hand.py " + " ".join(args))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def latency(tmp: Path, rounds: int, iterations: int) -> None:
    """The plugin pins rank r to CPU r (--distbench-bind=core); the hand loop runs both ways."""
    runs: dict[str, list[float]] = {"plugin": [], "hand, pinned": [], "hand, unpinned": []}
    for _ in range(rounds):
        records, _ = _pytest(tmp, "--world-size=2", "-k", "rpc_latency", "--tensor-size=4B",
                             f"--distbench-iterations={iterations}", "--distbench-warmup=20")
        runs["plugin"].append(records[0]["summary"]["p50"])
        runs["hand, pinned"].append(
            _by_hand("latency", str(iterations), "20", "pin")["p50_s"])
        runs["hand, unpinned"].append(_by_hand("latency", str(iterations), "20")["p50_s"])
    medians = {k: statistics.median(v) for k, v in runs.items()}
    print("rpc_sync round trip, 4 B, p50 (median of rounds, alternating):")
    for name, values in runs.items():
        print(f"  {name:15s} {medians[name] * 1e6:8.1f} us   rounds "
              f"{[round(x * 1e6) for x in values]}")
    for name in ("hand, pinned", "hand, unpinned"):
        print(f"  ratio plugin / {name} = {medians['plugin'] / medians[name]:.3f}"
              "  (goal <= 1.05)")


def agent_observer(tmp: Path, rounds: int, world_size: int) -> None:
    rows: dict[str, list[float]] = {k: [] for k in (
        "p_agent", "h_agent", "p_obs", "h_obs", "p_wall", "h_wall", "p_run", "h_run")}
    for _ in range(rounds):
        records, wall = _pytest(tmp, f"--world-size={world_size}", "-k", "agent_observer",
                                "--distbench-batch=true", "--distbench-episodes=3",
                                "--distbench-steps=20")
        metrics = records[0]["figures"]["metrics"]
        rows["p_agent"].append(metrics["agent_latency_s"]["p50"])
        rows["p_obs"].append(metrics["observer_latency_s"]["p50"])
        rows["p_wall"].append(wall)
        rows["p_run"].append(records[0]["figures"]["run_s"])
        extra = ["uv"] if world_size > SHM_MAX_WORLD else []
        hand = _by_hand("agent_observer", str(world_size), "3", "20", *extra)
        rows["h_agent"].append(hand["agent_p50_s"])
        rows["h_obs"].append(hand["observer_p50_s"])
        rows["h_wall"].append(hand["wall_s"])
        rows["h_run"].append(hand["run_s"])
    m = {k: statistics.median(v) for k, v in rows.items()}
    print(f"agent/observer, world size {world_size}, batch, 3 episodes x 20 steps "
          f"(median of {rounds} alternating rounds):")
    for label, p, h in (("agent latency p50", "p_agent", "h_agent"),
                        ("observer latency p50", "p_obs", "h_obs"),
                        ("episodes only (s)", "p_run", "h_run"),
                        ("whole command (s)", "p_wall", "h_wall")):
        scale, unit = (1e3, "ms") if "latency" in label else (1, "s")
        print(f"  {label:22s} plugin {m[p] * scale:9.3f} {unit}  hand {m[h] * scale:9.3f} {unit}"
              f"  ratio {m[p] / m[h]:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--world-sizes", default="10,40")
    parser.add_argument("--skip-latency", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_latency:
            latency(Path(tmp), args.rounds, args.iterations)
        for ws in (int(x) for x in args.world_sizes.split(",") if x):
            agent_observer(Path(tmp), max(1, args.rounds // 2), ws)


if __name__ == "__main__":
    main()
