"""Precision-targeted sampling against the fixed budget, alternated in one run.

For a set of points from every family, sessions with `--distbench-precision=off` (the whole
budget) and with the default target alternate ROUNDS times. Printed per point:

- agree: whether the two modes' median p50s are within each other's typical interval;
- coverage: in how many precision-targeted runs the p50's 95 % interval contains the long-run
  value (the median of every sample of every run of that point, both modes pooled);
- achieved: the median half-width the targeted runs reached, and how many met the target;
- and per session the wall time, so the time ratio targeted / fixed.

    python benchmarks/bench_precision.py [--rounds 5] [--budget 1s] [--precision 2%]
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

POINTS = [
    # (label, extra pytest arguments)
    ("collectives", ["--world-size=2", "--pyargs", "pytest_distbench.suites.test_collectives",
                     "-k", "all_reduce or all_gather", "--tensor-size=1KiB,1MiB"]),
    ("p2p", ["--world-size=2", "--pyargs", "pytest_distbench.suites.test_p2p", "-k",
             "p2p_latency or p2p_bandwidth", "--tensor-size=1KiB,1MiB"]),
    ("message_rate", ["--world-size=3", "--pyargs", "pytest_distbench.suites.test_message_rate",
                      "-k", "computation_to_computation and not rpc", "--tensor-size=1KiB",
                      "--distbench-credits=1,10"]),
    ("rpc", ["--world-size=2", "--pyargs", "pytest_distbench.suites.test_rpc", "-k",
             "rpc_latency", "--tensor-size=4B,64KiB"]),
]


def run_session(args: list[str], out: Path) -> tuple[float, list[dict]]:
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--distbench", f"--distbench-json={out}", *args],
                          capture_output=True, text=True)
    took = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"session failed ({' '.join(args)}):\n{done.stdout[-3000:]}")
    document = json.loads(out.read_text())
    return took, [b["distbench"] for b in document["benchmarks"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--budget", default="1s")
    parser.add_argument("--precision", default="2%")
    args = parser.parse_args(argv)
    times: dict[str, list[float]] = {"off": [], "target": []}
    runs: dict[str, dict[str, list[dict]]] = {}  # point id -> mode -> records
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            modes = ["off", "target"] if round_ % 2 == 0 else ["target", "off"]
            for mode in modes:
                precision = "off" if mode == "off" else args.precision
                for label, extra in POINTS:
                    out = Path(tmp) / f"{label}-{mode}-{round_}.json"
                    took, records = run_session(
                        [*extra, f"--distbench-budget={args.budget}",
                         f"--distbench-precision={precision}"], out)
                    times[mode].append(took)
                    for record in records:
                        runs.setdefault(record["name"], {}).setdefault(mode, []).append(record)
            print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print(f"{'point':60} {'p50 off':>10} {'p50 target':>10} {'agree':>6} {'coverage':>9} "
          f"{'achieved':>9} {'met':>5}")
    covered_all = total_all = 0
    for name, by_mode in sorted(runs.items()):
        off, target = by_mode.get("off", []), by_mode.get("target", [])
        if not off or not target:
            continue
        pooled = [x for r in off + target for x in r["samples"]]
        long_run = statistics.median(pooled)
        p50_off = statistics.median(r["summary"]["p50"] for r in off)
        p50_target = statistics.median(r["summary"]["p50"] for r in target)
        widths = [r["precision"]["achieved"] for r in target
                  if r.get("precision") and r["precision"]["achieved"] is not None]
        typical = statistics.median(widths) if widths else float("nan")
        agree = abs(p50_target / p50_off - 1) <= 2 * typical if widths else False
        covered = sum(1 for r in target if (r.get("p50_ci") or {}).get("low") is not None
                      and r["p50_ci"]["low"] <= long_run <= r["p50_ci"]["high"])
        covered_all += covered
        total_all += len(target)
        met = sum(1 for r in target if (r.get("precision") or {}).get("met"))
        print(f"{name[:60]:60} {p50_off * 1e6:10.1f} {p50_target * 1e6:10.1f} "
              f"{'yes' if agree else 'NO':>6} {covered:>4}/{len(target):<4} "
              f"{typical * 100:8.2f}% {met:>2}/{len(target)}")
    ratio = sum(times["target"]) / sum(times["off"])
    print(f"\ncoverage of the long-run p50 by the targeted runs' 95 % intervals: "
          f"{covered_all}/{total_all} ({covered_all / max(total_all, 1):.0%})")
    print(f"session time, targeted / fixed budget: {ratio:.2f} "
          f"({sum(times['target']):.0f} s vs {sum(times['off']):.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
