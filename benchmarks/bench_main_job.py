"""The main job (`pytest --distbench --world-size=8`, every built-in suite) at two revisions,
alternated in one run: wall time and time per suite, before and after.

Each revision runs from its own `git worktree` (its own code imported through PYTHONPATH), in
the order A B B A ... so that a drift of the machine's speed hits both alike. `--by-suite` runs
each built-in suite as its own session, A B B A suite by suite: on a machine whose load
changes within minutes (another session's tests) a pair four minutes apart compares two
loads, a pair one minute apart less so.

Beside the wall times it prints the time the timed iterations took (the results file's
`stats.total`, summed, the TCPStore suite's left out): a change in budget spending shows
there, and the wall time may grow by that much and no more.

    python benchmarks/bench_main_job.py --before 72c030d [--after HEAD] [--rounds 1] [--by-suite]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DURATION = re.compile(r"^\s*([\d.]+)s (?:setup|call|teardown)\s+(\S+?\.py)::")


def checkout(rev: str, into: Path) -> Path:
    path = into / rev.replace("/", "_")
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(path), rev],
                   check=True, capture_output=True)
    return path


def run_main_job(tree: Path, extra: list[str]) -> tuple[float, dict[str, float], str, float]:
    """Wall time, time per suite, pytest's summary line, and the timed iterations' total."""
    results = tree / ".bench_main_job.json"
    results.unlink(missing_ok=True)
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--distbench", "--world-size=8", "-p",
         "no:cacheprovider", "--durations=0", "-q", f"--distbench-json={results}", *extra],
        cwd=tree, env={**_env(), "PYTHONPATH": str(tree)}, capture_output=True, text=True)
    wall = time.perf_counter() - began
    timed = _timed_total(results)
    per_suite: dict[str, float] = defaultdict(float)
    for line in done.stdout.splitlines():
        match = DURATION.match(line)
        if match:
            per_suite[Path(match.group(2)).stem] += float(match.group(1))
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    return wall, dict(per_suite), summary, timed


def _timed_total(path: Path) -> float:
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return float("nan")
    # The TCPStore's rows time every client of a burst at once: their samples add up to
    # client-seconds (1,400 s in a 50 s session), not to the session's time.
    return sum(b["stats"]["total"] for b in document.get("benchmarks", [])
               if "test_store.py" not in b.get("fullname", ""))


def suite_paths(tree: Path) -> list[str]:
    return sorted(str(p.relative_to(tree))
                  for p in (tree / "pytest_distbench" / "suites").rglob("test_*.py"))


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", default="HEAD")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--by-suite", action="store_true",
                        help="each suite its own session, before and after side by side")
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                        help="arguments for both sessions (after everything else)")
    args = parser.parse_args(argv)
    walls: dict[str, list[float]] = {"before": [], "after": []}
    timed: dict[str, list[float]] = {"before": [], "after": []}
    suites: dict[str, dict[str, list[float]]] = {"before": defaultdict(list),
                                                 "after": defaultdict(list)}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"before": checkout(args.before, Path(tmp)),
                 "after": checkout(args.after, Path(tmp))}
        # One session of everything, or one per suite; each is a unit run A B B A.
        units = ([[path] for path in suite_paths(trees["after"])] if args.by_suite else [[]])
        try:
            for round_ in range(args.rounds):
                totals = {"before": [0.0, 0.0], "after": [0.0, 0.0]}
                for index, unit in enumerate(units):
                    first = ["before", "after"] if (round_ + index) % 2 == 0 else [
                        "after", "before"]
                    for side in first + first[::-1]:
                        wall, per_suite, summary, spent = run_main_job(
                            trees[side], [*unit, *args.extra])
                        totals[side][0] += wall / 2
                        totals[side][1] += spent / 2
                        for suite, seconds in per_suite.items():
                            suites[side][suite].append(seconds)
                        print(f"{side}: {wall:.0f} s, timed {spent:.1f} s  {unit or ''} "
                              f"{summary}", file=sys.stderr, flush=True)
                for side, (wall, spent) in totals.items():
                    walls[side].append(wall)
                    timed[side].append(spent)
        finally:
            for tree in trees.values():
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                                str(tree)], capture_output=True)
                shutil.rmtree(tree, ignore_errors=True)
    print(f"{'suite':24} {'before (s)':>11} {'after (s)':>10} {'after/before':>13}")
    for suite in sorted(set(suites["before"]) | set(suites["after"])):
        b = statistics.median(suites["before"][suite]) if suites["before"][suite] else 0.0
        a = statistics.median(suites["after"][suite]) if suites["after"][suite] else 0.0
        print(f"{suite:24} {b:11.0f} {a:10.0f} {a / b if b else float('nan'):13.2f}")
    b, a = statistics.median(walls["before"]), statistics.median(walls["after"])
    print(f"{'main job (wall)':24} {b:11.0f} {a:10.0f} {a / b:13.2f}")
    tb, ta = statistics.median(timed["before"]), statistics.median(timed["after"])
    print(f"{'timed iterations':24} {tb:11.1f} {ta:10.1f} {ta / tb:13.2f}")
    print(f"wall grew {a - b:+.1f} s; the timed iterations {ta - tb:+.1f} s (the budget spent)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
