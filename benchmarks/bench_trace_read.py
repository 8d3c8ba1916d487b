"""What reading and checking a large trace costs: wall time and peak memory (max RSS) of each
reader of it, in a fresh process each, side by side in one run, optionally against another
checkout's reader (--before, e.g. a worktree of main). CPU seconds (the process's own, the
interpreter's start and imports included) say more than wall time on a loaded machine.

    python benchmarks/bench_trace_read.py [--calls 900000] [--ranks 2] [--groups 4000]
        [--before /path/to/other/checkout]
    python benchmarks/bench_trace_read.py --worst

--worst: what a rank file at the caps costs the reader (fields.py: MAX_FILE_BYTES bytes,
MAX_VALUES values, text past U+00FF held to a half or a quarter of the bytes): one file of
each shape that makes its parse the largest, each just under the caps, read as
--distbench-replay reads (the shapes are no trace: each is refused at its first call, after
its parse, which is what is measured; the last is a real trace at the values cap).

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
import shutil
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
from pytest_distbench.families.replay.trace import TraceError
start = time.perf_counter()
how = sys.argv[3]
outcome = "read"
try:
    if how == "before":
        read(sys.argv[2])
    else:
        read(sys.argv[2], keep={"option": (), "rank 0": (0,), "rank 1": (1,)}[how],
             check=how != "rank 1")
except TraceError as e:  # --worst's shapes: refused after their parse
    outcome = "refused: " + str(e).split(": ", 1)[1][:50]
usage = resource.getrusage(resource.RUSAGE_SELF)
peak = usage.ru_maxrss  # KiB; on Linux the process's own (VmHWM): ru_maxrss starts from the
try:                    # parent's, kept across fork and exec
    status = open("/proc/self/status").read()
    peak = int(next(l.split()[1] for l in status.splitlines() if l.startswith("VmHWM:")))
except OSError:
    pass
print(time.perf_counter() - start, usage.ru_utime + usage.ru_stime, peak, outcome)
"""


def measure(package: Path, trace: Path, how: str) -> str:
    done = subprocess.run([sys.executable, "-c", CHILD, str(package), str(trace), how],
                          capture_output=True, text=True)
    if done.returncode:
        return f"failed: {done.stderr.strip().splitlines()[-1][:60]}"
    seconds, cpu, kib, outcome = done.stdout.split(maxsplit=3)
    return (f"{float(seconds):8.2f} s wall {float(cpu):8.2f} s CPU {int(kib) / 1024:8.0f} MiB"
            + ("" if outcome.strip() == "read" else f"  ({outcome.strip()})"))


# Name -> (a calls list's item, b"": distinct strings; whether a string fills the file to the
# byte cap; whether the file is only a string past U+FFFF, to a quarter of the cap).
WORST = {
    "{} objects (issue 54's)": (b"{}", False, False),
    '{"a":0} objects + a string to the cap': (b'{"a":0}', True, False),
    "distinct strings + a string to the cap": (b"", True, False),
    "[[]] lists + a string to the cap": (b"[[]]", True, False),
    "a string past U+FFFF, to a quarter of the cap": (b"", False, True),
    "calls (the --calls shape) to the values cap": (CALL.encode(), False, False),
}


def write_worst(out: Path, name: str) -> None:
    """A one-rank trace whose rank file holds as many of WORST[name]'s items as the values cap
    allows, then a string to the byte cap, or only a wide string. Run in a process of its own:
    a child's peak RSS on Linux starts from its parent's (kept across fork and exec)."""
    sys.path.insert(0, str(HERE.parent))
    from pytest_distbench.families.replay.fields import (
        MAX_FILE_BYTES,
        MAX_VALUES,
        values_at_most,
    )
    item, fill, wide = WORST[name]
    out.mkdir()
    head = b'{"format": "pytest-distbench-trace-rank", "version": 2, "rank": 0, "pad": "'
    middle, tail = b'", "calls": [', b"]}\n"
    room = MAX_VALUES - values_at_most(head + middle + tail) - 8
    pad, items = b"", b""
    if wide:
        pad = "\N{GRINNING FACE}".encode() + b"x" * (MAX_FILE_BYTES // 4 - 200)
    elif item:
        items = b",".join([item] * (room // values_at_most(item)))
    else:
        items = b",".join(b'"%d"' % k for k in range(room))
    if fill:
        pad = b"x" * (MAX_FILE_BYTES - len(head + middle + tail + items) - 16)
    raw = head + pad + middle + items + tail
    (out / "rank0.json").write_bytes(raw)
    (out / "manifest.json").write_text(json.dumps({
        "format": "pytest-distbench-trace", "version": 2, "world_size": 1,
        "groups": [{"id": 0, "ranks": [0]}], "ranks": {"0": "rank0.json"}}))
    values = values_at_most(raw)
    assert values <= MAX_VALUES and len(raw) <= MAX_FILE_BYTES, (values, len(raw))
    print(f"{name}: {len(raw) / 2**20:.0f} MiB, {values:,} values counted")


def worst() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for k, name in enumerate(WORST):
            path = Path(tmp) / f"w{k}"
            subprocess.run([sys.executable, __file__, "--write-worst", name, str(path)],
                           check=True)
            print(f"  {'option':8} this checkout  {measure(HERE.parent, path, 'option')}",
                  flush=True)
            shutil.rmtree(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # 900,000: about the most calls a rank file of this shape holds (fields.MAX_VALUES).
    parser.add_argument("--calls", type=int, default=900_000)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--groups", type=int, default=4000)
    parser.add_argument("--before", type=Path, default=None)
    parser.add_argument("--worst", action="store_true",
                        help="the worst rank files under the caps instead (see above)")
    parser.add_argument("--write-worst", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write_worst:
        write_worst(Path(args.write_worst[1]), args.write_worst[0])
        return
    if args.worst:
        worst()
        return
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
