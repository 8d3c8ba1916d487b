"""What reading and checking a large trace costs: wall time and peak memory (max RSS) of each
reader of it, in a fresh process each, side by side in one run, optionally against another
checkout's reader (--before, e.g. a worktree of main). CPU seconds (the process's own, the
interpreter's start and imports included) say more than wall time on a loaded machine.

    python benchmarks/bench_trace_read.py [--calls 1000000] [--ranks 2] [--groups 4000]
        [--before /path/to/other/checkout]

Two traces are written to a temporary directory: "long", `--ranks` ranks of `--calls`
all_reduce calls each on the world's group (a rank file of about 60 bytes a call), and
"groups", `--groups` groups of two ranks and 20,000 calls cycling through them. Readers:
"option" (what --distbench-replay does at the session's start: every file read and checked,
no rank's calls held), "rank 0" (a replaying rank 0: its own calls, and the whole trace
checked), "rank 1" (another replaying rank: the manifest and its own calls). --before runs
that checkout's reading.read(DIR), which every one of its readers did.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

CALL = json.dumps({"op": "all_reduce", "group": 0, "reduce_op": "sum", "step": 0,
                   "inputs": [{"dtype": "float32", "shape": [1024]}]})


def write_trace(out: Path, ranks: int, calls: int, groups: int) -> None:
    out.mkdir()
    ids = list(range(1, groups + 1)) or [0]
    members = [0, 1] if ranks >= 2 else [0]
    for r in range(ranks):
        with open(out / f"rank{r}.json", "w") as f:
            f.write(f'{{"format": "pytest-distbench-trace-rank", "version": 1, "rank": {r}, '
                    '"calls": [')
            for i in range(calls):
                group = ids[i % len(ids)] if r in members else 0
                f.write(("," if i else "") + CALL.replace('"group": 0', f'"group": {group}'))
            f.write("]}\n")
    manifest = {"format": "pytest-distbench-trace", "version": 1, "world_size": ranks,
                "groups": [{"id": 0, "ranks": list(range(ranks))}]
                + [{"id": g, "ranks": members} for g in range(1, groups + 1)],
                "ranks": {str(r): f"rank{r}.json" for r in range(ranks)}}
    (out / "manifest.json").write_text(json.dumps(manifest))


CHILD = """
import resource, sys, time
sys.path.insert(0, sys.argv[1])
from pytest_distbench.families.replay.reading import read
start = time.perf_counter()
how = sys.argv[3]
if how == "before":
    read(sys.argv[2])
else:
    read(sys.argv[2], keep={"option": (), "rank 0": (0,), "rank 1": (1,)}[how],
         check=how != "rank 1")
usage = resource.getrusage(resource.RUSAGE_SELF)
print(time.perf_counter() - start, usage.ru_utime + usage.ru_stime, usage.ru_maxrss)
"""


def measure(package: Path, trace: Path, how: str) -> str:
    done = subprocess.run([sys.executable, "-c", CHILD, str(package), str(trace), how],
                          capture_output=True, text=True)
    if done.returncode:
        return f"failed: {done.stderr.strip().splitlines()[-1][:60]}"
    seconds, cpu, kib = done.stdout.split()
    return f"{float(seconds):8.2f} s wall {float(cpu):8.2f} s CPU {int(kib) / 1024:8.0f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--groups", type=int, default=4000)
    parser.add_argument("--before", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        traces = {"long": Path(tmp) / "long", "groups": Path(tmp) / "groups"}
        write_trace(traces["long"], args.ranks, args.calls, 0)
        write_trace(traces["groups"], 2, 20_000, args.groups)
        for name, path in traces.items():
            size = sum(f.stat().st_size for f in path.iterdir()) / 2**20
            print(f"trace {name}: {size:.0f} MiB in {len(list(path.iterdir()))} files")
            readers = ["option", "rank 0", "rank 1"]
            for how in readers:
                print(f"  {how:8} this checkout  {measure(HERE.parent, path, how)}")
            if args.before:
                print(f"  {'any':8} --before       {measure(args.before, path, 'before')}")


if __name__ == "__main__":
    main()
