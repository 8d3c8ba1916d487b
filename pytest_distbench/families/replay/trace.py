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
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FORMAT = "pytest-distbench-trace"
# 2 adds each call's `returned_s` and each rank's step spans (`steps`): what the work between
# the calls is rebuilt from (gaps.py). Version 1 traces still read, their gaps rebuilt from
# their issue and completion times alone.
VERSION = 2
VERSIONS = (1, 2)
MANIFEST = "manifest.json"
MAX_FILE_BYTES = 256 << 20  # a rank file larger than this is not a step's calls

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
POINT_TO_POINT = ("send", "recv")
REDUCING = ("all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor")


class TraceError(ValueError):
    """A trace that cannot be replayed: the message names the file and the field."""


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
    Times are host seconds from the capture's start: issued (the call entered), returned (its
    issue returned to the program), completed (the transport finished it; None where the
    backend does not say)."""

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
    returned_s: float | None = None

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
    # rank -> step -> (start_s, end_s) on that rank's clock: when each captured step began
    # (the previous one ended) and ended (its optimizer.step()); empty where not recorded.
    spans: dict[int, dict[int, tuple[float, float]]] = field(default_factory=dict)

    def memory_bytes(self, rank: int) -> int:
        """The buffers a replay allocates in `rank` (every call's own, allocated once)."""
        return sum(b.nbytes for c in self.calls.get(rank, []) for b in (*c.inputs, *c.outputs))

    def step_bytes(self, rank: int) -> int:
        return sum(c.nbytes for c in self.calls.get(rank, []))


def implied_wait(ops: Sequence[str], i: int, end: int) -> int | None:
    """Where call `i` is waited when the program's own wait is not known, as an index below
    `end` (None: at `end`): at once, but a point-to-point call together with its neighbours,
    before the next collective, so that an exchange in which both ranks send first cannot
    deadlock in a replay. The capture and the PARAM reader record it; the replay (step.py)
    holds every point-to-point call's wait at least that late, whatever a trace says."""
    if ops[i] in POINT_TO_POINT:
        return next((j for j in range(i + 1, end) if ops[j] not in POINT_TO_POINT), None)
    return i + 1 if i + 1 < end else None


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
        write_rank(out, rank, calls, trace.spans.get(rank))
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


def write_rank(directory: Path, rank: int, calls: list[Call],
               spans: dict[int, tuple[float, float]] | None = None) -> None:
    data: dict[str, Any] = {"format": FORMAT + "-rank", "version": VERSION, "rank": rank,
                            "calls": [_call_json(c) for c in calls]}
    if spans:
        data["steps"] = [{"step": s, "start_s": a, "end_s": b}
                         for s, (a, b) in sorted(spans.items())]
    _write_json(directory / rank_file(rank), data)


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


def load(directory: str | os.PathLike[str]) -> Trace:
    """Read and check the trace under `directory` (TraceError naming file and field)."""
    root = Path(directory)
    manifest_path = root / MANIFEST
    manifest = _read_json(manifest_path)
    where = str(manifest_path)
    _expect(manifest, "format", where, lambda v: v == FORMAT, f"{FORMAT!r}")
    _expect(manifest, "version", where, lambda v: v in VERSIONS, _versions())
    world = _expect(manifest, "world_size", where, _positive_int, "a positive integer")
    name = manifest.get("name") or root.resolve().name
    if not isinstance(name, str):
        raise TraceError(f"{where}: field 'name': expected a string")
    groups = _groups(manifest, world, where)
    files = _expect(manifest, "ranks", where, lambda v: isinstance(v, dict), "an object")
    missing = [r for r in range(world) if str(r) not in files]
    if missing:
        raise TraceError(f"{where}: field 'ranks': no file for rank {missing[0]} of a "
                         f"{world}-rank trace")
    calls: dict[int, list[Call]] = {}
    spans: dict[int, dict[int, tuple[float, float]]] = {}
    for r in range(world):
        relative = files[str(r)]
        if not isinstance(relative, str) or Path(relative).name != relative:
            raise TraceError(f"{where}: field 'ranks.{r}': expected a file name in the trace "
                             f"directory, got {relative!r}")
        calls[r], spans[r] = _rank_calls(root / relative, r, world, groups)
    skipped = manifest.get("skipped", [])
    if not (isinstance(skipped, list) and all(isinstance(s, str) for s in skipped)):
        raise TraceError(f"{where}: field 'skipped': expected a list of strings")
    steps = manifest.get("steps", [])
    if not (isinstance(steps, list) and all(_index(s) for s in steps)):
        raise TraceError(f"{where}: field 'steps': expected a list of step indices")
    trace = Trace(name=name, world_size=world, groups=groups, calls=calls,
                  backend=_optional_str(manifest, "backend", where),
                  device=_optional_str(manifest, "device", where), steps=steps,
                  source=_optional_str(manifest, "source", where) or "capture",
                  skipped=skipped, spans={r: s for r, s in spans.items() if s})
    check_matching(trace, where)
    return trace


def check_matching(trace: Trace, where: str) -> None:
    """Every group's members issue the same collectives in the same order, and every send has
    its receive: else the replay would hang, so the trace is refused (TraceError)."""
    for g, members in trace.groups.items():
        sequences = {r: [(c.op, c.nbytes if c.op != "barrier" else 0)
                         for c in trace.calls[r] if c.group == g and c.op not in POINT_TO_POINT]
                     for r in members}
        first = sequences[members[0]]
        for r in members[1:]:
            if sequences[r] != first:
                pairs = enumerate(zip(first, sequences[r], strict=False))
                at = next((i for i, (a, b) in pairs if a != b),
                          min(len(first), len(sequences[r])))
                raise TraceError(
                    f"{where}: group {g} {list(members)}: rank {members[0]} and rank {r} "
                    f"differ at their collective {at} in that group (a replay would hang)")
    for r, calls in trace.calls.items():
        for kind, other in (("send", "recv"), ("recv", "send")):
            for peer in {c.peer for c in calls if c.op == kind}:
                mine = [c.nbytes for c in calls if c.op == kind and c.peer == peer]
                theirs = [c.nbytes for c in trace.calls[peer] if c.op == other and c.peer == r]
                if mine != theirs:
                    raise TraceError(
                        f"{where}: rank {r}'s {kind}s to/from rank {peer} ({len(mine)}) do not "
                        f"match rank {peer}'s {other}s ({len(theirs)}) in count and size")


def _rank_calls(path: Path, rank: int, world: int, groups: dict[int, tuple[int, ...]]
                ) -> tuple[list[Call], dict[int, tuple[float, float]]]:
    data = _read_json(path)
    where = str(path)
    _expect(data, "version", where, lambda v: v in VERSIONS, _versions())
    _expect(data, "rank", where, lambda v: v == rank, f"{rank} (the manifest's)")
    raw = _expect(data, "calls", where, lambda v: isinstance(v, list), "a list")
    calls = [_call(item, f"{where}: calls[{i}]", rank, world, groups)
             for i, item in enumerate(raw)]
    for i, c in enumerate(calls):
        if c.wait_before is not None and not i < c.wait_before <= len(calls):
            raise TraceError(f"{where}: calls[{i}]: field 'wait_before': {c.wait_before} is "
                             f"not after the call (expected {i + 1}..{len(calls)} or null)")
    return calls, _spans(data.get("steps", []), where)


def _spans(raw: Any, where: str) -> dict[int, tuple[float, float]]:
    """A rank file's `steps`: each captured step's start and end on the rank's clock."""
    if not isinstance(raw, list):
        raise TraceError(f"{where}: field 'steps': expected a list of step spans")
    spans: dict[int, tuple[float, float]] = {}
    for i, item in enumerate(raw):
        at = f"{where}: field 'steps[{i}]"
        if not (isinstance(item, dict) and _index(item.get("step"))
                and item["step"] not in spans):
            raise TraceError(f"{at}.step': expected a step index not given before")
        start, end = (_seconds(item.get(k), f"{at}.{k}'") for k in ("start_s", "end_s"))
        if start is None or end is None or end < start:
            raise TraceError(f"{at}': expected start_s and end_s in seconds, end not before "
                             "start")
        spans[item["step"]] = (start, end)
    return spans


def _call(item: Any, where: str, rank: int, world: int, groups: dict[int, tuple[int, ...]]
          ) -> Call:
    if not isinstance(item, dict):
        raise TraceError(f"{where}: expected an object")
    op = _expect(item, "op", where, lambda v: v in OPS, "one of " + ", ".join(OPS))
    group = _expect(item, "group", where, lambda v: v in groups if isinstance(v, int) else False,
                    "the id of a group in the manifest")
    if rank not in groups[group]:
        raise TraceError(f"{where}: field 'group': rank {rank} is not in group {group}")
    inputs = _buffers(item, "inputs", where)
    outputs = _buffers(item, "outputs", where)
    reduce_op = item.get("reduce_op")
    if op in REDUCING and reduce_op not in REDUCE_OPS:
        raise TraceError(f"{where}: field 'reduce_op': expected one of {', '.join(REDUCE_OPS)}")
    root = peer = None
    if op in ROOTED:
        root = _expect(item, "root", where, lambda v: v in groups[group] if _index(v) else False,
                       f"a global rank of group {group}")
    if op in POINT_TO_POINT:
        peer = _expect(item, "peer", where,
                       lambda v: _index(v) and v < world and v != rank,
                       f"another rank of the {world}-rank world")
    if op != "barrier" and not (inputs if OPS[op][0] == "inputs" else outputs):
        raise TraceError(f"{where}: field '{OPS[op][0]}': {op} needs at least one buffer")
    wait_before = item.get("wait_before")
    if wait_before is not None and not _index(wait_before):
        raise TraceError(f"{where}: field 'wait_before': expected a call index or null")
    step = item.get("step", 0)
    if not _index(step):
        raise TraceError(f"{where}: field 'step': expected a step index")
    times = {key: _seconds(item.get(key), f"{where}: field '{key}'")
             for key in ("issued_s", "completed_s", "returned_s")}
    return Call(op=op, group=group, inputs=inputs, outputs=outputs,
                reduce_op=reduce_op if op in REDUCING else None, root=root, peer=peer,
                wait_before=wait_before, step=step, **times)


def _buffers(item: dict[str, Any], key: str, where: str) -> tuple[Buffer, ...]:
    raw = item.get(key, [])
    if not isinstance(raw, list):
        raise TraceError(f"{where}: field '{key}': expected a list of buffers")
    found = []
    for i, b in enumerate(raw):
        if not (isinstance(b, dict) and b.get("dtype") in DTYPE_BYTES):
            raise TraceError(f"{where}: field '{key}[{i}].dtype': expected one of "
                             + ", ".join(DTYPE_BYTES))
        shape = b.get("shape")
        if not (isinstance(shape, list) and len(shape) <= 16 and all(_index(d) for d in shape)):
            raise TraceError(f"{where}: field '{key}[{i}].shape': expected a list of sizes")
        found.append(Buffer(b["dtype"], tuple(shape)))
    return tuple(found)


def _groups(manifest: dict[str, Any], world: int, where: str) -> dict[int, tuple[int, ...]]:
    raw = _expect(manifest, "groups", where, lambda v: isinstance(v, list), "a list")
    groups: dict[int, tuple[int, ...]] = {}
    for i, g in enumerate(raw):
        at = f"{where}: field 'groups[{i}]"
        if not (isinstance(g, dict) and _index(g.get("id")) and g["id"] not in groups):
            raise TraceError(f"{at}.id': expected a group id not used before")
        groups[g["id"]] = group_ranks(g.get("ranks"), world, f"{at}.ranks'")
    if groups.get(0) != tuple(range(world)):
        raise TraceError(f"{where}: field 'groups': group 0 must be the whole world "
                         f"(ranks 0..{world - 1})")
    return groups


def group_ranks(value: Any, world: int, where: str) -> tuple[int, ...]:
    """A group's global ranks, checked: distinct ranks of the `world`-rank world."""
    if not (isinstance(value, list) and value and all(_index(r) for r in value)
            and len(set(value)) == len(value)):
        raise TraceError(f"{where}: expected distinct global ranks")
    outside = [r for r in value if r >= world]
    if outside:
        raise TraceError(f"{where}: rank {outside[0]} is outside the {world}-rank world")
    return tuple(value)


def _read_json(path: Path) -> dict[str, Any]:
    data = _read_any_json(path)
    if not isinstance(data, dict):
        raise TraceError(f"{path}: expected a JSON object at the top")
    return data


def _read_any_json(path: Path) -> Any:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise TraceError(f"{path}: {size} bytes, more than a trace file may hold "
                             f"({MAX_FILE_BYTES >> 20} MiB)")
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file (is the directory a trace?)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TraceError(f"{path}: cannot be read ({e})") from None
    except (json.JSONDecodeError, RecursionError) as e:
        raise TraceError(f"{path}: not JSON ({e})") from None


def _expect(data: dict[str, Any], key: str, where: str, ok: Any, what: str) -> Any:
    if key not in data:
        raise TraceError(f"{where}: field '{key}' is missing (expected {what})")
    value = data[key]
    if not ok(value):
        raise TraceError(f"{where}: field '{key}': expected {what}, got {_short(value)}")
    return value


def _seconds(value: Any, where: str) -> float | None:
    """A time in seconds, or None; a value that is not a finite number is refused."""
    if value is not None and not (isinstance(value, (int, float)) and not isinstance(
            value, bool) and math.isfinite(value)):
        raise TraceError(f"{where}: expected seconds or null")
    return value


def _versions() -> str:
    return " or ".join(str(v) for v in VERSIONS)


def _optional_str(data: dict[str, Any], key: str, where: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise TraceError(f"{where}: field '{key}': expected a string")
    return value


def _index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _positive_int(value: Any) -> bool:
    return _index(value) and value > 0


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
