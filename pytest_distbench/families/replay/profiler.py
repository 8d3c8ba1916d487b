"""torch.profiler Chrome traces (one JSON file per rank, `prof.export_chrome_trace`), read as
this tool's trace: a second way in for a program that is already profiled. No torch here.

What a file gives, per rank (`distributedInfo`: rank, world size, backend, process groups):

- `record_param_comms` events (NCCL's; the issue asks for these): the collective's name,
  `In msg nelems` / `Out msg nelems`, `dtype`, `Process Group Ranks`, its host time (`ts`,
  issue; `ts + dur`, the issue's return);
- where a file has none (gloo in torch 2.13 records none), the `c10d::*` operator events:
  the op, its tensors' dims, a broadcast's root, host times; and gloo's own `gloo:*` events
  on its worker threads, one per call in issue order, which give a TensorList's dtype and the
  call's completion (the event's end).

`ProfilerStep#N` events (a profile with a schedule) give the steps and their spans; without
them the file is one step. Calls whose op, dtype, group or peer the file does not hold are
listed in the trace's `skipped`, never dropped silently; a file that is not such a trace is
refused in one line naming the file and the field (TraceError), and so is any value the
trace format would refuse on reading it back (a time past 10^12 s, a tensor past 1 PiB).
Reading takes time n log n in the events at most: every lookup (an operator's gloo event,
a call's step, where it was waited) is a pass over sorted events, never a scan per call.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...units import MAX_WORLD_SIZE
from . import trace as fmt
from .fields import (
    MAX_BUFFER_BYTES,
    MAX_DIMS,
    MAX_GROUP_MEMBERS,
    MAX_GROUPS,
    MAX_INDEX,
    Fields,
    TraceError,
    index,
    read_json,
)
from .timeline import with_waits
from .trace import Buffer, Call, Trace

SOURCE = "torch.profiler Chrome trace"
PARAM_COMMS = "record_param_comms"
MAX_EVENTS = 5_000_000  # a file with more is not one profiled step of a program
# A time or a duration in microseconds (Chrome traces' unit) of at most this size: 3,000 years,
# so every time the trace is given (from the file's first event) stays below the 10^12 s the
# trace format reads.
MAX_MICROSECONDS = 10**17

# dtype names as the profiler writes them: record_param_comms' (c10 ScalarType names) and the
# operator events' "Input type" (C++ type names).
DTYPES = {
    "float": "float32", "double": "float64", "half": "float16", "c10::half": "float16",
    "bfloat16": "bfloat16", "c10::bfloat16": "bfloat16", "long": "int64",
    "long int": "int64", "int": "int32", "short": "int16", "short int": "int16",
    "char": "int8", "signed char": "int8", "byte": "uint8", "unsigned char": "uint8",
    "bool": "bool", "complexfloat": "complex64", "c10::complex<float>": "complex64",
    "complexdouble": "complex128", "c10::complex<double>": "complex128",
}
# record_param_comms' collective names -> (op, the buffers its nelems describe).
COLLECTIVES = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce", "allreduce_coalesced": "all_reduce",
    "allgather": "all_gather_into_tensor", "all_gather": "all_gather_into_tensor",
    "_allgather_base": "all_gather_into_tensor",
    "allgather_into_tensor_coalesced": "all_gather_into_tensor",
    "all_gather_into_tensor": "all_gather_into_tensor",
    "reduce_scatter": "reduce_scatter_tensor", "_reduce_scatter_base": "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor",
    "reduce_scatter_tensor": "reduce_scatter_tensor",
    "broadcast": "broadcast", "reduce": "reduce", "barrier": "barrier",
    "all_to_all": "all_to_all_single", "alltoall": "all_to_all_single",
    "alltoall_base": "all_to_all_single", "all_to_allv": "all_to_all_single",
}
NOT_CALLS = ("wait", "init", "coalesced", "startCoalescing", "endCoalescing")
_STEP = re.compile(r"^ProfilerStep#([0-9]+)$")


def load(files: Sequence[str | Path], name: str | None = None) -> Trace:
    """One trace from the per-rank profiler files (TraceError naming the file and field)."""
    if not files:
        raise TraceError("--from-profiler: no profiler files given")
    ranks: dict[int, _Rank] = {}
    world = None
    for path in (Path(f) for f in files):
        rank = _Rank(path)
        if world is not None and rank.world != world:
            raise TraceError(f"{path}: field 'distributedInfo.world_size': {rank.world}, but "
                             f"{ranks[min(ranks)].path} says {world}")
        world = rank.world
        if rank.rank in ranks:
            raise TraceError(f"{path}: field 'distributedInfo.rank': rank {rank.rank} again "
                             f"(also {ranks[rank.rank].path})")
        ranks[rank.rank] = rank
    assert world is not None
    missing = [r for r in range(world) if r not in ranks]
    if missing:
        raise TraceError(f"--from-profiler: no file for rank {missing[0]} of the {world}-rank "
                         f"world (give one file per rank)")
    groups: dict[tuple[int, ...], int] = {tuple(range(world)): 0}
    calls, spans, skipped = {}, {}, []
    for r, rank in sorted(ranks.items()):
        mine = rank.calls(groups, skipped)
        calls[r] = with_waits(mine)
        spans[r] = rank.spans
    first = ranks[0]
    trace = Trace(name=name or first.path.resolve().parent.name, world_size=world,
                  groups={g: ranks_ for ranks_, g in groups.items()}, calls=calls,
                  backend=first.backend, device="cuda" if first.backend == "nccl" else "cpu",
                  steps=sorted({c.step for cs in calls.values() for c in cs}),
                  source=SOURCE, skipped=skipped,
                  spans={r: s for r, s in spans.items() if s})
    fmt.check_matching(trace, "--from-profiler")
    return trace


class _Rank:
    """One rank's profiler file: its world, events and what they say."""

    def __init__(self, path: Path) -> None:
        self.path = path
        data = read_json(path, path.resolve().parent)
        where = str(path)
        if not isinstance(data, dict):
            raise TraceError(f"{where}: expected a JSON object (a Chrome trace)")
        info = data.get("distributedInfo")
        if not isinstance(info, dict):
            raise TraceError(f"{where}: field 'distributedInfo' is missing (a profile of a "
                             "process that initialized torch.distributed has it)")
        fields = Fields(info, where, "distributedInfo.")
        self.world = fields.integer("world_size", 1, MAX_WORLD_SIZE,
                                    f"a world size of 1..{MAX_WORLD_SIZE}")
        self.rank = fields.integer("rank", 0, self.world - 1,
                                   f"a rank of the {self.world}-rank world")
        self.backend = info.get("backend") if isinstance(info.get("backend"), str) else None
        configs = info.get("pg_config")
        self.pg_ranks = {tuple(sorted(c["ranks"])) for c in configs
                         if isinstance(c, dict) and isinstance(c.get("ranks"), list)
                         and all(index(x, self.world - 1) for x in c["ranks"])} \
            if isinstance(configs, list) else set()
        events = data.get("traceEvents")
        if not isinstance(events, list):
            raise TraceError(f"{where}: field 'traceEvents': expected a list of events")
        if len(events) > MAX_EVENTS:
            raise TraceError(f"{where}: field 'traceEvents': {len(events)} events, more than "
                             f"{MAX_EVENTS} (profile a few steps)")
        self.where = where
        timed = [(i, e) for i, e in enumerate(events) if isinstance(e, dict)
                 and e.get("ph") == "X" and isinstance(e.get("name"), str)]
        self.origin = min((_time(e, self._at(i)) for i, e in timed), default=0.0)
        # Only the events read below are kept: the file's others (every operator and kernel)
        # go with its parse.
        self.events = [(i, e) for i, e in timed if e["name"] == PARAM_COMMS
                       or e["name"].startswith(("c10d::", "gloo:", "ProfilerStep#"))]
        del data, events, timed
        self.spans: dict[int, tuple[float, float]] = {}
        for i, e in self.events:
            m = _STEP.match(e["name"])
            if m:
                if len(m.group(1)) > 10 or int(m.group(1)) > MAX_INDEX:
                    raise TraceError(f"{self._at(i)}: field 'name': a step number past "
                                     f"{MAX_INDEX}")
                start = self._seconds(e, i)
                self.spans[int(m.group(1))] = (start, start + _duration(e, self._at(i)))

    def _at(self, i: int) -> str:
        return f"{self.where}: traceEvents[{i}]"

    def _seconds(self, e: dict[str, Any], i: int) -> float:
        return round(_time(e, self._at(i)) - self.origin, 9)

    def _steps(self, issued: Iterable[float]) -> list[int | None]:
        """The step of each moment of `issued` (ascending): the step whose span holds it, the
        one begun first where several do; None where none does. One pass over the spans in
        the order they began, each let in once its start is passed and let go once its end
        is (the moments only grow)."""
        if not self.spans:
            return [0 for _ in issued]
        spans = sorted((a, b, s) for s, (a, b) in self.spans.items())
        found: list[int | None] = []
        holding: deque[tuple[float, float, int]] = deque()
        k = 0
        for t in issued:
            while k < len(spans) and spans[k][0] <= t:
                holding.append(spans[k])
                k += 1
            while holding and holding[0][1] < t:
                holding.popleft()
            found.append(holding[0][2] if holding else None)
        return found

    def calls(self, groups: dict[tuple[int, ...], int], skipped: list[str]) -> list[Call]:
        comms = [(i, e) for i, e in self.events if e["name"] == PARAM_COMMS]
        if comms:
            found = [self._param_comms(i, e, groups, skipped) for i, e in comms]
        else:
            ops = sorted(((i, e) for i, e in self.events if e["name"].startswith("c10d::")),
                         key=lambda p: _ts(p[1]))
            works = _Works(e for _, e in self.events if e["name"].startswith("gloo:"))
            found = [self._operator(i, e, works.take(e), groups, skipped) for i, e in ops]
        calls = sorted((c for c in found if c is not None), key=lambda c: c.issued_s or 0.0)
        kept = []
        for c, step in zip(calls, self._steps(c.issued_s or 0.0 for c in calls), strict=True):
            if step is None:
                skipped.append(f"rank {self.rank}: {c.op} at {c.issued_s:.6f} s, outside every "
                               "ProfilerStep")
                continue
            kept.append(replace(c, step=step))
        return kept

    def _group(self, ranks: Any, at: str, groups: dict[tuple[int, ...], int]
               ) -> tuple[int, tuple[int, ...]]:
        """The group's id in `groups` (a new one added) and its global ranks, ascending."""
        members = fmt.group_ranks(ranks, self.world, f"{at}: field 'args.Process Group Ranks'")
        if self.rank not in members:
            raise TraceError(f"{at}: field 'args.Process Group Ranks': rank {self.rank} is not "
                             "among them")
        key = tuple(sorted(members))
        if key not in groups:
            if len(groups) >= MAX_GROUPS:
                raise TraceError(f"{at}: field 'args.Process Group Ranks': a group past the "
                                 f"{MAX_GROUPS} a trace may have")
            if sum(map(len, groups)) + len(key) > MAX_GROUP_MEMBERS:  # at most 4096 times
                raise TraceError(f"{at}: field 'args.Process Group Ranks': more than "
                                 f"{MAX_GROUP_MEMBERS} ranks in all the trace's groups")
            groups[key] = len(groups)
        return groups[key], key

    def _param_comms(self, i: int, e: dict[str, Any], groups: dict[tuple[int, ...], int],
                     skipped: list[str]) -> Call | None:
        at, args = self._at(i), e.get("args")
        if not isinstance(args, dict):
            raise TraceError(f"{at}: field 'args': expected an object")
        name = args.get("Collective name")
        if not isinstance(name, str):
            raise TraceError(f"{at}: field 'args.Collective name': expected a string")
        if name in NOT_CALLS:
            return None
        op = COLLECTIVES.get(name)
        if op is None:
            skipped.append(f"rank {self.rank} traceEvents[{i}]: {name[:40]}")
            return None
        issued = self._seconds(e, i)
        returned = round(issued + _duration(e, at), 9)
        ranks = args.get("Process Group Ranks")
        if isinstance(ranks, str):
            try:
                ranks = json.loads(ranks)
            except (ValueError, RecursionError):  # RecursionError: nested past Python's stack
                ranks = None
        group, members = self._group(ranks, at, groups)
        if op == "barrier":
            return Call(op, group, issued_s=issued, returned_s=returned)
        dtype = _dtype(args.get("dtype"))
        if dtype is None:
            raise TraceError(f"{at}: field 'args.dtype': expected one of "
                             + ", ".join(sorted(DTYPES)))
        fields = Fields(args, at, "args.")
        sizes = [fields.integer(k, what="a number of elements")
                 for k in ("In msg nelems", "Out msg nelems")]
        splits = [_splits(args.get(k)) for k in ("In split size", "Out split size")]
        if op == "all_to_all_single" and any(s is None or len(set(s)) > 1 for s in splits):
            how = "unreadable" if None in splits else "uneven"
            skipped.append(f"rank {self.rank} traceEvents[{i}]: {name} with {how} splits")
            return None
        ins, outs = (Buffer(dtype, (sizes[0],)),), (Buffer(dtype, (sizes[1],)),)
        root = members[0] if op in fmt.ROOTED else None  # the root is not recorded
        return Call(op, group, ins, outs, reduce_op="sum" if op in fmt.REDUCING else None,
                    root=root, issued_s=issued, returned_s=returned)

    def _operator(self, i: int, e: dict[str, Any], work: dict[str, Any] | None,
                  groups: dict[tuple[int, ...], int], skipped: list[str]) -> Call | None:
        at, args = self._at(i), e.get("args")
        op = e["name"].removeprefix("c10d::")
        if not isinstance(args, dict):
            raise TraceError(f"{at}: field 'args': expected an object (record_shapes=True)")
        if len(self.pg_ranks) != 1:
            skipped.append(f"rank {self.rank} traceEvents[{i}]: c10d.{op}: its process group is "
                           "not in the file (its groups differ in ranks)")
            return None
        group, members = self._group(list(next(iter(self.pg_ranks))), at, groups)
        issued = self._seconds(e, i)
        times = {"issued_s": issued, "returned_s": round(issued + _duration(e, at), 9),
                 "completed_s": None}
        if work is not None:
            end = _time(work, at) + _duration(work, at) - self.origin
            times["completed_s"] = round(max(end, issued), 9)
        dims, types = args.get("Input Dims"), args.get("Input type")
        if not (isinstance(dims, list) and isinstance(types, list) and dims and types):
            raise TraceError(f"{at}: field 'args.Input Dims': expected the tensors' dims "
                             "(profile with record_shapes=True)")
        if op == "barrier":
            return Call("barrier", group, **times)
        if op in ("allreduce_", "broadcast_"):
            work_type = work["args"].get("Input type") if work else None
            dtype = _dtype(work_type[0]) if isinstance(work_type, list) and work_type else None
            shapes = dims[0]
            if dtype is None or not _shapes(shapes):
                skipped.append(f"rank {self.rank} traceEvents[{i}]: c10d.{op}: dtype not in the "
                               "file (no gloo event paired with it)")
                return None
            buffers = tuple(_buffer(dtype, s, at) for s in shapes)
            if op == "allreduce_":
                return Call("all_reduce", group, buffers, buffers, reduce_op="sum", **times)
            root = _concrete(args, 2)
            if root is None or root >= len(members):
                raise TraceError(f"{at}: field 'args.Concrete Inputs[2]': expected the root's "
                                 "rank in its group")
            return Call("broadcast", group, buffers, root=members[root], **times)
        pairs = {"_allgather_base_": "all_gather_into_tensor",
                 "_reduce_scatter_base_": "reduce_scatter_tensor"}
        if op in pairs and len(dims) >= 2 and _shapes(dims[:2]):
            dtype = _dtype(types[0])
            if dtype is None:
                raise TraceError(f"{at}: field 'args.Input type[0]': expected one of "
                                 + ", ".join(sorted(DTYPES)))
            out, inp = _buffer(dtype, dims[0], at), _buffer(dtype, dims[1], at)
            return Call(pairs[op], group, (inp,), (out,),
                        reduce_op="sum" if pairs[op] in fmt.REDUCING else None, **times)
        skipped.append(f"rank {self.rank} traceEvents[{i}]: c10d.{op} (not read from profiler "
                       "traces)")
        return None


class _Works:
    """A rank's gloo events by their first input's shape, each shape's in the order they
    started. An operator event takes the first of its input's shape that started after it
    (gloo runs its works in issue order, on its own threads; a reduce-scatter runs as its
    input's all-reduce). Operator events come in the order they started, so a work that
    started before one is taken by no later one and is let go: each work is looked at once."""

    def __init__(self, works: Iterable[dict[str, Any]]) -> None:
        self.by_shape: dict[tuple[Any, ...], deque[dict[str, Any]]] = {}
        for work in sorted(works, key=_ts):
            wargs = work.get("args")
            wdims = wargs.get("Input Dims") if isinstance(wargs, dict) else None
            key = _shape_key(wdims[0]) if isinstance(wdims, list) and wdims else None
            if key is not None:
                self.by_shape.setdefault(key, deque()).append(work)

    def take(self, op: dict[str, Any]) -> dict[str, Any] | None:
        """The gloo event of the operator event `op`, taken out (None: none)."""
        args = op.get("args") if isinstance(op.get("args"), dict) else {}
        dims = args.get("Input Dims")
        name = op["name"]
        if not isinstance(dims, list) or not dims:
            return None
        first = dims[1] if name in ("c10d::_allgather_base_", "c10d::_reduce_scatter_base_") \
            and len(dims) > 1 else dims[0]
        if name in ("c10d::allreduce_", "c10d::broadcast_") and isinstance(first, list) \
                and first:
            first = first[0]
        key = _shape_key(first)
        queue = self.by_shape.get(key) if key is not None else None
        while queue and _ts(queue[0]) < _ts(op):
            queue.popleft()
        return queue.popleft() if queue else None


def _shape_key(dims: Any) -> tuple[Any, ...] | None:
    """A shape as a dict key (None: not a list of sizes, paired with nothing)."""
    if isinstance(dims, list) and all(isinstance(d, int) for d in dims):
        return tuple(dims)
    return None


def _ts(e: dict[str, Any]) -> float:
    value = e.get("ts")
    return float(value) if isinstance(value, (int, float)) else 0.0


def _microseconds(value: Any) -> bool:
    # Compared, never converted: a 400-digit integer has no float; NaN compares false.
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and abs(value) <= MAX_MICROSECONDS)


def _time(e: dict[str, Any], at: str) -> float:
    """The event's start in seconds (Chrome traces count microseconds)."""
    value = e.get("ts")
    if not _microseconds(value):
        raise TraceError(f"{at}: field 'ts': expected microseconds, at most 10^17 in size")
    return value / 1e6


def _duration(e: dict[str, Any], at: str) -> float:
    value = e.get("dur", 0)
    if not (_microseconds(value) and value >= 0):
        raise TraceError(f"{at}: field 'dur': expected microseconds, 0 to 10^17")
    return value / 1e6


def _dtype(name: Any) -> str | None:
    """The trace format's dtype of a profiler's dtype name (None: not one)."""
    return DTYPES.get(name.lower()) if isinstance(name, str) else None


def _buffer(dtype: str, shape: list[int], at: str) -> Buffer:
    """A tensor of `shape` (checked by _shapes), refused past the format's 1 PiB."""
    buffer = Buffer(dtype, tuple(shape))
    if buffer.nbytes > MAX_BUFFER_BYTES:
        raise TraceError(f"{at}: field 'args.Input Dims': a tensor of more than 1 PiB")
    return buffer


def _shapes(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(s, list) and len(s) <= MAX_DIMS and all(index(d) for d in s) for s in value)


def _splits(value: Any) -> list[Any] | None:
    """An all_to_all's split sizes as the profiler writes them ("[4, 4]"); [] where it wrote
    none (an even split), None where it wrote something unreadable."""
    if not (isinstance(value, str) and value.startswith("[")):
        return []
    try:
        splits = json.loads(value)
    except ValueError:
        return None
    if not (isinstance(splits, list) and all(isinstance(x, int) for x in splits)):
        return None
    return splits


def _concrete(args: dict[str, Any], k: int) -> int | None:
    """Concrete input `k`: an integer as the profiler writes it ("0"), else None."""
    values = args.get("Concrete Inputs")
    if not (isinstance(values, list) and len(values) > k):
        return None
    value = values[k]
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 10:
        value = int(value)
    return value if index(value) else None
