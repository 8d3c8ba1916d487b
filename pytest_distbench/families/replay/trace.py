"""A captured step's communication: the trace format (docs/replay-trace-format.md), read and
checked. No torch and no pytest here: the CLI, the settings and the capture share it.

A trace is a directory: ``manifest.json`` (the world, its process groups, the rank files) and
one ``rank<R>.json`` per rank, each the ordered calls that rank made. JSON only, never pickle:
a trace is data from elsewhere, read with every field checked, and a bad one is refused in one
line naming the file and the field (TraceError).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Collection, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ...units import MAX_WORLD_SIZE
from . import schedule
from .fields import (
    MAX_GROUP_MEMBERS,
    MAX_GROUPS,
    Fields,
    TraceError,
    index,
    read_json,
    type_name,
)
from .schedule import POINT_TO_POINT

FORMAT = "pytest-distbench-trace"
VERSION = 1
MANIFEST = "manifest.json"

DTYPE_BYTES = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1,
    "complex64": 8, "complex128": 16,
}
REDUCE_OPS = ("sum", "product", "min", "max", "avg", "band", "bor", "bxor", "premul_sum")
# What one call does to the bytes, as nccl-tests counts them: the op's size (what its time is
# divided by for algbw) and its bus-bandwidth factor for n ranks.
OPS: dict[str, tuple[str, str]] = {
    # op: (which buffers give the size, bus-bandwidth factor)
    "all_reduce": ("inputs", "2(n-1)/n"),
    "all_gather": ("outputs", "(n-1)/n"),
    "all_gather_into_tensor": ("outputs", "(n-1)/n"),
    "reduce_scatter": ("inputs", "(n-1)/n"),
    "reduce_scatter_tensor": ("inputs", "(n-1)/n"),
    "all_to_all": ("inputs", "(n-1)/n"),
    "all_to_all_single": ("inputs", "(n-1)/n"),
    "broadcast": ("inputs", "1"),
    "reduce": ("inputs", "1"),
    "barrier": ("inputs", "1"),
    "send": ("inputs", "1"),
    "recv": ("outputs", "1"),
}
ROOTED = ("broadcast", "reduce")
REDUCING = ("all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor")


@dataclass(frozen=True)
class Buffer:
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return DTYPE_BYTES[self.dtype] * math.prod(self.shape)


@dataclass(frozen=True)
class Call:
    """One collective or point-to-point call, as the rank issued it.

    `wait_before` is where the program waited for it: before the call of that index (its own
    index + 1 for a call waited at once: a synchronous call), or None: at the trace's end.
    Times are host seconds from the capture's start: issued (the call entered), completed
    (the transport finished it; None where the backend does not say)."""

    op: str
    group: int
    inputs: tuple[Buffer, ...] = ()
    outputs: tuple[Buffer, ...] = ()
    reduce_op: str | None = None
    root: int | None = None  # broadcast/reduce: the root's global rank
    peer: int | None = None  # send/recv: the other side's global rank
    wait_before: int | None = None
    step: int = 0
    issued_s: float | None = None
    completed_s: float | None = None

    @property
    def nbytes(self) -> int:
        """The call's size as nccl-tests counts it (algbw = nbytes / time)."""
        side = OPS[self.op][0]
        return sum(b.nbytes for b in (self.inputs if side == "inputs" else self.outputs))


@dataclass
class Trace:
    name: str
    world_size: int
    groups: dict[int, tuple[int, ...]]  # group id -> its global ranks; 0 is the whole world
    calls: dict[int, list[Call]]  # rank -> its calls in order
    backend: str | None = None
    device: str | None = None
    steps: list[int] = field(default_factory=list)
    source: str = "capture"
    # Calls the format cannot replay, listed rather than dropped: "rank 1 call 7: c10d.foo".
    skipped: list[str] = field(default_factory=list)

    def memory_bytes(self, rank: int) -> int:
        """The buffers a replay allocates in `rank` (every call's own, allocated once)."""
        return sum(b.nbytes for c in self.calls.get(rank, []) for b in (*c.inputs, *c.outputs))

    def step_bytes(self, rank: int) -> int:
        return sum(c.nbytes for c in self.calls.get(rank, []))


def group_size(trace: Trace, call: Call) -> int:
    return len(trace.groups[call.group])


def bus_factor(op: str, n: int) -> float:
    """The op's nccl-tests bus-bandwidth factor (OPS) for a group of `n` ranks."""
    factor = OPS[op][1]
    if factor == "2(n-1)/n":
        return 2 * (n - 1) / n
    if factor == "(n-1)/n":
        return (n - 1) / n
    return 1.0


# -- writing --------------------------------------------------------------------------------

def write(trace: Trace, directory: str | os.PathLike[str]) -> Path:
    """Write `trace` under `directory` (created), each file atomically; an existing trace
    there is refused rather than mixed with this one."""
    out = refuse_existing(directory)
    for rank, calls in sorted(trace.calls.items()):
        write_rank(out, rank, calls)
    write_manifest(out, trace)
    return out


def refuse_existing(directory: str | os.PathLike[str], create: bool = True) -> Path:
    """The directory a new trace goes to (created unless `create` is false): one that holds a
    trace is refused."""
    out = Path(directory)
    if out.exists() and not out.is_dir():
        raise TraceError(f"{out}: not a directory; a trace is a directory of JSON files")
    if create:
        out.mkdir(parents=True, exist_ok=True)
    if (out / MANIFEST).exists():
        raise TraceError(f"{out / MANIFEST}: a trace is already there; give another directory")
    return out


def write_rank(directory: Path, rank: int, calls: list[Call]) -> None:
    _write_json(directory / rank_file(rank), {
        "format": FORMAT + "-rank", "version": VERSION, "rank": rank,
        "calls": [_call_json(c) for c in calls]})


def write_manifest(directory: Path, trace: Trace) -> None:
    """The manifest, last: a directory without one is not (yet) a trace."""
    _write_json(directory / MANIFEST, {
        "format": FORMAT, "version": VERSION, "name": trace.name,
        "world_size": trace.world_size, "backend": trace.backend, "device": trace.device,
        "steps": trace.steps, "source": trace.source, "skipped": trace.skipped,
        "groups": [{"id": g, "ranks": list(r)} for g, r in sorted(trace.groups.items())],
        "ranks": {str(r): rank_file(r) for r in range(trace.world_size)}})


def rank_file(rank: int) -> str:
    return f"rank{rank}.json"


def _call_json(call: Call) -> dict[str, Any]:
    data = asdict(call)
    data["inputs"] = [{"dtype": b.dtype, "shape": list(b.shape)} for b in call.inputs]
    data["outputs"] = [{"dtype": b.dtype, "shape": list(b.shape)} for b in call.outputs]
    return {k: v for k, v in data.items() if v is not None}


def _write_json(path: Path, data: Any) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


# -- reading --------------------------------------------------------------------------------

def is_trace(directory: str | os.PathLike[str]) -> bool:
    return (Path(directory) / MANIFEST).is_file()


def load(directory: str | os.PathLike[str], keep: Collection[int] | None = None,
         check: bool = True) -> Trace:
    """Read and check the trace under `directory` (TraceError naming file and field).

    `keep`: the ranks whose calls the Trace holds (None: all); `check`: read every rank file
    to check that a replay would not hang (schedule.py), holding one rank's calls at a time.
    Without it only the manifest and the kept ranks' files are read."""
    root = Path(directory)
    manifest_path = root / MANIFEST
    where = str(manifest_path)
    m = Fields(read_json(manifest_path, root), where)
    m.string("format", (FORMAT,), repr(FORMAT))
    m.integer("version", VERSION, VERSION, str(VERSION))
    world = m.integer("world_size", 1, MAX_WORLD_SIZE, f"a world size of 1..{MAX_WORLD_SIZE}")
    name = m.string("name", default=None) or root.resolve().name
    groups = _groups(m, world)
    files = m.value("ranks", lambda v: isinstance(v, dict), "an object")
    missing = next((r for r in range(world) if str(r) not in files), None)
    if missing is not None:
        raise m.fail("ranks", f"no file for rank {missing} of a {world}-rank trace")
    trace = Trace(name=name, world_size=world, groups=groups, calls={},
                  backend=m.string("backend", default=None),
                  device=m.string("device", default=None),
                  steps=m.indices("steps", default=[]),
                  source=m.string("source", default=None) or "capture",
                  skipped=m.strings("skipped", default=[]))
    schedules: dict[int, schedule.Schedule] = {}
    for r in range(world):
        wanted = keep is None or r in keep
        if not (wanted or check):
            continue
        # Only the name this format gives: a file name from the manifest is never echoed.
        if files[str(r)] != rank_file(r):
            raise m.fail(f"ranks.{r}", f"expected {rank_file(r)!r}, the rank's file name in "
                         f"the trace directory, got {type_name(files[str(r)])}")
        calls = _rank_calls(root / rank_file(r), root, r, world, groups)
        if wanted:
            calls = list(calls)
            trace.calls[r] = calls
        if check:  # a rank not kept: each call dropped once its schedule entry is made
            schedules[r] = schedule_of(calls)
    if check:
        schedule.check(schedules, groups, where)
    return trace


def check_matching(trace: Trace, where: str) -> None:
    """TraceError where a replay of `trace` (every rank's calls held) would hang."""
    schedule.check({r: schedule_of(calls) for r, calls in trace.calls.items()}, trace.groups,
                   where)


def schedule_of(calls: Iterable[Call]) -> schedule.Schedule:
    """A rank's calls as the hang check plays them out: what each call's counterpart in
    another rank must share (collectives: op, bytes, dtypes, reduce op and root; a send and
    its receive: bytes and dtypes)."""
    s = schedule.Schedule()
    waits = []
    for c in calls:
        dtypes = tuple(sorted({b.dtype for b in (*c.inputs, *c.outputs)}))
        if c.op in POINT_TO_POINT:
            s.add(c.op, c.group, c.peer, (c.nbytes, dtypes))
        else:
            s.add(c.op, c.group, None, (c.op, c.nbytes, dtypes, c.reduce_op, c.root))
        waits.append(c.wait_before)
    s.close(waits)
    return s


def _rank_calls(path: Path, root: Path, rank: int, world: int,
                groups: dict[int, tuple[int, ...]]) -> Iterator[Call]:
    """The rank file's calls, each checked as it is made."""
    where = str(path)
    data = Fields(read_json(path, root), where)
    data.integer("version", VERSION, VERSION, str(VERSION))
    data.integer("rank", rank, rank, f"{rank} (the manifest's)")
    raw = data.value("calls", lambda v: isinstance(v, list), "a list")
    n = len(raw)
    del data  # the parsed file goes as its calls do
    for i in range(n):
        c = _call(Fields(raw[i], f"{where}: calls[{i}]"), rank, world, groups)
        raw[i] = None
        if c.wait_before is not None and not i < c.wait_before <= n:
            raise TraceError(f"{where}: calls[{i}]: field 'wait_before': {c.wait_before} is "
                             f"not after the call (expected {i + 1}..{n} or null)")
        yield c


def _call(item: Fields, rank: int, world: int, groups: dict[int, tuple[int, ...]]) -> Call:
    op = item.string("op", tuple(OPS))
    group = item.value("group", lambda v: index(v) and v in groups,
                       "the id of a group in the manifest")
    if rank not in groups[group]:
        raise item.fail("group", f"rank {rank} is not in group {group}")
    inputs = _buffers(item, "inputs")
    outputs = _buffers(item, "outputs")
    reduce_op = item.string("reduce_op", REDUCE_OPS) if op in REDUCING else None
    root = peer = None
    if op in ROOTED:
        root = item.value("root", lambda v: index(v) and v in groups[group],
                          f"a global rank of group {group}")
    if op in POINT_TO_POINT:
        peer = item.value("peer", lambda v: index(v, world - 1) and v != rank,
                          f"another rank of the {world}-rank world")
    if op != "barrier" and not (inputs if OPS[op][0] == "inputs" else outputs):
        raise item.fail(OPS[op][0], f"{op} needs at least one buffer")
    return Call(op=op, group=group, inputs=inputs, outputs=outputs, reduce_op=reduce_op,
                root=root, peer=peer,
                wait_before=item.integer("wait_before", what="a call index or null",
                                         default=None),
                step=item.integer("step", what="a step index", default=0),
                issued_s=item.seconds("issued_s"), completed_s=item.seconds("completed_s"))


def _buffers(item: Fields, key: str) -> tuple[Buffer, ...]:
    raw = item.value(key, lambda v: isinstance(v, list), "a list of buffers", [])
    found = []
    for i, b in enumerate(raw):
        buffer = Fields(b, item.where, f"{key}[{i}].")
        dtype = buffer.string("dtype", tuple(DTYPE_BYTES))
        found.append(Buffer(dtype, buffer.shape("shape", DTYPE_BYTES[dtype])))
    return tuple(found)


def _groups(m: Fields, world: int) -> dict[int, tuple[int, ...]]:
    raw = m.value("groups", lambda v: isinstance(v, list) and len(v) <= MAX_GROUPS,
                  f"a list of at most {MAX_GROUPS} groups")
    groups: dict[int, tuple[int, ...]] = {}
    members = 0
    for i, g in enumerate(raw):
        at = f"{m.where}: field 'groups[{i}]"
        group = Fields(g, m.where, f"groups[{i}].")
        gid = group.value("id", lambda v: index(v) and v not in groups,
                          "a group id not used before")
        groups[gid] = group_ranks(g.get("ranks"), world, f"{at}.ranks'")
        members += len(groups[gid])
        if members > MAX_GROUP_MEMBERS:
            raise m.fail("groups", f"more than {MAX_GROUP_MEMBERS} ranks in all its groups")
    if groups.get(0) != tuple(range(world)):
        raise m.fail("groups", f"group 0 must be the whole world (ranks 0..{world - 1})")
    return groups


def group_ranks(value: Any, world: int, where: str) -> tuple[int, ...]:
    """A group's global ranks, checked: distinct ranks of the `world`-rank world."""
    if not (isinstance(value, list) and value and len(value) <= world
            and all(index(r, MAX_WORLD_SIZE) for r in value) and len(set(value)) == len(value)):
        raise TraceError(f"{where}: expected distinct global ranks, at most {world}")
    outside = [r for r in value if r >= world]
    if outside:
        raise TraceError(f"{where}: rank {outside[0]} is outside the {world}-rank world")
    return tuple(value)
