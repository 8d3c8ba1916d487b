"""Quality of A/B mode and of a stored history on this machine, measured in one run.

    python benchmarks/bench_ab.py [--trials 40] [--rounds 20] [--history 5]

The workload: ten 1 KiB all_reduce calls per step, twelve when DISTBENCH_SLOWDOWN=1 (20 % more
of the same work), in a 2-rank world.

1. A/B mode (--distbench-baseline-env drives the baseline's DISTBENCH_SLOWDOWN), at the
   plugin's A/B defaults (placement auto = pack, 0.2 s per run, the fastest iteration of each
   round) unless --budget is given:
   - A/A: both variants without the slowdown; target: no regression on >= 99 % of trials;
   - slowdown: the candidate with it; target: caught on >= 95 % of trials;
   each trial is one benchmark with --rounds rounds; the verdicts for fewer rounds are
   recomputed from the first rounds of the same data (rounds are in ABBA order, so any even
   prefix is balanced), which is how the default round count was chosen; the same rounds
   are also judged by other per-round statistics (p25, p50, mean), which is how min was.
2. Stored baselines: --history sessions of the plain benchmark, then one more A/A session and
   one slowed session, each judged against (a) the history of all stored runs and (b) the last
   stored run alone (the single-run baseline of issue 3), at --history-budget per benchmark.
Figures are ratios of counts measured in this one run; the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from pytest_distbench.results import document as storage
from pytest_distbench.results.comparison import verdict
from pytest_distbench.results.document import history
from pytest_distbench.results.statistics import paired

BENCH = """
import os, pytest, torch, torch.distributed as dist

# Ten all_reduce calls per step, twelve with the slowdown: 20 % more of the same work.
CALLS = 12 if os.environ.get("DISTBENCH_SLOWDOWN") == "1" else 10

@pytest.mark.distbench
@pytest.mark.parametrize("trial", range({trials}))
def test_work(distbench, trial):
    x = torch.zeros(256)
    def work():
        for _ in range(CALLS):
            dist.all_reduce(x)
    distbench.measure(work, nbytes=1024 * CALLS, family="work")
"""

TINY = ["--world-size=2", "--distbench-warmup=2"]
BIND: list[str] = []


# Budget and fewest iterations per run: (A/B sessions, stored-baseline sessions); an empty
# A/B budget leaves the plugin's A/B default, which is what the figures should describe.
BUDGET: dict[str, list[str]] = {}


def session(tmp: Path, out: Path, slow: bool, extra: list[str], kind: str) -> float:
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--distbench", *TINY,
         *BUDGET[kind],
         f"--distbench-json={out}", *BIND, *extra, "test_work.py"],
        cwd=tmp, capture_output=True, text=True, timeout=3600,
        env={**os.environ, "DISTBENCH_SLOWDOWN": "1" if slow else "0"},
    )
    # Exit 1 is a caught regression (a failed test): expected in the slowdown trials.
    if done.returncode not in (0, 1) or not out.exists():
        raise SystemExit(f"pytest failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return time.perf_counter() - began


ROUND_VALUES = {
    # What could stand for a round, from the per-round summaries every record keeps.
    "min": lambda s: s["min"],
    "p25": lambda s: s["p75"] - s["iqr"],
    "p50": lambda s: s["p50"],
    "mean": lambda s: s["mean"],
}


def ab_figures(doc: dict, rounds: int, threshold: float,
               statistic: str | None = None) -> tuple[int, int, float]:
    """(regressions, trials, median detectable) judging the first `rounds` rounds, by the
    plugin's own per-round statistic or, for the design record, another one."""
    flagged, detectable = 0, []
    recs = storage.records(doc).values()
    for rec in recs:
        ab = rec["ab"]
        if statistic is None:
            base, cand = ab["baseline_round_s"], ab["candidate_round_s"]
        else:
            base = [ROUND_VALUES[statistic](s) for s in ab["baseline_rounds"]]
            cand = [ROUND_VALUES[statistic](s) for s in ab["candidate_rounds"]]
        v = paired.judge_paired(base[:rounds], cand[:rounds], threshold)
        flagged += v.kind == "regression"
        detectable.append(v.detectable)
    detectable.sort()
    return flagged, len(recs), detectable[len(detectable) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--history", type=int, default=5)
    parser.add_argument("--threshold", type=float, default=verdict.DEFAULT_THRESHOLD)
    parser.add_argument("--skip-ab", action="store_true")
    parser.add_argument("--skip-history", action="store_true")
    parser.add_argument("--keep", type=Path, default=None,
                        help="copy the results files here (for analysis)")
    parser.add_argument("--budget", default="",
                        help="--distbench-budget of the A/B sessions (default: the plugin's)")
    parser.add_argument("--history-budget", default="0.2s",
                        help="--distbench-budget of the stored-baseline sessions")
    parser.add_argument("--min-iterations", type=int, default=10)
    parser.add_argument("--bind", default=None, help="--distbench-bind for every session")
    args = parser.parse_args()
    if args.bind:
        BIND[:] = [f"--distbench-bind={args.bind}"]
    least = f"--distbench-min-iterations={args.min_iterations}"
    BUDGET["ab"] = [least] + ([f"--distbench-budget={args.budget}"] if args.budget else [])
    BUDGET["stored"] = [least, f"--distbench-budget={args.history_budget}"]
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "test_work.py").write_text(textwrap.dedent(BENCH.format(trials=args.trials)))
        ab = ["--distbench-baseline-env=DISTBENCH_SLOWDOWN=0", f"--distbench-rounds={args.rounds}"]
        if not args.skip_ab:
            docs = {}
            for name, slow in (("A/A", False), ("20 % slowdown", True)):
                out = tmp / f"ab-{slow}.json"
                wall = session(tmp, out, slow, ab, "ab")
                docs[name] = storage.read_document(out)
                walls = sorted(r["ab"]["wall_s"] for r in storage.records(docs[name]).values())
                print(f"A/B {name}: session {wall:.0f} s, {args.trials} benchmarks x "
                      f"{args.rounds} rounds; wall per benchmark median "
                      f"{walls[len(walls) // 2]:.2f} s", flush=True)
            print(f"\nA/B mode, {args.trials} trials each, threshold {args.threshold * 100:g} %")
            print("rounds | A/A no regression | 20 % slowdown caught | median detectable "
                  "(A/A) | wall per benchmark")
            per_round = statistics_wall(docs["A/A"], args.rounds)
            for r in [r for r in (4, 6, 8, 10, 12, 16, 20) if r <= args.rounds]:
                false, n, det = ab_figures(docs["A/A"], r, args.threshold)
                caught, m, _ = ab_figures(docs["20 % slowdown"], r, args.threshold)
                print(f"{r:6d} | {100 * (1 - false / n):16.1f} % | {100 * caught / m:19.1f} % | "
                      f"{det * 100:22.1f} % | {per_round * r:.2f} s")
                results[f"ab_r{r}"] = {"aa_clean": 1 - false / n, "caught": caught / m,
                                       "detectable_median": det,
                                       "wall_per_benchmark_s": per_round * r}
            print(f"\nthe same {args.rounds} rounds judged by another per-round statistic "
                  "(the plugin uses min):")
            for name in ROUND_VALUES:
                false, n, det = ab_figures(docs["A/A"], args.rounds, args.threshold, name)
                caught, m, _ = ab_figures(docs["20 % slowdown"], args.rounds, args.threshold,
                                          name)
                print(f"  {name:>4}: A/A no regression {100 * (1 - false / n):5.1f} %, slowdown "
                      f"caught {100 * caught / m:5.1f} %, median detectable {det * 100:.1f} %")

        if args.skip_history:
            keep(tmp, args.keep)
            print(json.dumps(results))
            return
        print(f"\nstored baselines: {args.history} runs, then one A/A and one slowed run",
              flush=True)
        runs = []
        for i in range(args.history):
            out = tmp / f"run{i}.json"
            session(tmp, out, False, [], "stored")
            runs.append(storage.read_document(out))
        stored = None
        for doc in runs:
            stored = history.with_history(doc, stored)
        single = runs[-1]
        for name, slow in (("A/A", False), ("20 % slowdown", True)):
            out = tmp / f"cur-{slow}.json"
            session(tmp, out, slow, [], "stored")
            current = storage.read_document(out)
            for label, base in ((f"history of {args.history}", stored), ("single run", single)):
                comparison = verdict.compare_documents(base, current, threshold=args.threshold)
                flagged = len(comparison.regressions)
                n = len(comparison.verdicts)
                det = sorted(v.detectable for v in comparison.verdicts)[n // 2]
                changes = sorted(v.change for v in comparison.verdicts)
                print(f"  {name:14s} vs {label:14s}: regression on {flagged}/{n} "
                      f"({100 * flagged / n:.1f} %); median detectable {det * 100:.1f} %; "
                      f"p50 change median {changes[n // 2] * 100:+.1f} % "
                      f"[{changes[0] * 100:+.1f} .. {changes[-1] * 100:+.1f}]", flush=True)
                results[f"{label} {name}"] = flagged / n
        keep(tmp, args.keep)
    print(json.dumps(results))


def keep(tmp: Path, where: Path | None) -> None:
    if where is not None:
        where.mkdir(parents=True, exist_ok=True)
        for path in tmp.glob("*.json"):
            shutil.copy(path, where / path.name)


def statistics_wall(doc: dict, rounds: int) -> float:
    """Median wall seconds per round per benchmark (both variants)."""
    walls = sorted(r["ab"]["wall_s"] / rounds for r in storage.records(doc).values())
    return walls[len(walls) // 2]


if __name__ == "__main__":
    main()
