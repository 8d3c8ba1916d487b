"""`pytest-distbench compare` of large results files: the CPU time per benchmark, side by side.

    python benchmarks/bench_compare.py [--sizes 5000,10000] [--before DIR]

Two results files of N benchmarks each (the reference baseline's records repeated under new
ids, the current file's samples scaled by 0.9-1.1 + 5 %) are compared by the command, in a
process of its own; printed per N: its CPU time (user + system: what a shared machine does
not inflate the way it does wall time), the wall time, and both per benchmark. With --before
DIR (a checkout's directory holding pytest_distbench, put first on PYTHONPATH), that code is
run alternately with this one on the same files, and the ratio is printed.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "baselines" / "reference-2core-vm-torch2.13.0" / "collectives-ws2.json"


def results_file(path: Path, n: int, scale: float) -> None:
    source = json.loads(REFERENCE.read_text())
    rng = random.Random(n)
    benchmarks = []
    for i in range(n):
        b = copy.deepcopy(source["benchmarks"][i % len(source["benchmarks"])])
        d = b["distbench"]
        d["id"] = f"{d['id']}-{i}"
        b["name"] = b["fullname"] = d["name"] = f"{d['name']}-{i}"
        factor = scale * rng.uniform(0.9, 1.1)
        d["samples"] = [s * factor for s in d["samples"]]
        benchmarks.append(b)
    source["benchmarks"] = benchmarks
    path.write_text(json.dumps(source))


def timed_compare(a: Path, b: Path, code: str | None) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one compare in a process of its own."""
    env = dict(os.environ)
    if code:
        env["PYTHONPATH"] = code
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    # Run from the files' directory: `-m` puts the working directory first on sys.path, where a
    # checkout's own pytest_distbench would win over --before's.
    subprocess.run([sys.executable, "-m", "pytest_distbench.cli", "compare", str(a), str(b)],
                   cwd=a.parent, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=True)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="5000,10000",
                        help="benchmarks per file, comma-separated")
    parser.add_argument("--before", help="a checkout's directory to compare this code with")
    args = parser.parse_args()
    versions = [("after", None)] if not args.before else [("before", args.before), ("after", None)]
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(s) for s in args.sizes.split(",")):
            a, b = Path(tmp) / "a.json", Path(tmp) / "b.json"
            results_file(a, n, 1.0)
            results_file(b, n, 1.05)
            size = a.stat().st_size / 1e6
            cpu = {}
            for name, code in versions:
                cpu[name], wall = timed_compare(a, b, code)
                print(f"{n:>7} benchmarks ({size:.0f} MB a file)  {name:6s}  CPU "
                      f"{cpu[name]:6.1f} s ({cpu[name] / n * 1e3:.2f} ms a benchmark), wall "
                      f"{wall:6.1f} s", flush=True)
            if len(cpu) == 2:
                print(f"{n:>7} benchmarks: CPU after / before {cpu['after'] / cpu['before']:.2f}")


if __name__ == "__main__":
    main()
