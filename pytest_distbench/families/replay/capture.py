"""Record the collective and point-to-point calls a real program makes, per rank, as a trace.

Built on torch's dispatcher: every torch.distributed call, whether from Python
(``dist.all_reduce``, FSDP2's ``all_gather_into_tensor``) or from C++ (DDP's reducer), reaches
the backend as a ``c10d::*`` operator, and a TorchDispatchMode sees each one with its tensors,
its process group and its arguments. Why this and not the alternatives (docs/replay.md): the
Flight Recorder is NCCL's only, the profiler's execution trace is heavy and its c10d fields
change between releases, and wrapping the Python functions misses DDP's C++ calls.

The wait structure is rebuilt from when each call completed (its Work's future, where the
backend gives one; a collective whose Work has none, such as gloo's reduce_scatter_tensor, is
waited for by a watcher thread that notes when it returns): a call is waited before the first
call this rank issued after it completed, so a synchronous call is waited at once and an
overlapped one (DDP's buckets during backward) where the program had it done.
Point-to-point calls whose completion the backend does not report are waited together before
the next collective, so a replay of an exchange (isend, irecv) cannot deadlock.

    with pytest_distbench.capture("trace/", steps=[1, 2]):
        for step in range(3):
            train_step()          # steps end at optimizer.step(), or call .step() yourself
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

from . import trace as fmt
from .timeline import with_waits

_REDUCE_OPS = {0: "sum", 1: "avg", 2: "product", 3: "min", 4: "max", 5: "band", 6: "bor",
               7: "bxor", 8: "premul_sum"}
_DTYPES = {getattr(torch, name): name for name in fmt.DTYPE_BYTES}


class _Pending:
    """One call as recorded, before the step's wait structure is rebuilt."""

    __slots__ = ("call", "completed_s", "ranks")

    def __init__(self, call: dict[str, Any], ranks: tuple[int, ...]) -> None:
        self.call = call
        self.ranks = ranks
        self.completed_s: float | None = None


class _Mode(TorchDispatchMode):
    def __init__(self, recorder: capture) -> None:
        super().__init__()
        self._recorder = recorder

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func.namespace != "c10d":
            return func(*args, **kwargs)
        issued = time.perf_counter()
        out = func(*args, **kwargs)
        self._recorder._record(func.__name__.split(".")[0], args, out, issued,
                               time.perf_counter())
        return out


class capture:  # noqa: N801 - used as a context manager, named as torch's are
    """Record this rank's communication under `out` (one rank file; rank 0 adds the
    manifest). `steps`: the step indices to keep (all if None); a step ends at each
    optimizer.step() or at .step(). Every rank of the world must enter and leave it."""

    def __init__(self, out: str | os.PathLike[str], steps: Iterable[int] | None = None,
                 name: str | None = None, quiet: bool = False,
                 refused: Callable[[], str | None] | None = None,
                 past_warm_up: bool = False) -> None:
        """`refused`: asked in every rank just before the trace is written, why this rank may
        not write it (None: it may); if any rank says why, none writes (the capture command's
        claim on `out`, launched.py). `past_warm_up`, with no `steps`: leave step 0 out
        where the program ended more steps (its first iteration sets up: DDP's buckets, lazy
        initialisation; 1,210 ms against 27-33 ms for the steps after it)."""
        self.out = Path(out)
        self.past_warm_up = past_warm_up and steps is None
        self.quiet = quiet
        self._refused = refused
        self.reason: str | None = None
        self.steps = None if steps is None else sorted(set(steps))
        self.name = name
        self.step_index = 0
        self._pending: list[_Pending] = []
        self._skipped: list[str] = []
        self._lock = threading.Lock()
        self._mode: _Mode | None = None
        self._hook: Any = None
        self._start = 0.0
        self._step_began = 0.0  # when the current step began, from the capture's start
        self._spans: dict[int, tuple[float, float]] = {}  # wanted step -> (start_s, end_s)
        self._watched: queue.Queue | None = None
        self._watch_thread: threading.Thread | None = None
        self._finished = False
        self._created = False

    # -- the context manager ----------------------------------------------------------------

    def __enter__(self) -> capture:
        if not dist.is_initialized():
            raise RuntimeError("pytest_distbench.capture: initialize the process group first "
                               "(torch.distributed.init_process_group)")
        rank0 = dist.get_rank() == 0
        self._created = rank0 and not self.out.exists()
        fmt.refuse_existing(self.out, create=rank0)  # every rank refuses
        self._start = time.perf_counter()
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._hook = register_optimizer_step_post_hook(lambda *_: self.step())
        self._mode = _Mode(self)
        self._mode.__enter__()
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is not None:
            self.abandon()  # the other ranks may never join a collective now
        else:
            self.finish()

    def step(self) -> None:
        """The current step ended; once the last wanted step has, the trace is written."""
        self._end_step()
        self.step_index += 1
        if self.steps is not None and self.step_index > self.steps[-1]:
            self.finish()

    def finish(self) -> str | None:
        """Stop recording and write the trace (every rank, together); idempotent. Returns why
        nothing was written (no call recorded; rank 0 also says it on stderr unless `quiet`),
        None when the trace was."""
        if self._stop():
            if self._watch_thread is not None:  # every watched completion in before writing
                self._watch_thread.join(timeout=60)
            self.reason = self._write()
            if self.reason and dist.get_rank() == 0 and not self.quiet:
                print(f"pytest_distbench.capture: {self.reason}", file=sys.stderr)
        return self.reason

    def abandon(self) -> None:
        """Stop recording and write nothing, with no collective: this rank raised, and the
        others may never join one (docs/replay.md, "When a rank fails")."""
        if self._stop():
            self._remove_created()

    @property
    def stopped(self) -> bool:
        return self._finished

    def _stop(self) -> bool:
        """Stop recording; False if it had already stopped."""
        if self._finished:
            return False
        self._finished = True
        with self._lock:
            partial = any(p.call["step"] == self.step_index for p in self._pending)
        if partial:  # ended before its optimizer.step(): its span ends here
            self._end_step()
        if self._watched is not None:  # the watcher ends once the calls it holds are done
            self._watched.put(None)
        if self._hook is not None:
            self._hook.remove()
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
        return True

    def _remove_created(self) -> None:
        if self._created:
            try:
                self.out.rmdir()  # only if empty: never what another rank wrote meanwhile
            except OSError:
                pass

    # -- recording (the dispatch mode calls this, on whatever thread issued the call) --------

    def _kept_steps(self) -> list[int] | None:
        """The steps a trace past its warm-up keeps (None: as recorded)."""
        if not self.past_warm_up or self.step_index < 2:
            return None
        return list(range(1, self.step_index))

    def _wanted(self) -> bool:
        return self.steps is None or self.step_index in self.steps

    def _end_step(self) -> None:
        now = round(time.perf_counter() - self._start, 9)
        if self._wanted():
            self._spans[self.step_index] = (self._step_began, now)
        self._step_began = now

    def _record(self, op: str, args: tuple, out: Any, issued: float, returned: float) -> None:
        if self._finished or not self._wanted():
            return
        try:
            calls = _calls(op, args)
            group = _group_ranks(args)
        except _Unknown as why:
            with self._lock:
                self._skipped.append(f"rank {dist.get_rank()} step {self.step_index}: {why}")
            return
        entries = [_Pending({**c, "step": self.step_index,
                             "issued_s": round(issued - self._start, 9),
                             "returned_s": round(returned - self._start, 9)}, group)
                   for c in calls]
        for entry in entries:
            call = entry.call
            for key in ("root", "peer"):  # group ranks -> global ranks
                if key in call:
                    call[key] = group[call[key]]
        with self._lock:
            self._pending.extend(entries)
        work = torch._C._distributed_c10d.Work.unbox(out[-1] if isinstance(out, tuple) else out)

        def done(_: Any = None) -> None:
            at = round(time.perf_counter() - self._start, 9)
            for entry in entries:
                entry.completed_s = at
        try:
            future = work.get_future()
        except Exception:  # noqa: BLE001 - the backend does not report completion here
            # A collective's Work may be waited from a second thread; a send's or a
            # receive's not (gloo's would consume its completion twice): those stay unknown.
            if entries[0].call["op"] not in fmt.POINT_TO_POINT:
                self._watcher().put((work, done))
            return
        future.add_done_callback(done)

    def _watcher(self) -> queue.Queue:
        """The queue of (Work, done) a daemon thread waits for, in issue order."""
        if self._watched is None:
            self._watched = queue.Queue()
            self._watch_thread = threading.Thread(target=_watch, args=(self._watched,),
                                                  name="distbench-capture-watcher", daemon=True)
            self._watch_thread.start()
        return self._watched

    # -- writing ----------------------------------------------------------------------------

    def _write(self) -> str | None:
        rank, world = dist.get_rank(), dist.get_world_size()
        with self._lock:
            pending, skipped = list(self._pending), list(self._skipped)
        mine = sorted({p.ranks for p in pending if p.ranks != tuple(range(world))})
        refusal = self._refused() if self._refused is not None else None
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, (mine, skipped, len(pending), refusal))
        refusal = next((why for *_, why in gathered if why), None)
        if refusal:  # the directory is not this capture's to write in (nor to remove)
            return f"nothing written to {self.out}: {refusal}"
        if not any(count for _, _, count, _ in gathered):
            # A trace of no call replays as nothing and blocks the next capture there.
            if rank == 0:
                self._remove_created()
            asked = f"steps {self.steps}" if self.steps is not None else "any step"
            return (f"no call recorded in {asked} (the program ended {self.step_index} "
                    f"step(s)); nothing written to {self.out}")
        kept = self._kept_steps()
        if kept is not None:  # every rank ended as many steps: they leave out the same one
            pending = [p for p in pending if p.call["step"] in kept]
            self._spans = {step: span for step, span in self._spans.items() if step in kept}
        groups = {0: tuple(range(world))}
        for ranks in sorted({g for theirs, *_ in gathered for g in theirs}):
            groups[len(groups)] = ranks
        ids = {ranks: g for g, ranks in groups.items()}
        calls = with_waits([fmt.Call(**p.call, group=ids[p.ranks], completed_s=p.completed_s)
                            for p in pending])
        self.out.mkdir(parents=True, exist_ok=True)
        try:
            fmt.write_rank(self.out, rank, calls, self._spans)
            dist.barrier()  # every rank file is there before the manifest says the trace is
        except BaseException:
            (self.out / fmt.rank_file(rank)).unlink(missing_ok=True)  # no partial trace
            raise
        if rank == 0:
            backend = dist.get_backend()
            device = "cuda" if any(b == "nccl" for b in str(backend).split(",")) else "cpu"
            fmt.write_manifest(self.out, fmt.Trace(
                name=self.name or self.out.resolve().name, world_size=world, groups=groups,
                calls={}, backend=str(backend), device=device,
                steps=self.steps if self.steps is not None else
                kept if kept is not None else list(range(self.step_index)),
                source=f"pytest_distbench.capture, torch {torch.__version__}",
                skipped=[s for _, theirs, *_ in gathered for s in theirs]))
        return None


def _watch(works: queue.Queue) -> None:
    while True:
        item = works.get()
        if item is None:
            return
        work, done = item
        try:
            work.wait()
        except Exception:  # noqa: BLE001 - the program sees the failure on its own wait
            continue
        done()


class _Unknown(Exception):
    """A c10d operator the trace format does not replay (listed, not dropped)."""


def _calls(op: str, args: tuple) -> list[dict[str, Any]]:
    """The trace calls one c10d operator stands for (a coalesced one: one per tensor)."""
    def buf(t: torch.Tensor) -> fmt.Buffer:
        if t.dtype not in _DTYPES:
            raise _Unknown(f"c10d.{op} on dtype {t.dtype}")
        return fmt.Buffer(_DTYPES[t.dtype], tuple(t.shape))

    def reduce_op(obj: Any) -> str:
        return _REDUCE_OPS.get(int(obj.op()), "sum")

    if op in ("allreduce_", "allreduce_coalesced_"):
        return [{"op": "all_reduce", "inputs": (buf(t),), "outputs": (buf(t),),
                 "reduce_op": reduce_op(args[2])} for t in args[0]]
    if op == "allgather_":
        return [{"op": "all_gather", "inputs": (buf(args[1][0]),),
                 "outputs": tuple(buf(t) for t in args[0][0])}]
    if op == "_allgather_base_":
        return [{"op": "all_gather_into_tensor", "inputs": (buf(args[1]),),
                 "outputs": (buf(args[0]),)}]
    if op == "allgather_into_tensor_coalesced_":
        return [{"op": "all_gather_into_tensor", "inputs": (buf(i),), "outputs": (buf(o),)}
                for o, i in zip(args[0], args[1], strict=True)]
    if op == "reduce_scatter_":
        return [{"op": "reduce_scatter", "inputs": tuple(buf(t) for t in args[1][0]),
                 "outputs": (buf(args[0][0]),), "reduce_op": reduce_op(args[3])}]
    if op == "_reduce_scatter_base_":
        return [{"op": "reduce_scatter_tensor", "inputs": (buf(args[1]),),
                 "outputs": (buf(args[0]),), "reduce_op": reduce_op(args[3])}]
    if op == "reduce_scatter_tensor_coalesced_":
        return [{"op": "reduce_scatter_tensor", "inputs": (buf(i),), "outputs": (buf(o),),
                 "reduce_op": reduce_op(args[3])}
                for o, i in zip(args[0], args[1], strict=True)]
    if op == "alltoall_":
        return [{"op": "all_to_all", "inputs": tuple(buf(t) for t in args[1]),
                 "outputs": tuple(buf(t) for t in args[0])}]
    if op == "alltoall_base_":
        if list(args[3]) or list(args[4]):
            raise _Unknown("c10d.alltoall_base_ with uneven splits")
        return [{"op": "all_to_all_single", "inputs": (buf(args[1]),),
                 "outputs": (buf(args[0]),)}]
    if op == "broadcast_":
        return [{"op": "broadcast", "inputs": tuple(buf(t) for t in args[0]),
                 "root": int(args[2])}]
    if op == "reduce_":
        return [{"op": "reduce", "inputs": tuple(buf(t) for t in args[0]),
                 "reduce_op": reduce_op(args[2]), "root": int(args[3])}]
    if op == "barrier":
        return [{"op": "barrier"}]
    if op == "send":
        return [{"op": "send", "inputs": tuple(buf(t) for t in args[0]),
                 "peer": int(args[2])}]
    if op == "recv_":
        return [{"op": "recv", "outputs": tuple(buf(t) for t in args[0]),
                 "peer": int(args[2])}]
    raise _Unknown(f"c10d.{op}")


def _group_ranks(args: tuple) -> tuple[int, ...]:
    """The global ranks of the call's process group (its first ScriptObject argument)."""
    for a in args:
        if isinstance(a, torch.ScriptObject) and "ProcessGroup" in str(a._type()):
            group = torch._C._distributed_c10d.ProcessGroup.unbox(a)
            return tuple(dist.get_process_group_ranks(group))
    raise _Unknown("a c10d call without a process group")
