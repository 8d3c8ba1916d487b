"""PARAM comms "basic" traces (the input of its commsTraceReplay), read as this tool's traces.

A PARAM trace directory holds one JSON list per rank (``<rank>.json`` or ``rank<rank>.json``),
each element a ``comms`` entry (op name, ``in_msg_size``/``out_msg_size`` in elements,
``dtype``, ``pg_id``/``global_ranks``, ``root``, ``src_rank``/``dst_rank``, ``req``) or a
``wait`` on a ``req``, or a ``compute`` entry. Communication only is replayed: compute entries
and ops this format has no replay for are listed in the trace's `skipped`, never silently
dropped. No torch here.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...units import MAX_WORLD_SIZE
from . import schedule
from . import trace as fmt
from .fields import MAX_BUFFER_BYTES, MAX_GROUPS, Fields, TraceError, index, read_json, type_name
from .trace import Buffer, Call, Trace

_RANK_FILE = re.compile(r"^(?:rank-?)?([0-9]+)\.json$")
_DTYPES = {
    "float": "float32", "float32": "float32", "double": "float64", "float64": "float64",
    "half": "float16", "float16": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16",
    "int": "int32", "int32": "int32", "long": "int64", "int64": "int64", "byte": "uint8",
    "uint8": "uint8", "char": "int8", "int8": "int8", "bool": "bool",
}
# PARAM's names (lower case, as its paramToCommName accepts them) -> this format's op.
_OPS = {
    "all_reduce": "all_reduce", "allreduce": "all_reduce",
    "all_gather": "all_gather_into_tensor", "allgather": "all_gather_into_tensor",
    "all_gather_base": "all_gather_into_tensor", "_allgather_base": "all_gather_into_tensor",
    "reduce_scatter": "reduce_scatter_tensor", "reducescatter": "reduce_scatter_tensor",
    "reduce_scatter_base": "reduce_scatter_tensor",
    "_reduce_scatter_base": "reduce_scatter_tensor",
    "all_to_all": "all_to_all_single", "alltoall": "all_to_all_single",
    "all_to_allv": "all_to_all_single", "alltoallv": "all_to_all_single",
    "broadcast": "broadcast", "reduce": "reduce", "barrier": "barrier",
    "send": "send", "isend": "send", "recv": "recv", "irecv": "recv",
}


def rank_files(directory: Path) -> dict[int, Path]:
    """The per-rank files of a PARAM trace directory, by rank (a rank beyond any world's is
    refused before anything is read or counted)."""
    found: dict[int, Path] = {}
    for path in directory.iterdir():
        m = _RANK_FILE.match(path.name)
        if m is None or path.is_dir():
            continue
        if len(m.group(1)) > len(str(MAX_WORLD_SIZE)) or int(m.group(1)) >= MAX_WORLD_SIZE:
            raise TraceError(f"{directory}: a PARAM trace file for a rank above "
                             f"{MAX_WORLD_SIZE - 1}, the most a world may have")
        rank = int(m.group(1))
        if rank in found:
            raise TraceError(f"{path}: a second file for rank {rank} (and {found[rank]})")
        found[rank] = path
    return found


def looks_like_param(directory: Path) -> bool:
    return directory.is_dir() and not (directory / fmt.MANIFEST).exists() and bool(
        rank_files(directory))


def load(directory: str | Path, keep: Collection[int] | None = None) -> Trace:
    """Read a PARAM basic trace directory (TraceError naming file and field), holding the
    calls of the ranks in `keep` (None: all). Every rank file is read: the groups are named
    by the order they first appear in, over every rank's entries, and every replaying rank
    must make them in the same order."""
    root = Path(directory)
    files = rank_files(root)
    world = max(files) + 1 if files else 0
    missing = next((r for r in range(world) if r not in files), None)
    if not files or missing is not None:
        raise TraceError(f"{root}: no PARAM trace file for rank {missing or 0} "
                         f"(expected <rank>.json for ranks 0..{max(world, 1) - 1})")
    groups: dict[tuple[int, ...], int] = {tuple(range(world)): 0}
    calls: dict[int, list[Call]] = {}
    schedules: dict[int, schedule.Schedule] = {}
    skipped: list[str] = []
    for rank in range(world):
        entries = read_json(files[rank], root)
        if not isinstance(entries, list):
            raise TraceError(f"{files[rank]}: expected a JSON list of comms entries, got "
                             f"{type_name(entries)}")
        mine = _rank(entries, str(files[rank]), rank, world, groups, skipped)
        del entries
        schedules[rank] = fmt.schedule_of(mine)
        if keep is None or rank in keep:
            calls[rank] = mine
    trace = Trace(name=root.resolve().name, world_size=world,
                  groups={g: ranks for ranks, g in groups.items()}, calls=calls,
                  source="PARAM basic trace", skipped=skipped, steps=[0])
    schedule.check(schedules, trace.groups, str(root))
    return trace


def _rank(entries: list[Any], where: str, rank: int, world: int,
          groups: dict[tuple[int, ...], int], skipped: list[str]) -> list[Call]:
    calls: list[Call] = []
    requests: dict[int | str, int] = {}  # req -> index of its call, until waited
    waits: dict[int, int] = {}  # call index -> index of the call it is waited before
    members_of = {g: ranks for ranks, g in groups.items()}
    for i, raw in enumerate(entries):
        entry = Fields(raw, f"{where}: [{i}]")
        if "compute" in entry.data:
            what = entry.data["compute"]
            skipped.append(f"rank {rank} [{i}]: compute "
                           + (repr(what[:40]) if isinstance(what, str) else "entry")
                           + " (communication only is replayed)")
            continue
        name = entry.string("comms", what="an op name").lower()
        req = entry.value("req", lambda v: isinstance(v, str) and len(v) <= 64 or index(v),
                          "a request id (an integer or a short string) or null", None)
        if name == "wait":
            if req in requests:
                waits[requests.pop(req)] = len(calls)
            continue
        if name == "init":
            continue
        op = _OPS.get(name)
        uneven = op is not None and name in ("all_to_allv", "alltoallv") and _uneven(entry)
        if op is None or uneven:
            skipped.append(f"rank {rank} [{i}]: "
                           + (f"{name} with uneven splits" if op else name[:40]))
            continue
        group = _group(entry, rank, world, groups)
        members_of.setdefault(group, next(r for r, g in groups.items() if g == group))
        call = _call(entry, op, group, members_of[group], rank, world)
        if req is not None:
            requests[req] = len(calls)
        calls.append(call)
    # A call with a wait entry is waited where that entry stood; one without as
    # schedule.implied_waits says.
    implied = schedule.implied_waits([c.op for c in calls], [len(calls)] * len(calls))
    done = []
    for i, call in enumerate(calls):
        if i in waits:
            wait = max(waits[i], i + 1)
            wait = wait if wait < len(calls) else None
        else:
            wait = implied[i]
        done.append(replace(call, wait_before=wait))
    return done


def _uneven(entry: Fields) -> bool:
    splits = [entry.indices(key, MAX_BUFFER_BYTES, default=[])
              for key in ("in_split", "out_split")]
    return any(len(set(s)) > 1 for s in splits)


def _group(entry: Fields, rank: int, world: int, groups: dict[tuple[int, ...], int]) -> int:
    ranks = entry.data.get("global_ranks")
    if ranks is None or ranks == []:
        return 0
    ranks = fmt.group_ranks(ranks, world, f"{entry.where}: field 'global_ranks'")
    if rank not in ranks:
        raise entry.fail("global_ranks", f"rank {rank} is not among them")
    key = tuple(sorted(ranks))
    if key not in groups and len(groups) >= MAX_GROUPS:
        raise entry.fail("global_ranks", f"a group past the {MAX_GROUPS} a trace may have")
    return groups.setdefault(key, len(groups))


def _call(entry: Fields, op: str, group: int, members: tuple[int, ...], rank: int,
          world: int) -> Call:
    if op == "barrier":
        return Call(op=op, group=group)
    dtype_name = entry.string("dtype", what="one of " + ", ".join(sorted(_DTYPES)))
    dtype = _DTYPES.get(dtype_name.lower())
    if dtype is None:
        raise entry.fail("dtype", "expected one of " + ", ".join(sorted(_DTYPES)))
    most = MAX_BUFFER_BYTES // fmt.DTYPE_BYTES[dtype]
    sizes = [entry.integer(key, high=most, what=f"a number of elements (at most {most})")
             for key in ("in_msg_size", "out_msg_size")]
    inputs, outputs = (Buffer(dtype, (sizes[0],)),), (Buffer(dtype, (sizes[1],)),)
    root = peer = None
    if op in fmt.ROOTED:
        root = entry.value("root", lambda v: index(v) and v in members,
                           "a rank of its group", members[0])
    if op in fmt.POINT_TO_POINT:
        key = "dst_rank" if op == "send" else "src_rank"
        peer = entry.value(key, lambda v: index(v, world - 1) and v != rank,
                           f"another rank of the {world}-rank world")
    reduce_op = "sum" if op in fmt.REDUCING else None
    if op == "send":
        return Call(op=op, group=group, inputs=inputs, peer=peer)
    if op == "recv":
        return Call(op=op, group=group, outputs=outputs, peer=peer)
    return Call(op=op, group=group, inputs=inputs, outputs=outputs, reduce_op=reduce_op,
                root=root)
