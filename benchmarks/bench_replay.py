"""Replay against the original: each real program of replay_programs.py is captured under
torchrun, then replayed in one pytest session of the same world size with every gap mode, and
the step's time is printed beside the original's, in one run.

    python benchmarks/bench_replay.py [--programs ddp,fsdp2,2d] [--ranks 2,4] [--steps 3]

Per program and world size, ms per captured step: original = the captured steps' own time
(each rank's step spans, from the end of the step before to its optimizer.step(); the slowest
rank); then the replay's p50 (slowest rank per iteration) with its 95 % interval, with the
gaps between the calls off (the calls back to back), idle (sleep) and busy (matrix products
on the CPU, calibrated once per world), each a ratio to the original; A/A = the busy replay
run a second time in the same session: |second / first - 1|, the band within which two
replays of one trace agree. Then, per operation kind, the time its calls were outstanding per
step, summed over the ranks, in the original (issue to the backend's completion) and in the
busy replay (issue to the end of its wait), over the calls whose completion the capture saw.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pytest_distbench.families.replay.reading import read  # noqa: E402
from pytest_distbench.results.rendering import ci  # noqa: E402

PROGRAMS = HERE / "replay_programs.py"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def capture(program: str, ranks: int, steps: int, out: Path) -> None:
    launch = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={ranks}",
              f"--master-port={_port()}", str(PROGRAMS), program, "--steps", str(steps + 1)]
    wanted = ",".join(str(s) for s in range(1, steps + 1))
    done = subprocess.run([sys.executable, "-m", "pytest_distbench.cli", "capture", "--out",
                           str(out), "--steps", wanted, "--", *launch],
                          capture_output=True, text=True, timeout=600)
    if done.returncode:
        raise SystemExit(f"capture of {program} at {ranks} ranks failed:\n{done.stderr[-3000:]}")


SESSION = """
import pytest
from pytest_distbench.families.replay.step import replay

MODES = [("off", "off"), ("idle", "idle"), ("busy", "busy"), ("busy, again", "busy")]


@pytest.mark.distbench
def test_modes(distbench):
    for name, gaps in MODES:
        replay(distbench, {trace!r}, gaps=gaps, name=name)
"""
def replay(trace_dir: Path, ranks: int, budget: str, work: Path) -> dict[str, dict]:
    """The replay's records by gap mode, all from one session."""
    out = work / "replay.json"
    out.unlink(missing_ok=True)
    (work / "test_modes.py").write_text(SESSION.format(trace=str(trace_dir)))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--distbench",
         f"--world-size={ranks}", "test_modes.py", f"--distbench-budget={budget}",
         "--distbench-min-iterations=5", "--distbench-warmup=1", f"--distbench-json={out}"],
        capture_output=True, text=True, timeout=900, cwd=work)
    if done.returncode:
        raise SystemExit(f"replay of {trace_dir} failed:\n{done.stdout[-3000:]}")
    records = [b["distbench"] for b in json.loads(out.read_text())["benchmarks"]]
    return {r["name"].rsplit("::", 1)[-1]: r for r in records}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", default="ddp,fsdp2,2d")
    parser.add_argument("--ranks", default="2,4")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--budget", default="3s", help="each replay's budget")
    args = parser.parse_args()
    print(f"load: {os.getloadavg()[0]:.1f} (1-minute load average) on {os.cpu_count()} cores "
          f"at the start")
    print(f"{'program':8} {'ranks':>5} {'original':>9} "
          + " ".join(f"{m:>20}" for m in ("off", "idle", "busy")) + f" {'A/A':>6}"
          + "   (ms per step; replay p50 ± 95 % CI, ratio to the original)")
    per_op_lines = []
    for program in args.programs.split(","):
        for ranks in (int(r) for r in args.ranks.split(",")):
            if program == "2d" and ranks % 2:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                work = Path(tmp)
                trace_dir = work / f"{program}_{ranks}"
                capture(program, ranks, args.steps, trace_dir)
                steps = len(read(trace_dir).steps)
                records = replay(trace_dir, ranks, args.budget, work)
            original = records["busy"]["figures"]["original_s"] / steps
            cells = []
            for mode in ("off", "idle", "busy"):
                r = records[mode]
                p50 = r["summary"]["p50"] / steps
                half = _half_width(r) / steps
                cells.append(f"{p50 * 1e3:7.1f} ±{half * 1e3:5.1f} {p50 / original:5.2f}")
            first, again = (records[m]["summary"]["p50"] for m in ("busy", "busy, again"))
            print(f"{program:8} {ranks:5} {original * 1e3:9.1f} "
                  + " ".join(f"{c:>20}" for c in cells) + f" {abs(again / first - 1):6.2f}")
            per_op_lines += _per_op(program, ranks, records["busy"], steps)
    print()
    print(f"{'program':8} {'ranks':>5} {'op':24} {'original':>9} {'busy':>9} {'ratio':>6}"
          "   (ms per step the calls were outstanding, all ranks; calls with a completion)")
    for line in per_op_lines:
        print(line)


def _half_width(record: dict) -> float:
    """Half the p50's 95 % interval (the session interval), in seconds; 0 where none."""
    bounds = ci.p50_bounds(record)
    return (bounds[1] - bounds[0]) / 2 if bounds else 0.0


def _per_op(program: str, ranks: int, record: dict, steps: int) -> list[str]:
    original: dict[str, float] = defaultdict(float)
    replayed: dict[str, float] = defaultdict(float)
    unknown = 0
    for row in record["figures"]["breakdown"]:
        unknown += row["calls"] - row["original_calls"]
        if row["original_seconds"] is not None:
            original[row["op"]] += row["original_seconds"] / steps
            replayed[row["op"]] += row["ratio"] * row["original_seconds"] / steps
    lines = []
    for op in [*sorted(original), "(all kinds)"]:
        a = sum(original.values()) if op == "(all kinds)" else original[op]
        b = sum(replayed.values()) if op == "(all kinds)" else replayed[op]
        lines.append(f"{program:8} {ranks:5} {op:24} {a * 1e3:9.2f} {b * 1e3:9.2f} "
                     f"{b / a if a else float('nan'):6.2f}")
    if unknown:
        lines.append(f"{'':15}({unknown} calls per replay had no completion time in the capture "
                     "(gloo gives none for them): left out above)")
    return lines


if __name__ == "__main__":
    main()
