"""Replay against the original: each real program of replay_programs.py is captured under
torchrun, then replayed as a distbench test in the same world size, and their communication
time per step is printed side by side, per operation kind, in one run.

    python benchmarks/bench_replay.py [--programs ddp,fsdp2,2d] [--ranks 2,4] [--steps 5]

Original: from the capture's own timings, each call's issue to its completion (the backend's
Work future), summed over the ranks' calls of a kind, per captured step; compute is not in
it, but the program's compute runs beside its communication on the same cores. Replay: the
same calls with no compute between them, each timed from its issue to the end of its wait,
summed over the ranks the same way (the record's breakdown), per step. ratio = replay /
original. The whole step: the replay's p50 per step (wall time) beside the original's
communication summed over kinds and divided by the ranks (the mean rank's busy time).
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pytest_distbench.families.replay.reading import read  # noqa: E402

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


def original(trace_dir: Path) -> tuple[dict[str, float], int, int]:
    """Seconds per step by op (every rank's calls summed), steps, calls without a completion
    time (left out)."""
    t = read(trace_dir)
    steps = len(t.steps)
    by_op: dict[str, float] = defaultdict(float)
    unknown = 0
    for calls in t.calls.values():
        for c in calls:
            if c.completed_s is None or c.issued_s is None:
                unknown += 1
                continue
            by_op[c.op] += (c.completed_s - c.issued_s) / steps
    return dict(by_op), steps, unknown


def replay(trace_dir: Path, ranks: int, budget: str, work: Path) -> dict:
    out = work / "replay.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--distbench",
         f"--world-size={ranks}", f"--distbench-replay={trace_dir}",
         f"--distbench-budget={budget}", f"--distbench-json={out}", "--pyargs",
         "pytest_distbench.suites.test_replay", "-k", trace_dir.name],
        capture_output=True, text=True, timeout=600, cwd=work)
    if done.returncode:
        raise SystemExit(f"replay of {trace_dir} failed:\n{done.stdout[-3000:]}")
    records = [b["distbench"] for b in json.loads(out.read_text())["benchmarks"]]
    mine = [r for r in records if r["figures"].get("trace") == trace_dir.name]
    if len(mine) != 1:
        raise SystemExit(f"expected one replay record of {trace_dir.name}, got {len(mine)}")
    return mine[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", default="ddp,fsdp2,2d")
    parser.add_argument("--ranks", default="2,4")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--budget", default="3s", help="the replay's budget per trace")
    args = parser.parse_args()
    print(f"{'program':8} {'ranks':>5} {'op':24} {'original ms/step':>17} "
          f"{'replay ms/step':>15} {'ratio':>6}")
    for program in args.programs.split(","):
        for ranks in (int(r) for r in args.ranks.split(",")):
            if program == "2d" and ranks % 2:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                work = Path(tmp)
                trace_dir = work / f"{program}_{ranks}"
                capture(program, ranks, args.steps, trace_dir)
                first, steps, unknown = original(trace_dir)
                record = replay(trace_dir, ranks, args.budget, work)
                per_step = int(record["figures"]["steps"]) or 1
                second: dict[str, float] = defaultdict(float)
                for row in record["figures"]["breakdown"]:
                    second[row["op"]] += row["seconds"] / per_step
                for op in sorted(set(first) | set(second)):
                    a, b = first.get(op), second.get(op)
                    ratio = f"{b / a:6.2f}" if a and b else "     -"
                    print(f"{program:8} {ranks:5} {op:24} "
                          f"{'-' if a is None else f'{a * 1e3:.2f}':>17} "
                          f"{'-' if b is None else f'{b * 1e3:.2f}':>15} {ratio}")
                busy = sum(first.values()) / ranks
                p50 = record["summary"]["p50"] / per_step
                print(f"{program:8} {ranks:5} {'(whole step)':24} {busy * 1e3:17.2f} "
                      f"{p50 * 1e3:15.2f} {p50 / busy if busy else float('nan'):6.2f}"
                      + (f"   ({unknown} calls without a completion time left out)"
                         if unknown else ""))


if __name__ == "__main__":
    main()
