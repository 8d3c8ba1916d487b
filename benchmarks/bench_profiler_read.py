"""How reading torch.profiler Chrome traces (`capture --from-profiler`) grows with the events:
the time of N and of 2N events side by side, and their ratio (about 2 where reading is linear,
4 where it is quadratic). Each reading runs in a fresh process, optionally against another
checkout's reader too (--before, e.g. a worktree of the commit before).

    python benchmarks/bench_profiler_read.py [--events 8000] [--before /path/to/checkout]

Two shapes of a 2-rank profile, both once quadratic (issue 54, item 5):
"unmatched", N gloo operator events (c10d::allreduce_) and N gloo work events of another
shape, none paired (each operator looked through every work); "one step", N
record_param_comms all_reduce calls in one step (each call looked through the rest of its
step for where it was waited).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _event(name: str, ts: float, args: dict) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 2.0,
            "args": args}


def unmatched(n: int) -> list[dict]:
    ops = [_event("c10d::allreduce_", 10.0 * k, {"Input Dims": [[[4]]],
                                                 "Input type": ["TensorList"]})
           for k in range(n)]
    works = [_event("gloo:all_reduce", 10.0 * k + 1, {"Input Dims": [[8]],
                                                      "Input type": ["float"]})
             for k in range(n)]
    return ops + works


def one_step(n: int) -> list[dict]:
    return [_event("record_param_comms", 10.0 * k, {
        "Collective name": "allreduce", "dtype": "Float", "In msg nelems": 1024,
        "Out msg nelems": 1024, "Process Group Ranks": "[0, 1]"}) for k in range(n)]


def write(directory: Path, events: list[dict], backend: str) -> list[str]:
    directory.mkdir()
    paths = []
    for r in range(2):
        data = {"distributedInfo": {"backend": backend, "rank": r, "world_size": 2,
                                    "pg_config": [{"ranks": [0, 1]}]},
                "traceEvents": events}
        path = directory / f"rank{r}.json"
        path.write_text(json.dumps(data))
        paths.append(str(path))
    return paths


CHILD = """
import sys, time
sys.path.insert(0, sys.argv[1])
from pytest_distbench.families.replay import profiler
start = time.process_time()
profiler.load(sys.argv[2:])
print(time.process_time() - start)
"""


def measure(package: Path, files: list[str]) -> float:
    done = subprocess.run([sys.executable, "-c", CHILD, str(package), *files],
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"failed: {done.stderr.strip().splitlines()[-1]}")
    return float(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=8000)
    parser.add_argument("--before", type=Path, default=None)
    args = parser.parse_args()
    checkouts = [("this checkout", HERE.parent)]
    if args.before:
        checkouts.append(("--before", args.before))
    n = args.events
    with tempfile.TemporaryDirectory() as tmp:
        for shape, make, backend in (("unmatched", unmatched, "gloo"),
                                     ("one step", one_step, "nccl")):
            files = {k: write(Path(tmp) / f"{shape}-{k}".replace(" ", "-"), make(k), backend)
                     for k in (n, 2 * n)}
            for label, package in checkouts:
                small, large = (measure(package, files[k]) for k in (n, 2 * n))
                print(f"{shape:9} {label:13}  N={n}: {small:7.2f} s CPU  2N={2 * n}: "
                      f"{large:7.2f} s CPU  ratio {large / small:4.1f}")


if __name__ == "__main__":
    main()
