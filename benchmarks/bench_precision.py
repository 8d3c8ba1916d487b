"""ACROSS sessions: precision-targeted sampling against the fixed budget, alternated in one
run, and how often the printed ± covers the point's value over all the sessions.

The printed ± promises the point's value in *this* session (bench_coverage.py measures that);
the machine's drift from one session to the next is not in it, so this measures what it does
not promise. For a set of points from every family, sessions with `--distbench-precision=off`
(the whole budget) and with the default target alternate ROUNDS times. Printed per point:

- agree: whether the two modes' median figures are within each other's typical interval;
- coverage: in how many precision-targeted runs the printed 95 % interval contains the
  long-run value (every sample of every run of that point, both modes pooled: the p50, or for
  a rate the total messages / total time), and the same for the run's own sampling interval
  (the ± printed before issue 34);
- achieved: the median half-width the targeted runs printed, and how many met the target;
- and per family and overall the coverage and median half-width of both intervals, and the
  wall time ratio targeted / fixed.

    python benchmarks/bench_precision.py [--rounds 5] [--budget 0.5s] [--precision 2%]
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

from bench_coverage import (  # one reading of a record and one judgement, for both scripts
    DEFAULT_BUDGET,
    DEFAULT_PRECISION,
    Judged,
    figure,
    headline,
    judge,
    kind_of,
    missing_noise,
    print_families,
    print_noise,
)

POINTS = [
    # (family, extra pytest arguments)
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
    parser.add_argument("--budget", default=DEFAULT_BUDGET,
                        help="both modes' (the product's default)")
    parser.add_argument("--precision", default=DEFAULT_PRECISION,
                        help="the targeted runs' (the product's default)")
    args = parser.parse_args(argv)
    times: dict[str, list[float]] = {"off": [], "target": []}
    runs: dict[str, dict[str, list[dict]]] = {}  # point id -> mode -> records
    family_of: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            modes = ["off", "target"] if round_ % 2 == 0 else ["target", "off"]
            for mode in modes:
                precision = "off" if mode == "off" else args.precision
                for family, extra in POINTS:
                    out = Path(tmp) / f"{family}-{mode}-{round_}.json"
                    took, records = run_session(
                        [*extra, f"--distbench-budget={args.budget}",
                         f"--distbench-precision={precision}"], out)
                    error = missing_noise(records, f"{family} {mode}")
                    if error:
                        raise SystemExit(f"bench_precision: {error}")
                    times[mode].append(took)
                    for record in records:
                        runs.setdefault(record["name"], {}).setdefault(mode, []).append(record)
                        family_of[record["name"]] = family
            print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    print(f"{'point':60} {'off':>10} {'target':>10} {'agree':>6} {'printed: covered, ±':>26} "
          f"{'sampling: covered, ±':>26} {'met':>5}")
    by_family: dict[str, Judged] = {}
    for name, by_mode in sorted(runs.items()):
        off, target = by_mode.get("off", []), by_mode.get("target", [])
        if not off or not target:
            continue
        kind = kind_of(target)
        long_run = headline(off + target, kind)
        figure_off = statistics.median(figure(r, kind) for r in off)
        figure_target = statistics.median(figure(r, kind) for r in target)
        widths = [r["precision"]["achieved"] for r in target
                  if r.get("precision") and r["precision"]["achieved"] is not None]
        typical = statistics.median(widths) if widths else float("nan")
        agree = abs(figure_target / figure_off - 1) <= 2 * typical if widths else False
        judged = judge(target, long_run, kind)
        by_family.setdefault(family_of[name], Judged()).add(judged)
        met = sum(1 for r in target if (r.get("precision") or {}).get("met"))
        scale = 1.0 if kind == "mean" else 1e6  # msg/s, or us
        print(f"{name[:60]:60} {figure_off * scale:10.4g} {figure_target * scale:10.4g} "
              f"{'yes' if agree else 'NO':>6} {judged.printed.text():>26} "
              f"{judged.sampling.text():>26} {met:>2}/{len(target)}")
    print_families(by_family, "ACROSS sessions (not what the ± promises: it is this session's): "
                   "how often the 95 % interval of a targeted run covers the point's value over "
                   f"all {2 * args.rounds} sessions (covered/runs, share, median half-width)")
    print_noise(r for by_mode in runs.values() for rs in by_mode.values() for r in rs)
    ratio = sum(times["target"]) / sum(times["off"])
    print(f"\nsession time, targeted / fixed budget: {ratio:.2f} "
          f"({sum(times['target']):.0f} s vs {sum(times['off']):.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
