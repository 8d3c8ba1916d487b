"""The in-rank `distbench` object: how one benchmark is timed on one rank."""

from __future__ import annotations

import math
import os
import statistics
import sys
import time
from array import array
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from typing import Any

import pytest
import torch
import torch.distributed as dist

from ...results.statistics.interval import NORMAL_975, block_means, median_ranks
from ..wire import Measurement, MeasureSettings, PrecisionStop, Progress
from . import cuda_timing, rss
from .pressure import Pressure, PressureError
from .progress import Reporter, messages_per_iteration

# Duration-bound runs agree on when to stop once per chunk of iterations lasting about this
# long (docs/duration-and-pressure.md): it bounds how far past the duration a run goes.
CHUNK_S = 0.05
# The fewest samples whose median has a 95 % interval (results/statistics/interval.py): where
# --distbench-min-iterations would overrun the budget, a budget-bound point takes this many.
MIN_INTERVAL_SAMPLES = 6
# Warm-up calls of a budget-bound run stop at this share of its budget: a point whose
# iterations take a second would otherwise warm up for longer than it measures.
WARMUP_SHARE = 0.25
# Untimed calls that size an iteration of repeated calls (repeats_within).
FIT_CALLS = 3
# A duration-bound run stops early rather than hold more samples than this per rank: every
# sample travels to the controller and into the results file (the record then says so:
# stopped_at_sample_cap).
MAX_DURATION_SAMPLES = 3_000_000


class Distbench:
    """Measures a callable in every rank of the world, the same way in each.

    Warm-up calls run untimed; all ranks then agree on the iteration count and meet at a
    barrier, and every timed iteration is timed on its own, so the controller can take the
    slowest rank per iteration (a collective lasts as long as its slowest rank). In a CUDA
    world with batch timing (the default there, docs/gpu.md) a timed "iteration" is a batch
    of back-to-back calls between two CUDA events, its sample the time per call.
    """

    def __init__(
        self,
        *,
        rank: int,
        world_size: int,
        backend: str,
        device: torch.device,
        group: Any,
        control_group: Any,
        settings: MeasureSettings,
        progress: Callable[[Progress], None] | None = None,
        pressure_cpus: Iterable[int] | None = None,
        cuda: Any = None,
    ) -> None:
        self.rank = rank
        self.world_size = world_size
        self.backend = backend
        self.device = device
        self.group = group
        self.dtype: torch.dtype = getattr(torch, settings.dtype)
        self._control = control_group
        self._settings = settings
        self._progress = progress  # rank 0's way to the controller during a test
        self._pressure_cpus = tuple(pressure_cpus) if pressure_cpus else None
        self.measurements: list[Measurement] = []
        # Every CUDA call goes through this, torch.cuda unless a test hands in a fake one.
        self._cuda = cuda if cuda is not None else torch.cuda
        self._on_cuda = device.type == "cuda"
        rss.reset_peak()  # a test's memory peak starts with the test
        self._reset_gpu_peak()

    def measure(
        self,
        fn: Callable[[], Any],
        *,
        nbytes: int | None = None,
        count: int | None = None,
        dtype: str | torch.dtype | None = None,
        family: str | None = None,
        busbw_factor: float = 1.0,
        check: Callable[[], int] | None = None,
        name: str | None = None,
        figures: dict[str, Any] | None = None,
        pressure_ranks: Iterable[int] | None = None,
        ranks: Iterable[int] | None = None,
        headline: str = "p50",
        moves_no_data: str | None = None,
    ) -> None:
        """Time `fn()`; bandwidth comes from `nbytes`, `check()` counts wrong elements.

        `moves_no_data`: why this call moves no data at this size and world (one rank, in
        place: its output is its input); the record then has no bandwidth, only the time.

        `figures` are the family's own JSON-able values for the record (rank 0's are kept);
        `figures["messages_per_iteration"]` (default 1) is what live reports count.
        `pressure_ranks` are the ranks that run the pressure options during the timed region
        (None: every rank). `ranks` are the ranks that take part in what is measured (None:
        every rank); the others run `fn` to keep in step, and their times are kept out of the
        record. `headline` is the statistic the precision target applies to: "p50" (the
        median iteration) or "mean" (a rate over the whole timed region: total / time).
        """
        if headline not in HEADLINES:
            raise ValueError(f"distbench.measure: headline must be one of {HEADLINES}, "
                             f"got {headline!r}")
        self._check_new(name, nbytes, "measure")
        timed_here = self._takes_part(ranks)
        s = self._settings
        figures = dict(figures or {})
        messages_per_iteration(figures)  # a bad value fails in every rank, before any timing
        pressured = self._pressured(pressure_ranks)
        if s.cuda_graph:
            # Every rank sees the same device type: all skip here, before any collective.
            reason = cuda_timing.graph_unsupported(self.device.type, self.backend)
            if reason:
                pytest.skip(reason)
        rss.reset_peak()
        self._reset_gpu_peak()
        timing = cuda_timing.timing_label(self.device.type, s.cuda_timing, s.cuda_graph)
        batch = None
        if timing in (cuda_timing.CUDA_BATCH, cuda_timing.CUDA_GRAPH):
            # One sample = one batch's per-iteration time; per_call is then per batch, so the
            # count, budget and duration loops below need no batch case of their own.
            timed, per_call, batch = self._batch_timer(fn, graph=timing == cuda_timing.CUDA_GRAPH)
            warmed = s.warmup
        else:
            timed = self._timer(fn)
            warm = self._warm_up(timed)
            warmed = len(warm)
            per_call = (self._agreed_per_call(timed, warm) if s.iterations is None or s.duration_s
                        else 0)
        pressure = self._prepare_pressure(pressured)
        samples = array("d")
        stop: PrecisionStop | None = None
        capped = False
        try:
            self._synchronize()
            dist.barrier(group=self._control)
            reporter = None
            if self.rank == 0 and self._progress is not None and s.report_every_s:
                done = samples if batch is None else _Iterations(samples, batch)
                reporter = Reporter(self._progress, s.report_every_s, done, name=name,
                                    nbytes=nbytes, figures=figures)
            if pressure is not None:
                pressure.start()
            if reporter is not None:
                reporter.start()
            started = time.perf_counter()
            try:
                if s.duration_s is not None:
                    capped = self._run_for(timed, samples, s.duration_s, per_call, timed_here)
                else:
                    if s.iterations is None:
                        # Budget-bound: until the budget's time is spent, or the headline is
                        # known well enough. The warm-up's estimate of an iteration only
                        # bows the fewest iterations to the budget (a point of 0.8 s
                        # iterations takes 6, not 30): it is no ceiling, since a timed
                        # iteration can be far faster than a warm-up call was.
                        wanted = math.ceil(s.budget_s / per_call)
                        least = min(s.min_iterations, max(MIN_INTERVAL_SAMPLES, wanted),
                                    s.max_iterations)
                        sampling = (s.precision if s.sampling_target is None
                                    else s.sampling_target)
                        stopped_by = self._run_precise(
                            timed, samples, least, s.max_iterations, sampling or 0.0,
                            timed_here, PRECISE[headline] if sampling else _never, s.budget_s,
                            batch or 1)
                        if s.precision is not None:
                            noise = s.noise_stop and stopped_by == "precision"
                            stop = PrecisionStop(s.precision, headline,
                                                 "noise" if noise else stopped_by)
                    else:
                        self._run_count(timed, samples, s.iterations)
                elapsed = time.perf_counter() - started
            finally:
                if reporter is not None:
                    reporter.stop()  # first: its last line ends where the loop ended
                if pressure is not None:
                    pressure.stop()
        finally:
            if pressure is not None:
                pressure.close()
        wrong = None
        if check is not None:
            dist.barrier(group=self._control)
            wrong = int(check())
            self._synchronize()
        self._keep(Measurement(
            name=name, family=family, nbytes=nbytes, count=count, dtype=_dtype_name(dtype),
            busbw_factor=float(busbw_factor), warmup=warmed, samples=samples.tolist(),
            wrong=wrong, figures=figures, duration_s=s.duration_s,
            pressure=pressure.describe() if pressure is not None else None,
            timed=timed_here, elapsed_s=elapsed, timing=timing, batch_iterations=batch,
            stop=stop, moves_no_data=moves_no_data, headline_statistic=headline,
            stopped_at_sample_cap=capped,
        ))

    def record(
        self,
        samples: list[float],
        *,
        nbytes: int | None = None,
        count: int | None = None,
        dtype: str | torch.dtype | None = None,
        family: str | None = None,
        busbw_factor: float = 1.0,
        wrong: int | None = None,
        name: str | None = None,
        figures: dict[str, Any] | None = None,
        incomplete: tuple[float, str] | None = None,
    ) -> None:
        """Hand in samples (seconds) timed by the test itself, for what `measure` cannot time.

        Every rank must call it with the same number of samples, as with `measure`; the
        controller takes the slowest rank per sample. A rank with nothing of its own to time
        passes the samples it was given by the rank that timed them.

        `incomplete=(bound_s, reason)`: what was measured did not finish within `bound_s`, a
        result rather than a failure; pass `[bound_s]` as the samples. The record is kept and
        its row says so, but it is never compared, gated or plotted (docs/results-schema.md).
        """
        self._check_new(name, nbytes, "record")
        self._keep(Measurement(
            name=name, family=family, nbytes=nbytes, count=count, dtype=_dtype_name(dtype),
            busbw_factor=float(busbw_factor), warmup=0, samples=[float(s) for s in samples],
            wrong=wrong, figures=dict(figures or {}), timing=cuda_timing.TEST_TIMED,
            incomplete=None if incomplete is None else {
                "bound_s": float(incomplete[0]), "reason": str(incomplete[1])},
        ))

    def _keep(self, measurement: Measurement) -> None:
        """One finished measurement, with this rank's peak RSS (and GPU memory) since the
        last one."""
        measurement.peak_rss_bytes = rss.peak_bytes()
        if self._on_cuda:
            measurement.peak_gpu_allocated_bytes = int(
                self._cuda.max_memory_allocated(self.device))
            measurement.peak_gpu_reserved_bytes = int(self._cuda.max_memory_reserved(self.device))
        self.measurements.append(measurement)
        rss.reset_peak()
        self._reset_gpu_peak()

    def _reset_gpu_peak(self) -> None:
        if self._on_cuda:
            self._cuda.reset_peak_memory_stats(self.device)

    def _check_new(self, name: str | None, nbytes: int | None, what: str) -> None:
        if nbytes is not None and nbytes < 0:
            raise ValueError(f"distbench.{what}: nbytes must be >= 0, got {nbytes}")
        if any(m.name == name for m in self.measurements):
            raise ValueError(
                f"distbench.{what}: called twice in one test with the same name; "
                "pass name=... to tell the measurements apart"
            )

    def _timer(self, fn: Callable[[], Any]) -> Callable[[], float]:
        """`fn` timed once per call: seconds, a returned work waited for, the device drained.

        Built once per measurement: whether to drain a device is decided here, so the
        per-iteration path is the clock, the call and two None checks (no device lookup).
        """
        clock = time.perf_counter
        device = self.device
        # A CUDA launch returns before the work is done: a host clock needs the device drained.
        drain = self._cuda.synchronize if self._on_cuda else None

        def timed() -> float:
            start = clock()
            result = fn()
            if result is not None and hasattr(result, "wait"):
                result.wait()
            if drain is not None:
                drain(device)
            return clock() - start

        return timed

    def _synchronize(self) -> None:
        # A CUDA launch returns before the work is done; a host clock needs the device drained.
        if self._on_cuda:
            self._cuda.synchronize(self.device)

    def _batch_timer(self, fn: Callable[[], Any], *,
                     graph: bool) -> tuple[Callable[[], float], float, int]:
        """CUDA batch timing (harness/ranks/cuda_timing.py): the timer of one batch, the seconds a
        batch takes (every rank agreeing, the slowest's), and the iterations per batch."""
        s = self._settings
        cuda = self._cuda
        call = cuda_timing.call_of(fn)
        for _ in repeat(None, s.warmup):
            call()
        self._synchronize()
        probe = cuda_timing.BatchTimer(
            cuda_timing.eager_batch(call, cuda_timing.PROBE_BATCH), cuda_timing.PROBE_BATCH, cuda)
        # Every rank derives the batch size from the same agreed figure: they run as many
        # iterations per batch, so per-batch samples line up across ranks.
        per_call = self._agreed_per_call(probe, [probe() for _ in range(3)])
        batch = cuda_timing.batch_size(s.cuda_batch, per_call)
        if not graph:
            eager = cuda_timing.BatchTimer(cuda_timing.eager_batch(call, batch), batch, cuda)
            return eager, per_call * batch, batch
        timer = cuda_timing.BatchTimer(self._captured(call, batch), batch, cuda)
        # A replay is faster than the eager batch that sized it: the budget and duration loops
        # plan with the replay's own time (the first replay also uploads the graph).
        per_iteration = self._agreed_per_call(timer, [timer() for _ in range(2)])
        return timer, per_iteration * batch, batch

    def _captured(self, call: Callable[[], None], batch: int) -> Callable[[], None]:
        """The batch captured in a CUDA graph; every rank skips if any rank cannot capture."""
        problem = None
        launch: Callable[[], None] | None = None
        try:
            launch = cuda_timing.capture_batch(call, batch, self._cuda)
        except cuda_timing.CaptureError as exc:
            problem = str(exc)
            print(problem, file=sys.stderr)  # the other ranks' skip points here
        ranks = self._ranks_with(problem is not None)
        if problem:
            pytest.skip(problem)
        if ranks or launch is None:
            pytest.skip(f"--distbench-cuda-graph: rank(s) {ranks} could not capture the "
                        "measured call in a CUDA graph (their reason is in their output)")
        return launch

    @property
    def timeout_s(self) -> float | None:
        """The test's --distbench-timeout (None outside a session)."""
        return self._settings.timeout_s

    def fewest_calls(self) -> int:
        """The fewest times `measure` calls its function in this test (fewest_calls)."""
        return fewest_calls(self._settings)

    def repeats_within(self, fn: Callable[[], Any], most: int) -> int:
        """How many back-to-back calls of `fn` one timed iteration should make: `most`, or
        fewer where a budget-bound run could not fit --distbench-min-iterations such
        iterations. Every rank calls it with its own `fn` (a rank off the path with a no-op)
        and gets the same answer: the slowest rank's median of a few untimed calls decides.
        Count and duration modes keep `most`.
        """
        bound = self._budget_bound()
        if bound is None or most <= 1:
            return max(1, most)
        timed = self._timer(fn)
        one = self._agreed_per_call(timed, [timed() for _ in repeat(None, FIT_CALLS)])
        return max(1, min(most, int(bound / max(1, self._settings.min_iterations) / one)))

    def _budget_bound(self) -> float | None:
        """The budget of a budget-bound run (no iteration count, no duration), else None."""
        s = self._settings
        return s.budget_s if s.iterations is None and s.duration_s is None else None

    def _warm_up(self, timed: Callable[[], float]) -> list[float]:
        """The untimed warm-up calls: --distbench-warmup of them, but in a budget-bound run
        no more than WARMUP_SHARE of its budget, every rank running as many (the first
        call's slowest rank decides)."""
        s = self._settings
        if s.warmup == 0:
            return []
        warm = [timed()]
        # Budget mode only: a duration run sizes its stop from the warm-up's median, which
        # one cold call would make wrong (a 0.5 s run stopped at 0.42 s).
        bound = self._budget_bound()
        calls = s.warmup
        if bound is not None and calls > 1:
            first = self._agreed_per_call(timed, warm)
            calls = max(1, min(calls, int(WARMUP_SHARE * bound / first)))
        warm.extend(timed() for _ in repeat(None, calls - 1))
        return warm

    def _agreed_per_call(self, timed: Callable[[], float], warm: list[float]) -> float:
        """Seconds per call every rank agrees on: the slowest rank's warm-up median."""
        if not warm:
            warm = [timed()]
        # The median ignores the loopback stalls; the max over ranks makes every rank agree.
        estimate = torch.tensor([statistics.median(warm)], dtype=torch.float64)
        dist.all_reduce(estimate, op=dist.ReduceOp.MAX, group=self._control)
        return max(float(estimate.item()), 1e-9)

    # -- the timed loops --------------------------------------------------------------------

    def _run_count(self, timed: Callable[[], float], samples: array, iterations: int) -> None:
        append = samples.append
        for _ in repeat(None, iterations):
            append(timed())

    def _run_for(self, timed: Callable[[], float], samples: array, duration_s: float,
                 per_call: float, timed_here: bool) -> bool:
        """Run for `duration_s`, every rank stopping after the same iteration; True if the
        run stopped early at MAX_DURATION_SAMPLES.

        Iterations run in chunks. After each chunk, every rank posts, in a non-blocking
        all-reduce of three numbers on the control group, whether by its own clock the *next*
        chunk will reach the duration, whether the sample cap is near, and how long the chunk
        after it should be (~CHUNK_S at its average pace so far). The all-reduce completes in
        the background while that next chunk runs; at the chunk's end every rank reads the
        same answer (stop once every rank's clock says the duration is reached, or any rank
        nears the cap; the shortest chunk any rank asks for) and stops or goes on together.
        Every timed rank, not any: a rank whose clock started earlier (it left the start
        barrier first, or it has no work and runs a chunk ahead, waiting on its peers) would
        otherwise stop the others short of the duration by their own clocks (CI: a 0.2 s run
        whose working ranks timed 0.17 s). The latest clock costs at most the start skew. A
        rank outside the record's `ranks` does not vote: a chunk ahead, its clock would hold
        the others a chunk past the duration (CI: a 0.2 s run of 0.29 s iterations ran three
        of them). The slowest
        rank sets the pace: a rank with little or nothing to do per iteration (one that is not
        on a message path) cannot ask for chunks its peers would take minutes to run. So the
        loop carries no per-iteration traffic and no blocking synchronization, only one small
        collective per chunk, and the run ends within about one chunk after the duration.
        """
        append = samples.append
        chunk_s = min(CHUNK_S, duration_s / 10)
        size = self._chunk_size(chunk_s, per_call)  # iterations in the chunk about to run
        # [sample cap near, duration not yet reached, -(size after next)], all read as MAX.
        decision = torch.zeros(3, dtype=torch.float64)
        pending = None
        fastest = math.inf  # the fastest chunk's time per iteration so far
        start = time.perf_counter()
        while True:
            began, ran = time.perf_counter(), size
            for _ in repeat(None, size):
                append(timed())
            if pending is not None:
                pending.wait()
                capped, short, proposed = decision.tolist()
                if capped or not short:
                    return bool(capped)
                size = int(-proposed)
            # The average since the start, waits included, sizes the chunk after next: a rank
            # ahead of a slower one is held back at chunk ends.
            now = time.perf_counter()
            elapsed = now - start
            rate = elapsed / len(samples)
            fastest = min(fastest, (now - began) / ran)
            # The next chunk's end is predicted at the fastest pace seen, and never from the
            # first chunk alone (no decision posted yet): a cold first chunk (a connection
            # made, a cache filled) is slower than what follows, and a run stopped on its pace
            # ends early (a 0.5 s message-rate run whose first 64 messages took 0.25 s stopped
            # at 0.43 s). Stopping a chunk later than needed stays within the overrun the
            # sanity rule allows (two of the slowest iterations).
            reached = elapsed >= duration_s or (
                pending is not None and elapsed + size * fastest >= duration_s)
            decision[0] = float(len(samples) + 2 * size > MAX_DURATION_SAMPLES)
            decision[1] = float(timed_here and not reached)
            # Negated: the MAX of the reduction is then the shortest chunk asked for.
            decision[2] = -float(self._chunk_size(chunk_s, rate))
            pending = dist.all_reduce(decision, op=dist.ReduceOp.MAX, group=self._control,
                                      async_op=True)

    def _run_precise(self, timed: Callable[[], float], samples: array, least: int, most: int,
                     precision: float, timed_here: bool,
                     precise: Callable[[Sequence[float], float], bool],
                     budget_s: float, calls_per_sample: int = 1) -> str:
        """Run at least `least` and at most `most` iterations (--distbench-max-iterations),
        stopping once `precise` says the 95 % interval of the record's headline is within
        `precision` ("precision"), once the slowest rank's iterations have lasted `budget_s`
        ("budget"; a chunk past it at most), or at `most` first ("max_iterations"): the same
        in every rank. A sample of a CUDA batch is the mean of `calls_per_sample` calls: the
        budget counts them all.

        The record's samples are the slowest rank's time per iteration, so that is what must
        be precise: after each chunk (~CHUNK_S) the ranks start a non-blocking MAX all-reduce
        of the chunk's times on the control group (an untimed rank adds zeros) and read it
        after the next chunk. Every rank then holds the same per-iteration maxima, takes the
        same decision and sizes the same next chunk from them, without per-iteration traffic.
        """
        append = samples.append
        for _ in repeat(None, least):  # at least one: both settings are counts of 1 or more
            append(timed())
        # The first chunk is sized from these iterations' own maxima (every rank waits for
        # them once): the warm-up's estimate of an iteration can be far from a timed one.
        work, first = self._post_chunk(samples, 0, timed_here)
        work.wait()
        slowest: list[float] = first.tolist()
        pending = None
        while True:
            # A budget met to a rounding is met (200 batches of 2 ms sum to 0.39999... s).
            spent = math.fsum(slowest) * calls_per_sample * (1 + 1e-9)
            stop = ("precision" if precise(slowest, precision)
                    else "budget" if spent >= budget_s else None)
            # Planned again from the timed iterations themselves: the next chunk ends near
            # the budget's end, counting the one still in flight at their mean.
            per_sample = max(statistics.fmean(slowest) * calls_per_sample, 1e-9)
            left = budget_s - spent - (len(samples) - len(slowest)) * per_sample
            size = min(self._chunk_size(CHUNK_S, per_sample), most - len(samples),
                       math.ceil(left / per_sample) if left > 0 else 0)
            if stop is not None or (size <= 0 and pending is None):
                if pending is not None:
                    pending[0].wait()  # every rank posted it; none leaves it in flight
                return stop or ("max_iterations" if len(samples) >= most else "budget")
            posted = len(samples)
            for _ in repeat(None, size):
                append(timed())
            if pending is not None:
                pending[0].wait()
                slowest.extend(pending[1].tolist())
            # Nothing new to post where the budget looked spent: the next pass reads the
            # chunk that was in flight and decides on every iteration's time.
            pending = self._post_chunk(samples, posted, timed_here) if size > 0 else None

    def _post_chunk(self, samples: array, first: int, timed_here: bool) -> tuple[Any, Any]:
        """Start the MAX all-reduce of samples[first:] over the ranks that are timed."""
        chunk = torch.tensor(samples[first:], dtype=torch.float64)
        if not timed_here:
            chunk.zero_()
        return dist.all_reduce(chunk, op=dist.ReduceOp.MAX, group=self._control,
                               async_op=True), chunk

    @staticmethod
    def _chunk_size(chunk_s: float, per_call: float) -> int:
        return max(1, min(1_000_000, int(chunk_s / max(per_call, 1e-9))))

    # -- pressure ---------------------------------------------------------------------------

    def _takes_part(self, ranks: Iterable[int] | None) -> bool:
        if ranks is None:
            return True
        chosen = sorted(set(ranks))
        bad = [r for r in chosen if not (isinstance(r, int) and 0 <= r < self.world_size)]
        if bad or not chosen:
            raise ValueError(f"distbench.measure: ranks {chosen} must be a non-empty set of "
                             f"ranks of a world of {self.world_size}")
        return self.rank in chosen

    def _pressured(self, pressure_ranks: Iterable[int] | None) -> list[int]:
        if pressure_ranks is None:
            return list(range(self.world_size))
        ranks = sorted(set(pressure_ranks))
        bad = [r for r in ranks if not (isinstance(r, int) and 0 <= r < self.world_size)]
        if bad:
            raise ValueError(f"distbench.measure: pressure_ranks {bad} are not ranks of a world "
                             f"of {self.world_size}")
        return ranks

    def _prepare_pressure(self, pressured: list[int]) -> Pressure | None:
        """Set up this rank's pressure (None where it runs none); every rank agrees first.

        Two agreements: every pressured rank checks the memory before any allocates (so one
        rank's allocation cannot fail another's check), then all allocate. A rank that cannot
        makes every rank raise PressureError, before any timed iteration.
        """
        settings = self._settings.pressure
        if settings is None:
            return None
        pressure = None
        problem = None
        if self.rank in pressured:
            local = int(os.environ.get("LOCAL_WORLD_SIZE", self.world_size))
            pressure = Pressure(settings, sharing=min(len(pressured), local),
                                cpus=self._pressure_cpus)
            problem = pressure.check()
        self._agree(problem)
        try:
            if pressure is not None:
                pressure.prepare()
        except PressureError as exc:
            problem = str(exc)
        try:
            self._agree(problem)
        except PressureError:
            if pressure is not None:
                pressure.close()
            raise
        return pressure

    def _ranks_with(self, flag: bool) -> list[int]:
        """The ranks whose `flag` is set, as every rank sees it (one small all-reduce)."""
        flags = torch.zeros(self.world_size, dtype=torch.float64)
        flags[self.rank] = 1.0 if flag else 0.0
        dist.all_reduce(flags, group=self._control)
        return [r for r in range(self.world_size) if flags[r] > 0]

    def _agree(self, problem: str | None) -> None:
        ranks = self._ranks_with(bool(problem))
        if problem:
            raise PressureError(problem)
        if ranks:
            raise PressureError(f"the pressure could not be set up in rank(s) {ranks} "
                                "(their error is above)")


class _Iterations:
    """The live reporter's view of a batch-timed loop: iterations, not samples, done."""

    def __init__(self, samples: array, batch: int) -> None:
        self._samples = samples
        self._batch = batch

    def __len__(self) -> int:
        return len(self._samples) * self._batch


def fewest_calls(s: MeasureSettings) -> int:
    """The fewest times `measure` calls its function under `s`, in every timing mode: the
    warm-up (a budget-bound run's stops at a share of its budget, but after its first call;
    a budget- or duration-bound run without one times one call to size its iterations) and
    the timed iterations (a fixed count; a budget-bound run's at least
    min(--distbench-min-iterations, MIN_INTERVAL_SAMPLES); a duration-bound run's at least
    one). A CUDA batch holds one call or more."""
    if s.duration_s is not None:
        return max(s.warmup, 1) + 1
    if s.iterations is not None:
        return s.warmup + s.iterations
    return 1 + min(s.min_iterations, MIN_INTERVAL_SAMPLES, s.max_iterations)


def _precise_median(samples: Sequence[float], precision: float) -> bool:
    """Whether the 95 % interval of the median of `samples` is within `precision` of it."""
    # Asked after every chunk of a growing list: one sort serves the interval and the median.
    ordered = sorted(samples)
    ranks = median_ranks(len(ordered))
    if ranks is None:
        return False
    middle = statistics.median(ordered)
    low, high = ordered[ranks[0] - 1], ordered[ranks[1] - 1]
    return middle > 0 and (high - low) / 2 / middle <= precision


def _precise_mean(samples: Sequence[float], precision: float) -> bool:
    """Whether the mean of `samples` (a rate's time per iteration) is known within `precision`
    at 95 %: the normal interval of the means of the blocks the record's block bootstrap
    uses (cheap enough to ask after every chunk; the record's own interval is the bootstrap).
    """
    means = block_means(samples)
    if means is None:
        return False
    centre = statistics.fmean(means)
    half = NORMAL_975 * statistics.stdev(means) / math.sqrt(len(means))
    return centre > 0 and half / centre <= precision


def _never(samples: Sequence[float], precision: float) -> bool:
    """--distbench-precision=off: the budget alone ends the run."""
    return False


HEADLINES = ("p50", "mean")
PRECISE = {"p50": _precise_median, "mean": _precise_mean}


def _dtype_name(dtype: str | torch.dtype | None) -> str | None:
    """`float32` for torch.float32 or "float32": the record's `dtype`."""
    return str(dtype).removeprefix("torch.") if dtype is not None else None
