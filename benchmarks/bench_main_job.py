"""The main job (`pytest --distbench --world-size=8`, every built-in suite) at two revisions,
alternated in one run: wall time and time per suite, before and after.

Each revision runs from its own `git worktree` (its own code imported through PYTHONPATH), in
the order A B B A ... so that a drift of the machine's speed hits both alike.

    python benchmarks/bench_main_job.py --before 72c030d [--after HEAD] [--rounds 1]
"""

from __future__ import annotations

import argparse
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


def run_main_job(tree: Path, extra: list[str]) -> tuple[float, dict[str, float], str]:
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--distbench", "--world-size=8", "-p",
         "no:cacheprovider", "--durations=0", "-q", *extra],
        cwd=tree, env={**_env(), "PYTHONPATH": str(tree)}, capture_output=True, text=True)
    wall = time.perf_counter() - began
    per_suite: dict[str, float] = defaultdict(float)
    for line in done.stdout.splitlines():
        match = DURATION.match(line)
        if match:
            per_suite[Path(match.group(2)).stem] += float(match.group(1))
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    return wall, dict(per_suite), summary


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", default="HEAD")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                        help="arguments for both sessions (after everything else)")
    args = parser.parse_args(argv)
    walls: dict[str, list[float]] = {"before": [], "after": []}
    suites: dict[str, dict[str, list[float]]] = {"before": defaultdict(list),
                                                 "after": defaultdict(list)}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"before": checkout(args.before, Path(tmp)),
                 "after": checkout(args.after, Path(tmp))}
        try:
            for round_ in range(args.rounds):
                order = ["before", "after"] if round_ % 2 == 0 else ["after", "before"]
                for side in order:
                    wall, per_suite, summary = run_main_job(trees[side], args.extra)
                    walls[side].append(wall)
                    for suite, seconds in per_suite.items():
                        suites[side][suite].append(seconds)
                    print(f"{side}: {wall:.0f} s  {summary}", file=sys.stderr, flush=True)
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
