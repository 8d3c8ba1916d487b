"""Change points in synthetic histories: how soon a sustained step is found, and how many
change points an unchanged series invents (results/statistics/changepoints.py).

    python benchmarks/bench_history.py [--trials 200] [--runs 20000] [--seed 1]
                                       [--alpha A] [--min-size M] [--penalty P] [--test t]
    python benchmarks/bench_history.py --record 12 [--world-size 2]   # this machine's runs

A history is a series of p50s; a nightly job appends one run and judges the series, keeping the
last WINDOW runs. Each synthetic series is a product of one noise source's run-to-run factors:

- quiet: log-normal factors with a coefficient of variation of 2 %;
- quiet, heavy tails: log factors Student t with 2 degrees of freedom, scaled by 0.02 (the same
  middle, and an outlier now and then: no CV);
- H200: the three sessions of the same eight points on one H200 (benchmarks/data/
  h200_three_sessions.json, from shared/measured/h200-2026-11-28); each point's run-to-run
  coefficient of variation is the sd of its three log p50s, and a series is drawn log-normal at
  the CV of a point picked at random, from the points at 2 % or less ("H200 quiet") or from the
  others, which switch between two launch-bound regimes ("H200 regimes");
- this machine: benchmarks/data/history_noise_2core.json, sessions of the collectives suite
  recorded one after another on this 2-core VM (--record; the command is in the file); each
  benchmark's log p50s minus their median are pooled and resampled with replacement (so the
  series keeps the outliers, not the order: no slow drift is simulated).

Detection: --trials series per source and step; the step (5, 10, 20, 30 % slower, sustained)
starts at a run drawn from 20..80; after each new run the detection runs on the last WINDOW runs.
"found" = a change point within 2 runs of the step within HORIZON runs of it; "runs to find" =
how many runs at the new speed the series held when it was first found (the step's own run = 1);
"exact" = found at the run the step started. False change points: --runs runs of unchanged
series per source, series of SERIES runs, judged after every run; every distinct run index ever
reported as a change point counts once; per 1,000 runs.

--alpha, --min-size and --penalty replace the module's defaults; --test replaces its split
test (Student's t on the log p50s kept only where a rank test agrees) by one test alone, to
compare them: rank (two-sided Mann-Whitney, the rule before), t (Student's t, pooled variance,
as Apache Otava tests its splits), yuen (Yuen's trimmed t, Welch's unequal variances: scipy's
ttest_ind(equal_var=False, trim=--trim)), yuen-pooled (the same with a pooled variance).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from pytest_distbench.results.document import read_document, records
from pytest_distbench.results.rendering import fit
from pytest_distbench.results.statistics import changepoints

DATA = Path(__file__).resolve().parent / "data"
H200 = DATA / "h200_three_sessions.json"
HERE = DATA / "history_noise_2core.json"
WINDOW = 100  # runs a history keeps by default
HORIZON = 20
SOON = 5  # the goal: a 5 % step on a quiet series found within 5 runs
SERIES = 1000
STEPS = (0.05, 0.10, 0.20, 0.30)
QUIET_CV = 0.02
RECORD_ARGS = ["--distbench", "--pyargs", "pytest_distbench.suites.test_collectives",
               "-k", "all_reduce or all_gather or broadcast",
               "--tensor-size=1KiB,64KiB,1MiB", "--distbench-budget=0.25s"]


def sd_of_cv(cv: float) -> float:
    return math.sqrt(math.log1p(cv * cv))


def lognormal(sds: list[float]):
    """Factors drawn log-normal at an sd picked from `sds` per series."""
    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        return np.exp(rng.normal(0.0, rng.choice(sds), n))
    return draw


def heavy_tailed(scale: float):
    """Factors whose logs are Student t with 2 degrees of freedom: a quiet series with the odd
    outlier run, the case where the split's test (rank or t) matters."""
    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        return np.exp(scale * rng.standard_t(2, n))
    return draw


def resampled(logs: np.ndarray):
    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        return np.exp(rng.choice(logs, n))
    return draw


def h200_sds() -> tuple[list[float], list[float], str]:
    points = json.loads(H200.read_text())["p50_us"]
    sds = {name: statistics.stdev(math.log(v) for v in runs) for name, runs in points.items()}
    quiet = [sd for sd in sds.values() if sd <= QUIET_CV]
    loud = [sd for sd in sds.values() if sd > QUIET_CV]
    note = ", ".join(f"{name} {100 * sd:.1f} %" for name, sd in sorted(sds.items(),
                                                                       key=lambda kv: kv[1]))
    return quiet, loud, note


def here_logs() -> tuple[np.ndarray, str]:
    data = json.loads(HERE.read_text())
    deviations, cvs = [], []
    for runs in data["p50_s"].values():
        logs = np.log(np.asarray(runs))
        deviations.extend(logs - np.median(logs))
        cvs.append(float(np.std(logs, ddof=1)))
    note = (f"{len(data['p50_s'])} benchmarks x {len(data['runs'])} sessions; run-to-run sd of "
            f"log p50 per benchmark: median {100 * statistics.median(cvs):.1f} %, "
            f"{100 * min(cvs):.1f} .. {100 * max(cvs):.1f} %")
    return np.asarray(deviations), note


def judged(series: np.ndarray, end: int, **kwargs) -> list[int]:
    """Absolute run indices of the change points a nightly job sees after run `end - 1`."""
    start = max(0, end - WINDOW)
    return [start + cp.run for cp in changepoints.change_points(series[start:end], **kwargs)]


def detection(draw, step: float, trials: int, rng: np.random.Generator,
              **kwargs) -> tuple[list[int], int]:
    """Runs to find the step, one per trial that found it; and how many were exact."""
    delays, exact = [], 0
    for _ in range(trials):
        at = int(rng.integers(20, 81))
        series = draw(rng, at + HORIZON)
        series[at:] *= 1 + step
        for end in range(at + 1, at + HORIZON + 1):
            near = [cp for cp in judged(series, end, **kwargs) if abs(cp - at) <= 2]
            if near:
                delays.append(end - at)
                exact += near[0] == at
                break
    return delays, exact


def false_points(draw, runs: int, rng: np.random.Generator, **kwargs) -> int:
    found = 0
    for _ in range(max(1, runs // SERIES)):
        series = draw(rng, SERIES)
        seen: set[int] = set()
        for end in range(2, SERIES + 1):
            seen.update(judged(series, end, **kwargs))
        found += len(seen)
    return found


def alone(test: str, trim: float):
    """A split test for the module: (p, 0) of one test, so that test alone decides."""
    rule = changepoints._split_p  # (t p, rank p), before this replaces it

    def split_p(before: list[float], after: list[float], min_size: int) -> tuple[float, float]:
        from scipy import stats

        if min(len(before), len(after)) < min_size:
            return 1.0, 1.0
        if test in ("t", "rank"):  # the module's own two tests, one of them alone
            p = rule(before, after, min_size)[test == "rank"]
        else:
            p = float(stats.ttest_ind(after, before, equal_var=test == "yuen-pooled",
                                      trim=trim).pvalue)
        return (1.0 if math.isnan(p) else max(p, sys.float_info.min)), 0.0
    return split_p


def record(sessions: int, world_size: int) -> None:
    """Runs the suite `sessions` times, one session after another, and keeps each p50."""
    p50s: dict[str, list[float]] = {}
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(sessions):
            path = Path(tmp) / f"run{i}.json"
            args = [*RECORD_ARGS, f"--world-size={world_size}", f"--distbench-json={path}"]
            result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                                     "-q", *args], capture_output=True, text=True, timeout=1800)
            if result.returncode != 0:
                raise SystemExit(f"pytest failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
            doc = read_document(path)
            runs.append({"time": doc["datetime"],
                         "cpu_probe_s": doc["distbench"]["environment"].get("cpu_probe_s")})
            for bid, rec in records(doc).items():
                p50s.setdefault(bid, []).append(rec["summary"]["p50"])
            print(f"session {i + 1} of {sessions}: {len(records(doc))} p50s", flush=True)
    command = " ".join(["pytest", *RECORD_ARGS, f"--world-size={world_size}"])
    DATA.mkdir(exist_ok=True)
    HERE.write_text(json.dumps({
        "about": f"p50 (s) per benchmark per session: {sessions} sessions of `{command}` one "
                 "after another on this machine, recorded by `python benchmarks/bench_history.py"
                 f" --record {sessions}`",
        "runs": runs, "p50_s": p50s}, indent=1) + "\n")
    print(f"wrote {HERE}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200, help="series per source and step")
    parser.add_argument("--runs", type=int, default=20000, help="unchanged runs per source")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--alpha", type=float, default=changepoints.DEFAULT_ALPHA)
    parser.add_argument("--min-size", type=int, default=changepoints.MIN_SIZE)
    parser.add_argument("--penalty", type=float, default=changepoints.PENALTY)
    parser.add_argument("--test", choices=("rule", "rank", "t", "yuen", "yuen-pooled"),
                        default="rule", help="the split's test: the module's rule, or one alone")
    parser.add_argument("--trim", type=float, default=0.2, help="yuen's trimmed fraction")
    parser.add_argument("--record", type=int, metavar="SESSIONS",
                        help="record this machine's runs instead (benchmarks/data/)")
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args()
    if args.record:
        record(args.record, args.world_size)
        return
    changepoints.PENALTY = args.penalty
    if args.test != "rule":
        changepoints._split_p = alone(args.test, args.trim)
    kwargs = {"alpha": args.alpha, "min_size": args.min_size}
    rng = np.random.default_rng(args.seed)
    quiet, loud, h200_note = h200_sds()
    # (name, draw, log-normal?)
    sources = [(f"quiet (CV {100 * QUIET_CV:.0f} %)", lognormal([sd_of_cv(QUIET_CV)]), True),
               (f"quiet, heavy tails (t2, scale {100 * QUIET_CV:.0f} %)", heavy_tailed(QUIET_CV),
                False),
               ("H200 quiet points", lognormal(quiet), True),
               ("H200 regimes", lognormal(loud), True)]
    notes = [f"H200 run-to-run sd of log p50 per point: {h200_note}"]
    if HERE.exists():
        logs, note = here_logs()
        sources.append(("this machine", resampled(logs), False))
        notes.append(f"this machine: {note}")
    print(" ".join(["python benchmarks/bench_history.py", *sys.argv[1:]]))
    trim = f" (trim {args.trim})" if "yuen" in args.test else ""
    print(f"alpha {args.alpha}, min segment {args.min_size} runs, penalty {args.penalty}, "
          f"test {args.test}{trim}, window {WINDOW} runs, seed {args.seed}")
    for note in notes:
        print(fit.wrap_text(note))
    started = time.perf_counter()
    rows = []
    for name, draw, _ in sources:
        for step in STEPS:
            delays, exact = detection(draw, step, args.trials, rng, **kwargs)
            soon = sum(delay <= SOON for delay in delays)
            rows.append([name, f"+{100 * step:.0f} %",
                         f"{100 * len(delays) / args.trials:.1f} %",
                         f"{100 * soon / args.trials:.1f} %",
                         f"{100 * exact / args.trials:.1f} %",
                         f"{np.median(delays):.0f}" if delays else "-",
                         f"{np.percentile(delays, 90):.0f}" if delays else "-"])
    print(f"\nsteps found ({args.trials} series per row; found within {HORIZON} runs):")
    print(fit.table(rows, ["noise", "step", "found", f"within {SOON} runs",
                           "at the run it started",
                           "runs to find: median", "p90"]))
    rows, pooled = [], [0, 0]
    for name, draw, is_lognormal in sources:
        found = false_points(draw, args.runs, rng, **kwargs)
        total = max(1, args.runs // SERIES) * SERIES
        rows.append([name, f"{total:,}", found, f"{1000 * found / total:.2f}"])
        if is_lognormal:
            pooled = [pooled[0] + found, pooled[1] + total]
    print(f"\nfalse change points (unchanged series of {SERIES} runs, judged after every run):")
    print(fit.table(rows, ["noise", "runs", "change points", "per 1,000 runs"]))
    # Log-normal noise of any CV is one case to the detection (logs over their own noise, then
    # t and ranks, both blind to the scale), so those rows are samples of one rate.
    print(fit.wrap_text(f"log-normal sources pooled: {pooled[0]} in {pooled[1]:,} runs, "
                        f"{1000 * pooled[0] / max(1, pooled[1]):.2f} per 1,000"))
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
