"""A captured trace replayed in a rank, measured as one benchmark (docs/replay.md).

    from pytest_distbench.families.replay.step import replay

    @pytest.mark.distbench
    def test_my_step(distbench):
        replay(distbench, "trace/")

One timed iteration replays every call of the trace's captured steps, in the recorded order,
with the recorded async/wait structure, on buffers allocated once with the recorded shapes and
dtypes, and, between the calls, the rank's own work for as long as the original did it
(timeline.py measures it, gapwork.py does it: idle, busy on the CPU or on the GPU). The
trace's process groups are made in every rank of the world (new_group is
collective over the world), and destroyed when the test ends, so a persistent world does not
gather groups from test to test. A world larger than the trace's runs it on its first ranks;
the others only keep in step.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from ... import units
from ...harness.ranks.pressure import memory_available
from ...results.rendering.fit import printable
from . import gapwork, timeline
from . import trace as trace_format
from .breakdown import Timed, aggregate
from .options import SUITES
from .reading import read
from .timeline import waits_at
from .trace import Call, Trace, TraceError

FAMILY = "replay"
SHIPPED = SUITES / "traces"

__all__ = ["FAMILY", "SHIPPED", "gaps_setting", "replay", "trace_params", "unchecked"]

# Reduce ops replayed as another that moves the same bytes: premul_sum needs a scalar the trace
# does not keep and exists on NCCL only.
REPLAYED_AS = {"premul_sum": "sum"}
REDUCE_OPS = {"sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT,
              "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG,
              "band": dist.ReduceOp.BAND, "bor": dist.ReduceOp.BOR, "bxor": dist.ReduceOp.BXOR}
CHECKED_REDUCTIONS = ("sum", "min", "max", "avg")
# Ops whose result a known input does not make cheap and exact to check.
UNCHECKED_OPS = ("barrier",)


def trace_params(config: pytest.Config) -> list[Any]:
    """The traces test_replay runs: --distbench-replay's, else the shipped ones (the main
    job's), one pytest.param each (id: the trace directory's name)."""
    from ...settings import of_session

    chosen = list(of_session(config).replay or []) or sorted(
        str(p) for p in SHIPPED.iterdir() if trace_format.is_trace(p))
    return [pytest.param(d, id=Path(d).name) for d in chosen]


def gaps_setting(config: pytest.Config, node: Any) -> str:
    """The test's --distbench-replay-gaps, as the controller resolved it."""
    from ...settings import of_test

    return of_test(config, node).replay_gaps


def replay(distbench: Any, trace: Trace | str | os.PathLike[str], *,
           name: str | None = None, gaps: str = gapwork.DEFAULT) -> None:
    """Replay `trace` (a Trace or its directory) in this rank and measure it. `gaps`: what each
    rank does between its calls for the time the original did it (gapwork.MODES: busy, the
    default, is cpu in a CPU world and gpu in a CUDA one; off replays the calls back to
    back).

    From a directory, each rank reads the manifest and its own calls only; rank 0 also checks
    the whole trace, one rank file at a time (docs/replay-trace-format.md, "Memory"). Every
    rank's verdict is shared before any allocates or fails: one rank refusing alone would
    leave the others waiting for it in new_group."""
    rank, world = distbench.rank, distbench.world_size
    try:
        mode = gapwork.resolve(gapwork.parse_mode(gaps), distbench.device.type)
    except ValueError as exc:
        pytest.fail(f"replay gaps: {exc}", pytrace=False)
    problem: str | None = None
    if not isinstance(trace, Trace):
        try:
            trace = read(trace, keep=(rank,), check=rank == 0)
        except TraceError as exc:
            problem, trace = str(exc), None
    mine = _Summary.of(trace, rank, problem)
    everyone: list[Any] = [None] * world
    dist.all_gather_object(everyone, mine, group=distbench.group)
    summaries: list[_Summary] = everyone
    problem = next((s.problem for s in summaries if s.problem), None)
    if problem or trace is None:
        pytest.fail(problem or "no trace", pytrace=False)
    shown = printable(trace.name)
    if world < trace.world_size:
        pytest.skip(f"trace {shown} needs {trace.world_size} ranks; this world has {world}")
    problem = next((s.shape for s in summaries if s.shape), None) or memory_problem(
        trace.world_size, summaries)
    if problem:
        pytest.fail(f"trace {shown}: {problem}", pytrace=False)
    # Each rank rebuilds its own gaps and original time; every rank learns all of them, so
    # all run gaps or none (a busy worker calibrates with every rank at once).
    mine = timeline.RankTimes.of(trace.calls.get(rank, []), trace.spans.get(rank))
    everyone = [None] * world
    dist.all_gather_object(everyone, mine, group=distbench.group)
    times: list[timeline.RankTimes] = everyone[:trace.world_size]
    why_none = "off" if mode == "off" else next(
        (t.gaps for t in times if isinstance(t.gaps, str)), "")
    # Gaps that alone outlast the test's timeout (a 10-hour one, a 1e11 s one past what a
    # sleep takes) are refused before any is run: the same verdict in every rank.
    problem = None if why_none or distbench.timeout_s is None else timeline.overrun(
        times, distbench.fewest_calls(), distbench.timeout_s)
    if problem:
        pytest.fail(f"trace {shown}: {problem}", pytrace=False)
    work = gapwork.worker("off" if why_none else mode, distbench.device,
                          lambda: dist.barrier(group=distbench.group))
    groups = _Groups(distbench, trace)
    try:
        _measure(distbench, trace, groups, name, summaries[:trace.world_size], work,
                 mine.gaps if not why_none else None,
                 _timing_figures(times, work, why_none, gaps))
    finally:
        groups.destroy()


def _timing_figures(times: list[timeline.RankTimes], work: gapwork.Worker, why_none: str,
                    asked: str) -> dict[str, Any]:
    """The record's figures on the gaps the ranks ran and on the original's time."""
    gaps = [t.gaps for t in times if not isinstance(t.gaps, str)]
    originals = [t.original for t in times]
    known = bool(originals) and all(o is not None for o in originals)
    return {
        "gaps": work.mode, "gaps_asked": asked,
        "gaps_how": work.describe() if why_none in ("", "off") else f"none: {why_none}",
        "gaps_blind": sorted({b for g in gaps for b in g.blind}) if not why_none else [],
        "gap_s": max((g.total for g in gaps), default=0.0) if not why_none else 0.0,
        # The original's time for the captured steps (the slowest rank's), and how known.
        "original_s": max(o for o in originals if o is not None) if known else None,
        "original_how": (timeline.SPANS if all(t.spanned for t in times)
                         else timeline.CALLS) if known else None,
    }


class _Summary:
    """What the other ranks need to know of one rank's calls (each rank holds its own only)."""

    def __init__(self, problem: str | None, calls: int = 0, step_bytes: int = 0,
                 memory_bytes: int = 0, steps: frozenset[int] = frozenset(),
                 shape: str | None = None, unchecked: frozenset[str] = frozenset(),
                 available: int | None = None) -> None:
        self.problem, self.calls, self.step_bytes = problem, calls, step_bytes
        self.memory_bytes, self.steps, self.shape = memory_bytes, steps, shape
        self.unchecked, self.available = unchecked, available

    @classmethod
    def of(cls, trace: Trace | None, rank: int, problem: str | None) -> _Summary:
        if trace is None or problem:
            return cls(problem)
        calls = trace.calls.get(rank, [])
        return cls(None, len(calls), trace.step_bytes(rank), trace.memory_bytes(rank),
                   frozenset(c.step for c in calls) if not trace.steps else frozenset(),
                   shape_problem(trace, rank), frozenset(unchecked(calls, rank)),
                   memory_available())


def _measure(distbench: Any, trace: Trace, groups: _Groups, name: str | None,
             summaries: list[_Summary], work: gapwork.Worker,
             gaps: timeline.Gaps | str | None, timing: dict[str, Any]) -> None:
    rank = distbench.rank
    players = list(range(trace.world_size))
    replayer = (_Replayer(trace, rank, groups, distbench.device, work,
                          gaps if isinstance(gaps, timeline.Gaps) else None)
                if rank in players else None)
    step = replayer.step if replayer is not None else _idle
    nbytes = max(s.step_bytes for s in summaries)  # the busiest rank's bytes per replay
    figures: dict[str, Any] = {
        "trace": printable(trace.name), "trace_ranks": trace.world_size,
        "source": trace.source, "captured_backend": trace.backend,
        "captured_device": trace.device,
        "steps": len(trace.steps) or len(frozenset().union(*(s.steps for s in summaries))),
        "calls": sum(s.calls for s in summaries),
        "calls_per_rank": max(s.calls for s in summaries),
        "bytes": nbytes, "skipped": list(trace.skipped),
        "unchecked": sorted(frozenset().union(*(s.unchecked for s in summaries))),
        # What the ranks did between their calls, and why where nothing; the original's time.
        **timing,
        # Filled by check(), after the timed iterations: measure() keeps this very list.
        "breakdown": [],
    }
    breakdown: list[dict[str, Any]] = figures["breakdown"]

    def check() -> int:
        # Every rank's calls, timed over the replays so far, before the checking replay.
        mine = replayer.timed() if replayer is not None else []
        everyone: list[Any] = [None] * distbench.world_size
        dist.all_gather_object(everyone, mine)
        breakdown.extend(aggregate(Timed(*c) for calls in everyone for c in calls))
        return replayer.check() if replayer is not None else 0

    # The ranks past the trace's only keep in step: their times are not the replay's.
    timed = players if trace.world_size < distbench.world_size else None
    distbench.measure(step, nbytes=nbytes, family=FAMILY, check=check,
                      figures=figures, name=name, ranks=timed, pressure_ranks=timed)


def _idle() -> None:
    return None


def unchecked(calls: list[Call], rank: int) -> list[str]:
    """The calls of `rank` whose results the replay does not check, by kind (e.g. "barrier",
    "all_reduce product", "reduce (non-root ranks)")."""
    return sorted({why for c in calls if (why := _unchecked(c, rank))})


def _unchecked(call: Call, rank: int) -> str | None:
    if call.op in UNCHECKED_OPS:
        return call.op
    buffers = call.inputs + call.outputs
    if any(b.dtype == "bool" for b in buffers):
        return f"{call.op} bool"
    reduce_op = REPLAYED_AS.get(call.reduce_op or "", call.reduce_op)
    if call.reduce_op is not None and reduce_op not in CHECKED_REDUCTIONS:
        return f"{call.op} {call.reduce_op}"
    if reduce_op == "avg" and any(not b.dtype.startswith(("float", "bfloat", "complex"))
                                  for b in buffers):
        return f"{call.op} avg of integers"
    if call.op == "reduce" and rank != call.root:
        return "reduce (non-root ranks)"
    return None


def memory_problem(trace_ranks: int, summaries: list[_Summary]) -> str | None:
    """Why the trace's buffers cannot be allocated in the ranks of a host (None: they can, or
    the memory available is not known). The ranks of a host share its memory: in a local
    world all of them, under a launcher LOCAL_WORLD_SIZE."""
    here = min(trace_ranks, int(os.environ.get("LOCAL_WORLD_SIZE", trace_ranks)))
    per_rank = max(s.memory_bytes for s in summaries[:trace_ranks])
    for s in summaries:
        if s.available is not None and per_rank * here > s.available:
            return (f"its buffers need up to {units.format_size(per_rank)} per rank, "
                    f"{units.format_size(per_rank * here)} for its {here} rank(s) on this "
                    f"host, and {units.format_size(s.available)} of memory is available")
    return None


def shape_problem(trace: Trace, rank: int) -> str | None:
    """Why a call of `rank` cannot be replayed as recorded (None: all can)."""
    for i, c in enumerate(trace.calls.get(rank, [])):
        n = trace_format.group_size(trace, c)
        problem = _call_shape_problem(c, n)
        if problem:
            return f"rank {rank} call {i} ({c.op}): {problem}"
    return None


def _call_shape_problem(c: Call, n: int) -> str | None:
    ins, outs = c.inputs, c.outputs
    if c.op in ("all_gather", "all_to_all") and len(outs) != n:
        return f"{len(outs)} outputs for a group of {n} (one per rank expected)"
    if c.op in ("reduce_scatter", "all_to_all") and len(ins) != n:
        return f"{len(ins)} inputs for a group of {n} (one per rank expected)"
    if c.op in ("all_gather", "all_gather_into_tensor", "reduce_scatter",
                "reduce_scatter_tensor", "all_to_all_single", "recv") and not outs:
        return "no output buffer"
    if c.op in ("all_gather", "all_gather_into_tensor", "reduce_scatter_tensor",
                "all_to_all_single", "send", "reduce") and not ins:
        return "no input buffer"
    if c.op == "all_gather_into_tensor" and outs[0].nbytes != n * ins[0].nbytes:
        return f"output of {outs[0].nbytes} B is not {n} x the input's {ins[0].nbytes} B"
    if c.op == "reduce_scatter_tensor" and ins[0].nbytes != n * outs[0].nbytes:
        return f"input of {ins[0].nbytes} B is not {n} x the output's {outs[0].nbytes} B"
    if c.op == "all_to_all_single" and (
            ins[0].nbytes != outs[0].nbytes or math.prod(ins[0].shape) % n):
        return f"input and output must hold the same bytes, divisible in {n} equal chunks"
    return None


class _Groups:
    """The trace's process groups in this world: made in every rank, in the manifest's order
    (new_group is collective over the whole world, members or not)."""

    def __init__(self, distbench: Any, trace: Trace) -> None:
        self.handles: dict[int, Any] = {}
        self._made: list[Any] = []
        self.world = distbench.group
        for gid, members in sorted(trace.groups.items()):
            if gid == 0 and trace.world_size == distbench.world_size:
                self.handles[gid] = distbench.group
                continue
            handle = dist.new_group(list(members))
            self.handles[gid] = handle
            if handle is not dist.GroupMember.NON_GROUP_MEMBER:
                self._made.append(handle)

    def destroy(self) -> None:
        for handle in self._made:
            dist.destroy_process_group(handle)
        self._made.clear()


class _Replayer:
    """One rank's calls, ready to issue: buffers allocated once, each call's issue prepared,
    the waits placed where the trace waited."""

    def __init__(self, trace: Trace, rank: int, groups: _Groups, device: torch.device,
                 work: gapwork.Worker, gaps: timeline.Gaps | None) -> None:
        self.trace, self.rank = trace, rank
        self.calls = trace.calls[rank]
        self.inputs = [[_empty(b, device) for b in c.inputs] for c in self.calls]
        self.outputs = [[_empty(b, device) for b in c.outputs] for c in self.calls]
        self.members = [sorted(trace.groups[c.group]) for c in self.calls]
        self.issues = [_issue(c, ins, outs, groups.handles[c.group], groups.world)
                       for c, ins, outs in zip(self.calls, self.inputs, self.outputs,
                                               strict=True)]
        self.waits_at = waits_at(self.calls)
        self.spent = [0.0] * len(self.calls)
        self.replays = 0
        self.fill = gapwork.Paced(work)
        self.before = list(gaps.before) if gaps else [0.0] * len(self.calls)
        self.after = gaps.after if gaps else 0.0

    def step(self) -> None:
        clock = time.perf_counter
        issues, waits_at, spent = self.issues, self.waits_at, self.spent
        fill, before = self.fill, self.before
        fill.reset()
        works: list[Any] = [None] * len(issues)
        issued = [0.0] * len(issues)
        for i, issue in enumerate(issues):
            for k in waits_at[i]:
                for work in works[k]:
                    work.wait()
                spent[k] += clock() - issued[k]
            fill(before[i])  # the work the rank did before this call
            issued[i] = clock()
            works[i] = issue()
        for k in waits_at[len(issues)]:
            for work in works[k]:
                work.wait()
            spent[k] += clock() - issued[k]
        fill(self.after)
        self.replays += 1
        if self.replays == 1:
            # The first replay makes the groups' connections: not what a step costs.
            spent[:] = [0.0] * len(spent)

    def timed(self) -> list[tuple[str, int, int, float, float | None]]:
        """(op, group size, bytes, mean seconds per replay, the original's seconds) of each
        call, replays after the first."""
        replays = max(1, self.replays - 1)
        return [(c.op, len(m), c.nbytes, s / replays, timeline.original_seconds(c))
                for c, m, s in zip(self.calls, self.members, self.spent, strict=True)]

    def check(self) -> int:
        """Elements wrong after one replay from known inputs: rank r's inputs hold r + 1."""
        for ins, outs in zip(self.inputs, self.outputs, strict=True):
            for t in ins:
                t.fill_(_value(self.rank, t))
            for t in outs:
                t.zero_()
        fill, self.fill = self.fill, gapwork.Paced(gapwork.Worker())  # no gaps in the check
        try:
            self.step()
        finally:
            self.fill = fill
        return sum(_wrong(c, self.rank, m, ins, outs) for c, m, ins, outs in zip(
            self.calls, self.members, self.inputs, self.outputs, strict=True))


def _empty(buffer: trace_format.Buffer, device: torch.device) -> torch.Tensor:
    return torch.zeros(buffer.shape, dtype=getattr(torch, buffer.dtype), device=device)


def _issue(c: Call, ins: list[torch.Tensor], outs: list[torch.Tensor], group: Any,
           world: Any) -> Callable[[], list[Any]]:
    """The call, issued asynchronously: its works."""
    op = REDUCE_OPS.get(REPLAYED_AS.get(c.reduce_op or "", c.reduce_op or "sum"))
    kind = c.op
    if kind == "all_reduce":
        return lambda: [dist.all_reduce(t, op=op, group=group, async_op=True) for t in ins]
    if kind == "all_gather":
        return lambda: [dist.all_gather(outs, ins[0], group=group, async_op=True)]
    if kind == "all_gather_into_tensor":
        return lambda: [dist.all_gather_into_tensor(outs[0], ins[0], group=group,
                                                    async_op=True)]
    if kind == "reduce_scatter":
        return lambda: [dist.reduce_scatter(outs[0], ins, op=op, group=group, async_op=True)]
    if kind == "reduce_scatter_tensor":
        return lambda: [dist.reduce_scatter_tensor(outs[0], ins[0], op=op, group=group,
                                                   async_op=True)]
    if kind == "all_to_all":
        return lambda: [dist.all_to_all(outs, ins, group=group, async_op=True)]
    if kind == "all_to_all_single":
        return lambda: [dist.all_to_all_single(outs[0], ins[0], group=group, async_op=True)]
    if kind == "broadcast":
        return lambda: [dist.broadcast(t, src=c.root, group=group, async_op=True) for t in ins]
    if kind == "reduce":
        return lambda: [dist.reduce(ins[0], dst=c.root, op=op, group=group, async_op=True)]
    if kind == "barrier":
        return lambda: [dist.barrier(group=group, async_op=True)]
    # Point to point on the world's group: the trace names peers by global rank.
    if kind == "send":
        return lambda: [dist.isend(t, dst=c.peer, group=world) for t in ins]
    if kind == "recv":
        return lambda: [dist.irecv(t, src=c.peer, group=world) for t in outs]
    raise AssertionError(f"op {kind!r} passed trace.load without a replay")


def _value(rank: int, t: torch.Tensor) -> Any:
    return True if t.dtype == torch.bool else rank + 1


def _wrong(c: Call, rank: int, members: list[int], ins: list[torch.Tensor],
           outs: list[torch.Tensor]) -> int:
    if _unchecked(c, rank):
        return 0
    values = [m + 1 for m in members]
    kind = c.op
    if kind in ("all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor"):
        reduce_op = REPLAYED_AS.get(c.reduce_op or "", c.reduce_op)
        expected = {"sum": sum(values), "min": min(values), "max": max(values),
                    "avg": sum(values) / len(values)}[reduce_op or "sum"]
        return sum(_differ(t, expected) for t in (ins if kind in ("all_reduce", "reduce")
                                                  else outs))
    if kind in ("all_gather", "all_to_all"):
        return sum(_differ(t, v) for t, v in zip(outs, values, strict=True))
    if kind in ("all_gather_into_tensor", "all_to_all_single"):
        chunks = outs[0].reshape(len(values), -1)
        return sum(_differ(chunk, v) for chunk, v in zip(chunks, values, strict=True))
    if kind == "broadcast":
        return sum(_differ(t, (c.root or 0) + 1) for t in ins)
    if kind == "recv":
        return sum(_differ(t, (c.peer or 0) + 1) for t in outs)
    return 0  # send: its receiver checks


def _differ(t: torch.Tensor, expected: float) -> int:
    return int((t != expected).sum())
