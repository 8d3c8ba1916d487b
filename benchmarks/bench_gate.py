"""Quality of the regression gate on this machine, measured in one run.

    python benchmarks/bench_gate.py [--world-size 2] [--pairs 2] [--trials 40]

1. A/A: the built-in collectives suite is run twice back to back and the two results files are
   compared with the gate's own verdict code; repeated --pairs times. Target: no regression
   verdict on at least 99 % of the benchmarks.
2. A real slowdown: --trials copies of a benchmark whose work (a series of small all_reduce
   calls) gets 20 % more of the same work when DISTBENCH_SLOWDOWN=1; one run without, one with,
   compared. Target: flagged on at least 95 % of the trials.
Both use the plugin's default settings (iterations, warm-up, threshold), which are what this
script is checking.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from pytest_distbench.results import document as storage
from pytest_distbench.results.comparison import verdict

ROOT = Path(__file__).resolve().parent.parent

SLOWDOWN_BENCH = """
import os, pytest, torch, torch.distributed as dist

# Ten all_reduce calls per iteration, twelve with the slowdown: 20 % more of the same work.
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


def run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=3600,
        env=None if env is None else {**__import__("os").environ, **env},
    )
    if result.returncode != 0:
        raise SystemExit(f"pytest failed:\n{result.stdout[-5000:]}\n{result.stderr[-5000:]}")


def compare(a: Path, b: Path) -> verdict.Comparison:
    first, second = storage.read_document(a), storage.read_document(b)
    probes = [d["distbench"]["environment"].get("cpu_probe_s") for d in (first, second)]
    print(f"  machine speed probe (s, start/end): {a.name} {probes[0]}, {b.name} {probes[1]}")
    speed = verdict.speed_difference(
        first["distbench"]["environment"], second["distbench"]["environment"]
    )
    if speed:
        print(f"  WARNING {speed}")
    return verdict.compare_documents(first, second, threshold=verdict.DEFAULT_THRESHOLD)


def iterations(path: Path) -> list[int]:
    return [r["iterations"] for r in storage.records(storage.read_document(path)).values()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=2, help="A/A pairs of suite runs")
    parser.add_argument("--trials", type=int, default=40, help="slowed-down benchmarks")
    parser.add_argument("--tensor-size", default="4B:64MiB:x4")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        print(
            f"== A/A: collectives suite, ws{args.world_size}, {args.pairs} pair(s) ==", flush=True
        )
        regressions = improvements = compared = 0
        counts: list[int] = []
        for pair in range(args.pairs):
            paths = [tmp / f"aa-{pair}-{side}.json" for side in "ab"]
            for path in paths:
                run(
                    [
                        "--distbench",
                        f"--world-size={args.world_size}",
                        f"--tensor-size={args.tensor_size}",
                        f"--distbench-json={path}",
                        str(ROOT / "pytest_distbench" / "suites"),
                    ],
                    cwd=tmp,
                )
            comparison = compare(*paths)
            regressions += len(comparison.regressions)
            improvements += len(comparison.of_kind("improvement"))
            compared += len(comparison.verdicts)
            counts += iterations(paths[1])
            for v in comparison.regressions:
                print(f"  false regression: {v.name} {v.change * 100:+.1f} % p={v.p_value:.2g}")
        clean = 1 - regressions / compared
        print(
            f"A/A: {regressions} regression verdicts, {improvements} improvement verdicts "
            f"out of {compared} compared benchmarks: {clean * 100:.1f} % clean "
            f"(target >= 99 %)"
        )
        print(
            f"timed iterations per benchmark: min {min(counts)}, median "
            f"{sorted(counts)[len(counts) // 2]}, max {max(counts)}"
        )

        print(f"== real 20 % slowdown, {args.trials} trials ==", flush=True)
        (tmp / "test_slowdown.py").write_text(
            textwrap.dedent(SLOWDOWN_BENCH.format(trials=args.trials))
        )
        base, slow = tmp / "base.json", tmp / "slow.json"
        common = ["--distbench", f"--world-size={args.world_size}", "test_slowdown.py"]
        run([*common, f"--distbench-json={base}"], cwd=tmp, env={"DISTBENCH_SLOWDOWN": "0"})
        run([*common, f"--distbench-json={slow}"], cwd=tmp, env={"DISTBENCH_SLOWDOWN": "1"})
        comparison = compare(base, slow)
        flagged = len(comparison.regressions)
        changes = sorted(v.change for v in comparison.verdicts)
        print(
            f"slowdown: flagged {flagged} of {len(comparison.verdicts)} trials: "
            f"{flagged / len(comparison.verdicts) * 100:.1f} % (target >= 95 %); measured p50 "
            f"change median {changes[len(changes) // 2] * 100:+.1f} %, range "
            f"{changes[0] * 100:+.1f} % .. {changes[-1] * 100:+.1f} %"
        )
        print(f"timed iterations per benchmark: {sorted(set(iterations(slow)))}")
        print(json.dumps({"aa_clean": clean, "slowdown_flagged": flagged / args.trials}))


if __name__ == "__main__":
    main()
