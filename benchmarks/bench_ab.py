"""Quality of A/B mode and of a stored history on this machine, measured in one run.

    python benchmarks/bench_ab.py [--trials 40] [--rounds 20] [--history 5]
        [--aa-sessions 1] [--slowdown-trials N] [--record PATH]

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

--record PATH keeps the A/B sessions as data: each session's per-round values of every trial
(`baseline_round_s` / `candidate_round_s`, as the A/B record stores them: each round's fastest
iteration, seconds, in round order), its phase (A/A or 20 % slowdown), start and end (UTC), the
command, the settings and the machine's load average while it ran, appended to PATH (created if
missing; rewritten atomically after each session, so an interrupted run keeps what it finished).
--aa-sessions K runs the A/A phase K times (one A/A phase of --trials 67 is one live A/A session
of the main job's size); --slowdown-trials sets the slowdown phase's trials (0: none).
benchmarks/bench_session_errors.py resamples the kept A/A trials into simulated sessions;
benchmarks/data/ab_rounds.json was recorded on 2026-12-02, 03:56-04:20 UTC, on this 2-core VM
while other sessions ran their tests (load average 8 to 18), by
    python benchmarks/bench_ab.py --trials 67 --aa-sessions 1 --slowdown-trials 40 \
        --skip-history --record benchmarks/data/ab_rounds.json
(its sessions' `command`, `started`, `ended` and `load_average_1min` fields say the same).
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
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from pytest_distbench.results import document as storage
from pytest_distbench.results.comparison import verdict
from pytest_distbench.results.document import history
from pytest_distbench.results.document.io import write_output
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


def session(tmp: Path, out: Path, slow: bool, extra: list[str], kind: str,
            test_file: str = "test_work.py") -> float:
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--distbench", *TINY,
         *BUDGET[kind],
         f"--distbench-json={out}", *BIND, *extra, test_file],
        cwd=tmp, capture_output=True, text=True, timeout=3600,
        env={**os.environ, "DISTBENCH_SLOWDOWN": "1" if slow else "0"},
    )
    # Exit 1 is a caught regression (a failed test): expected in the slowdown trials.
    if done.returncode not in (0, 1) or not out.exists():
        raise SystemExit(f"pytest failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return time.perf_counter() - began


@contextmanager
def load_sampled(every_s: float = 5.0) -> Iterator[list[float]]:
    """The 1-minute load average every `every_s` seconds while the block runs (other sessions
    share this machine: the kept data says how busy it was)."""
    samples = [os.getloadavg()[0]]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(every_s):
            samples.append(os.getloadavg()[0])

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join()
        samples.append(os.getloadavg()[0])


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def kept_session(phase: str, doc: dict, started: str, load: list[float],
                 settings: dict) -> dict:
    """One A/B session as data: its trials' per-round values and where they came from."""
    ordered = sorted(round(x, 2) for x in load)
    return {
        "phase": phase,
        "started": started,
        "ended": utc_now(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "settings": settings,
        "load_average_1min": {"min": ordered[0], "median": ordered[len(ordered) // 2],
                              "max": ordered[-1], "samples": len(ordered),
                              "every_s": 5},
        "trials": [{"id": nodeid, "baseline_round_s": rec["ab"]["baseline_round_s"],
                    "candidate_round_s": rec["ab"]["candidate_round_s"]}
                   for nodeid, rec in storage.records(doc).items()],
    }


KEPT_WHAT = (
    "A/B sessions of benchmarks/bench_ab.py kept as data (--record): per trial (one benchmark), "
    "each round's fastest iteration of the baseline and of the candidate, seconds, in round "
    "order (ABBA), as the A/B record stores them (baseline_round_s / candidate_round_s). "
    "Workload: ten 1 KiB all_reduce calls per step, twelve in the candidate of the '20 % "
    "slowdown' phase; 2-rank gloo world, A/B defaults (placement pack, 0.2 s per run).")


def record_kept(path: Path, session_data: dict) -> None:
    """Append one session to the kept data at `path`, atomically."""
    kept = {"what": KEPT_WHAT, "sessions": []}
    if path.exists():
        kept = json.loads(path.read_text())
    kept["sessions"].append(session_data)
    write_output(path, dumps_kept(kept).encode())


def kept_problem(path: Path) -> str | None:
    """Why `path` cannot take more sessions, or None (a missing file is started)."""
    if not path.exists():
        return None if path.parent.is_dir() else "its directory does not exist"
    try:
        kept = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"cannot read it as JSON ({exc})"
    if not (isinstance(kept, dict) and isinstance(kept.get("sessions"), list)):
        return "not a file of kept sessions (no 'sessions' list)"
    return None


def dumps_kept(kept: dict) -> str:
    """JSON with one trial a line: small enough to read, diff and commit."""
    parts = []
    for s in kept["sessions"]:
        head = json.dumps({k: v for k, v in s.items() if k != "trials"})
        trials = ",\n   ".join(json.dumps(t) for t in s["trials"])
        parts.append(f'{head[:-1]}, "trials": [\n   {trials}]}}')
    head = json.dumps({k: v for k, v in kept.items() if k != "sessions"})
    return head[:-1] + ', "sessions": [\n ' + ",\n ".join(parts) + "]}\n"


ROUND_VALUES = {
    # What could stand for a round, from the per-round summaries every record keeps.
    "min": lambda s: s["min"],
    "p25": lambda s: s["p75"] - s["iqr"],
    "p50": lambda s: s["p50"],
    "mean": lambda s: s["mean"],
}


def ab_figures(docs: list[dict], rounds: int, threshold: float,
               statistic: str | None = None) -> tuple[int, int, float]:
    """(regressions, trials, median detectable) judging the first `rounds` rounds, by the
    plugin's own per-round statistic or, for the design record, another one."""
    flagged, detectable = 0, []
    recs = [rec for doc in docs for rec in storage.records(doc).values()]
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


def run_ab(tmp: Path, args: argparse.Namespace) -> dict:
    """The A/B phases: --aa-sessions A/A sessions, then the slowdown; prints their figures."""
    ab = ["--distbench-baseline-env=DISTBENCH_SLOWDOWN=0", f"--distbench-rounds={args.rounds}"]
    if args.extra_rounds is not None:
        ab.append(f"--distbench-extra-rounds={args.extra_rounds}")
    settings = {"rounds": args.rounds, "threshold": args.threshold, "world_size": 2,
                "extra_rounds": ("A/B default" if args.extra_rounds is None
                                 else args.extra_rounds),
                "budget": args.budget or "A/B default", "min_iterations": args.min_iterations,
                "bind": args.bind or "auto"}
    phases = [("A/A", False, args.trials)] * args.aa_sessions
    if args.slowdown_trials:
        phases.append(("20 % slowdown", True, args.slowdown_trials))
    docs: dict[str, list[dict]] = {"A/A": [], "20 % slowdown": []}
    for i, (name, slow, trials) in enumerate(phases):
        test_file = f"test_ab_{trials}.py"
        (tmp / test_file).write_text(textwrap.dedent(BENCH.format(trials=trials)))
        out = tmp / f"ab-{slow}-{i}.json"
        started = utc_now()
        with load_sampled() as load:
            wall = session(tmp, out, slow, ab, "ab", test_file)
        doc = storage.read_document(out)
        docs[name].append(doc)
        if args.record is not None:
            record_kept(args.record, kept_session(name, doc, started, load,
                                                  {**settings, "trials": trials}))
        walls = sorted(r["ab"]["wall_s"] for r in storage.records(doc).values())
        print(f"A/B {name}: session {wall:.0f} s, {trials} benchmarks x "
              f"{args.rounds} rounds; wall per benchmark median "
              f"{walls[len(walls) // 2]:.2f} s; load average (1 min) "
              f"{min(load):.1f}..{max(load):.1f}", flush=True)
    if not (docs["A/A"] and docs["20 % slowdown"]):
        return {}
    results = {"as_judged": sessions_judged(docs, args.rounds)}
    print(f"\nA/B mode, {args.trials} x {args.aa_sessions} A/A trials, {args.slowdown_trials} "
          f"slowdown trials, threshold {args.threshold * 100:g} %")
    print("rounds | A/A no regression | 20 % slowdown caught | median detectable "
          "(A/A) | wall per benchmark")
    per_round = statistics_wall(docs["A/A"][0], args.rounds)
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
        caught, m, _ = ab_figures(docs["20 % slowdown"], args.rounds, args.threshold, name)
        print(f"  {name:>4}: A/A no regression {100 * (1 - false / n):5.1f} %, slowdown "
              f"caught {100 * caught / m:5.1f} %, median detectable {det * 100:.1f} %")
    return results


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
    parser.add_argument("--extra-rounds", type=int, default=None,
                        help="--distbench-extra-rounds of the A/B sessions (default: the "
                             "plugin's)")
    parser.add_argument("--budget", default="",
                        help="--distbench-budget of the A/B sessions (default: the plugin's)")
    parser.add_argument("--history-budget", default="0.2s",
                        help="--distbench-budget of the stored-baseline sessions")
    parser.add_argument("--min-iterations", type=int, default=10)
    parser.add_argument("--bind", default=None, help="--distbench-bind for every session")
    parser.add_argument("--aa-sessions", type=int, default=1,
                        help="A/A sessions of --trials trials each (default 1)")
    parser.add_argument("--slowdown-trials", type=int, default=None,
                        help="trials of the slowdown session (default: --trials; 0: none)")
    parser.add_argument("--record", type=Path, default=None,
                        help="append each A/B session's per-round values to this JSON file")
    args = parser.parse_args()
    if args.slowdown_trials is None:
        args.slowdown_trials = args.trials
    if args.trials < 1 or args.aa_sessions < 0 or args.slowdown_trials < 0:
        parser.error("--trials must be >= 1, --aa-sessions and --slowdown-trials >= 0")
    if args.record is not None and (problem := kept_problem(args.record)):
        parser.error(f"--record {args.record}: {problem}")
    if args.bind:
        BIND[:] = [f"--distbench-bind={args.bind}"]
    least = f"--distbench-min-iterations={args.min_iterations}"
    BUDGET["ab"] = [least] + ([f"--distbench-budget={args.budget}"] if args.budget else [])
    BUDGET["stored"] = [least, f"--distbench-budget={args.history_budget}"]
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "test_work.py").write_text(textwrap.dedent(BENCH.format(trials=args.trials)))
        if not args.skip_ab:
            results.update(run_ab(tmp, args))

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


def sessions_judged(docs: dict[str, list[dict]], rounds: int) -> dict:
    """The sessions' own verdicts, as the plugin gave them (each point at its share of the
    session's family-wise 1 %, with the extra rounds where the first left a regression open),
    where the table below re-judges the kept rounds at p < 0.01 per point."""
    print("as the sessions judged (each point at 1 % / N tests, divided among its looks: more "
          "rounds while a regression was left open):")
    figures = {}
    for name, phase_docs in docs.items():
        abs_ = [rec["ab"] for doc in phase_docs for rec in storage.records(doc).values()]
        kinds = [ab["verdict"] for ab in abs_]
        extended = sum(ab["rounds"] > rounds for ab in abs_)
        walls = sorted(ab["wall_s"] for ab in abs_)
        figures[name] = {"trials": len(kinds), "regressions": kinds.count("regression"),
                         "extended": extended, "wall_per_benchmark_s": walls[len(walls) // 2]}
        others = [f"{kinds.count(k)} {k}" for k in sorted(set(kinds)) if k != "regression"]
        used = sorted(ab["rounds"] for ab in abs_)
        print(f"  {name}: {kinds.count('regression')} of {len(kinds)} trials a regression "
              f"({100 * kinds.count('regression') / len(kinds):.1f} %)"
              + "".join(f", {o}" for o in others)
              + f"; {extended} ran extra rounds (rounds: "
              + ", ".join(f"{used.count(n)} x {n}" for n in sorted(set(used)))
              + f"); wall per benchmark median {walls[len(walls) // 2]:.2f} s, mean "
              f"{sum(walls) / len(walls):.2f} s", flush=True)
    return figures


def statistics_wall(doc: dict, rounds: int) -> float:
    """Median wall seconds per round per benchmark (both variants)."""
    walls = sorted(r["ab"]["wall_s"] / r["ab"]["rounds"] for r in storage.records(doc).values())
    return walls[len(walls) // 2]


if __name__ == "__main__":
    main()
