"""How one point's figure moves from run to run within one world: the part of the error a
record's within-run interval cannot see.

Two points (p2p_latency 1 KiB, all_reduce 1 KiB) are measured in turn, REPEATS times each,
every run a short fixed-budget test of its own in one world. Per point it prints every run's
p50 in run order, how many runs' own sampling intervals (95 %) hold the median of all runs
(their coverage of the session's value), the same for an interval from the run's 10 batch
medians (order statistics over consecutive batches: what an interval that allows for
correlated samples would say), the median half-width, the spread of the run p50s after the first
SETTLE runs, and the lag-1 autocorrelation of the series (near 0: independent runs; near 1:
a slow drift a sentinel could follow).

    python benchmarks/bench_drift.py [--repeats 25] [--budget 0.4s] [--world-size 2]
"""

from __future__ import annotations

import argparse
import statistics
import textwrap

from bench_coverage import run_points, sampling_interval  # the same runner, the run's own ±

from pytest_distbench.results.statistics.interval import median_interval
from pytest_distbench.results.statistics.unpaired import batch_medians

SETTLE = 3

SUITE = '''
import pytest
from pytest_distbench.families.collectives.members import COLLECTIVES, run_collective
from pytest_distbench.families.p2p.members import P2P, run_p2p


@pytest.mark.distbench(precision="off", budget="{budget}")
@pytest.mark.parametrize("run,point", [(i, p) for i in range({repeats})
                                       for p in ("p2p_latency", "all_reduce")])
def test_point(distbench, run, point):
    if point == "p2p_latency":
        run_p2p(distbench, P2P["p2p_latency"], 1024)
    else:
        run_collective(distbench, COLLECTIVES["all_reduce"], 1024)
'''


def lag1(values: list[float]) -> float:
    mean = statistics.fmean(values)
    den = sum((v - mean) ** 2 for v in values)
    num = sum((a - mean) * (b - mean) for a, b in zip(values, values[1:], strict=False))
    return num / den if den else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--budget", default="0.4s")
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args(argv)
    if args.repeats < SETTLE + 2:
        parser.error(f"--repeats: at least {SETTLE + 2} (the first {SETTLE} are set apart, and "
                     f"a spread needs two more)")
    records = run_points(textwrap.dedent(SUITE.format(budget=args.budget,
                                                      repeats=args.repeats)),
                         args.world_size)
    if records is None:
        return 1
    for point in ("p2p_latency", "all_reduce"):
        mine = [r for r in records if f"-{point}]" in r["name"]]
        p50s = [r["summary"]["p50"] for r in mine]
        session = statistics.median(p50s)
        known = [(r["summary"]["p50"], bounds) for r in mine
                 if (bounds := sampling_interval(r, "p50")) is not None]
        covered = sum(1 for _, (low, high) in known if low <= session <= high)
        halves = [100 * (high - low) / 2 / p50 for p50, (low, high) in known]
        batched = [(r["summary"]["p50"], bounds) for r in mine
                   if (bounds := median_interval(batch_medians(r["samples"]))) is not None]
        covered_batched = sum(1 for _, (low, high) in batched if low <= session <= high)
        halves_batched = [100 * (high - low) / 2 / p50 for p50, (low, high) in batched]
        settled = p50s[SETTLE:]
        spread = 100 * statistics.stdev(settled) / statistics.fmean(settled)
        print(f"{point} 1 KiB, {len(mine)} runs of {args.budget} at {args.world_size} ranks "
              f"(p50, us, in run order):")
        print("  " + " ".join(f"{1e6 * v:.0f}" for v in p50s))
        print(f"  runs whose own sampling interval (95 %) holds the median of all runs: "
              f"{covered}/{len(mine)}; median half-width {statistics.median(halves):.1f} %")
        if batched:
            print(f"  the same from 10 batch medians: {covered_batched}/{len(mine)}; median "
                  f"half-width {statistics.median(halves_batched):.1f} %")
        print(f"  first {SETTLE} runs / the rest: "
              f"{statistics.fmean(p50s[:SETTLE]) / statistics.fmean(settled):.2f}x; "
              f"run-to-run spread after them {spread:.1f} % (stdev / mean); "
              f"lag-1 autocorrelation {lag1(p50s):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
