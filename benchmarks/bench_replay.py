"""Replay against the original: each real program of replay_programs.py is captured under
torchrun, then replayed as a distbench test in the same world size, and their communication
time per step is printed side by side, per operation kind, in one run.

    python benchmarks/bench_replay.py [--programs ddp,fsdp2,2d] [--ranks 2,4] [--steps 5]

Original: from the capture's own timings, each call's issue to its completion (the backend's
Work future), summed over the ranks' calls of a kind, per captured step; compute is not in
it, but the program's compute runs beside its communication on the same cores. Replay: the
same calls with no compute between them, each timed from its issue to the end of its wait,
summed over the ranks the same way (the record's breakdown), per step. ratio = replay /
original. "replay, loaded": the same replay with one busy thread per rank
(--distbench-cpu-threads=1) standing in for the program's compute, which in the original
shares the cores with the communication. Overlapped calls each count their whole time in
flight, on both sides alike, so a kind's figure is the time its calls were outstanding, not
the step's wall time.
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


def original(trace_dir: Path) -> tuple[dict[str, float], int]:
    """Seconds per step by op (every rank's calls summed), and the calls without a completion
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
    return dict(by_op), unknown


def replay(trace_dir: Path, ranks: int, budget: str, work: Path, *extra: str) -> dict:
    out = work / "replay.json"
    out.unlink(missing_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--distbench",
         f"--world-size={ranks}", f"--distbench-replay={trace_dir}",
         f"--distbench-budget={budget}", f"--distbench-json={out}", *extra],
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
    print(f"{'program':8} {'ranks':>5} {'op':24} {'original':>9} {'replay':>9} {'ratio':>6} "
          f"{'replay, loaded':>15} {'ratio':>6}   (ms per step)")
    for program in args.programs.split(","):
        for ranks in (int(r) for r in args.ranks.split(",")):
            if program == "2d" and ranks % 2:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                work = Path(tmp)
                trace_dir = work / f"{program}_{ranks}"
                capture(program, ranks, args.steps, trace_dir)
                first, unknown = original(trace_dir)
                quiet = by_op(replay(trace_dir, ranks, args.budget, work))
                # One busy thread per rank beside the replay: the program's compute, which
                # shares the cores with its communication in the original.
                loaded = by_op(replay(trace_dir, ranks, args.budget, work,
                                      "--distbench-cpu-threads=1"))
            rows = sorted(set(first) | set(quiet))
            for op in [*rows, "(all kinds)"]:
                if op == "(all kinds)":
                    known = [o for o in rows if o in first]  # like for like: both sides timed
                    a = sum(first[o] for o in known) or None
                    b = sum(quiet.get(o, 0.0) for o in known) or None
                    c = sum(loaded.get(o, 0.0) for o in known) or None
                else:
                    a, b, c = first.get(op), quiet.get(op), loaded.get(op)
                print(f"{program:8} {ranks:5} {op:24} {_ms(a):>9} {_ms(b):>9} {_ratio(b, a)} "
                      f"{_ms(c):>15} {_ratio(c, a)}")
            if unknown:
                print(f"{'':39}({unknown} captured calls had no completion time: gloo gives "
                      "none for them; left out of the original and of (all kinds))")


def by_op(record: dict) -> dict[str, float]:
    """The record's breakdown as seconds per step by op (every rank's calls summed)."""
    per_step = int(record["figures"]["steps"]) or 1
    found: dict[str, float] = defaultdict(float)
    for row in record["figures"]["breakdown"]:
        found[row["op"]] += row["seconds"] / per_step
    return dict(found)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:6.2f}" if a and b else f"{'-':>6}"


if __name__ == "__main__":
    main()
