"""The work a replaying rank does in the gaps between its calls, standing for what the original
did there (timeline.py measures the gaps; step.py places them). Runs in the ranks.

- idle: the rank sleeps (a program waiting on data, a host doing nothing);
- cpu: matrix products until the gap's time has passed: compute with memory traffic that
  shares the cores (and the memory bus) with the communication, as the forward and backward
  of a CPU step do. The clock is read after each chunk of products (at most CHUNK_S of them,
  as many as the calibration says), so a gap lasts its recorded time, one product more or
  less, whatever the load: a fixed number of products calibrated under one load would last
  another time under the next (this machine's load moves by 2x within minutes), and the gap
  recorded is a time, taken under the original's own load;
- gpu: a kernel that spins on the device for the gap (torch.cuda._sleep, in cycles), queued
  on the current stream, so a collective issued after it starts when the original's would.

A busy worker's unit is calibrated once per world: every rank of the world runs the calibration at
the same time (the load the replay itself will put on the cores), and the result is kept for
the world's later replays.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from ...units import format_duration_us

MODES = ("busy", "cpu", "gpu", "idle", "off")
DEFAULT = "busy"
MATRIX = 64  # the cpu unit: a 64 x 64 float32 product (0.5 Mflop, 48 KiB of operands)
CALIBRATION_S = 0.05  # each calibration's time, in every rank at once
CHUNK_S = 0.001  # the cpu worker reads the clock about this often


def parse_mode(text: str) -> str:
    value = text.strip().lower()
    if value not in MODES:
        raise ValueError(f"invalid gap mode {text!r}: expected one of {', '.join(MODES)}")
    return value


def resolve(mode: str, device_type: str) -> str:
    """The worker a mode stands for in a world on `device_type`: busy is the GPU's in a CUDA
    world, the CPU's elsewhere. ValueError for gpu outside a CUDA world."""
    if mode == "busy":
        return "gpu" if device_type == "cuda" else "cpu"
    if mode == "gpu" and device_type != "cuda":
        raise ValueError(f"gap mode gpu needs a CUDA world; this one runs on {device_type}")
    return mode


def seconds_per_unit(run: Callable[[int], None], clock: Callable[[], float] = time.perf_counter,
                     budget_s: float = CALIBRATION_S, rounds: int = 5) -> float:
    """Seconds one unit of `run(n)` (n units, finished when it returns) takes: from batches of
    n and 2n units, so the fixed cost of a batch (a kernel launch, a synchronization) cancels;
    n grows until a batch lasts budget_s / (3 rounds). Each batch size's fastest of `rounds`
    runs is taken: a loaded machine only ever adds time (a descheduled batch), never takes it."""
    n = 1
    while True:
        t0 = clock()
        run(n)
        if clock() - t0 >= budget_s / (3 * rounds) or n >= 1 << 40:
            break
        n *= 2
    single, double = math.inf, math.inf
    for _ in range(rounds):
        t0 = clock()
        run(n)
        t1 = clock()
        run(2 * n)
        t2 = clock()
        single, double = min(single, t1 - t0), min(double, t2 - t1)
    per_unit = (double - single) / n
    # Noise larger than the work's growth: the larger batch's mean, fixed cost included.
    return per_unit if per_unit > 0 else max(double, 1e-12) / (2 * n)


class Worker:
    """Fills a gap of `seconds` (`fill`), as its mode does; `describe()` says how. `blocking`:
    the host is held for the gap (idle, cpu), not only a queue (gpu)."""

    mode = "off"
    blocking = False

    def fill(self, seconds: float) -> None:
        return None

    def describe(self) -> str:
        return "none: the calls back to back, as captured"


class Idle(Worker):
    mode = "idle"
    blocking = True

    def __init__(self, sleep: Callable[[float], None] = time.sleep) -> None:
        self._sleep = sleep

    def fill(self, seconds: float) -> None:
        if seconds > 0:
            self._sleep(seconds)

    def describe(self) -> str:
        return "idle: each rank sleeps for each gap"


class Busy(Worker):
    """A busy worker: `run(n)` does n units, one unit lasting `unit_s` (calibrated). Without a
    clock a gap is its length in units, rounded to the nearest (the GPU's cycles: a kernel
    queued, the host goes on); with one, units run in chunks of about CHUNK_S until the gap's
    time has passed (the nearest unit boundary to it, at the pace the last chunk ran)."""

    def __init__(self, mode: str, run: Callable[[int], None], unit_s: float, what: str,
                 clock: Callable[[], float] | None = None) -> None:
        self.mode, self._run, self.unit_s, self._what = mode, run, unit_s, what
        self._clock = clock
        self.blocking = clock is not None

    def units(self, seconds: float) -> int:
        return max(0, round(seconds / self.unit_s))

    def fill(self, seconds: float) -> None:
        if self._clock is None:
            n = self.units(seconds)
            if n:
                self._run(n)
            return
        # The unit's time as this gap finds it (the load moves): the last chunk sized by it.
        clock, per = self._clock, self.unit_s
        now = clock()
        deadline = now + seconds
        while True:
            n = min(max(1, round(CHUNK_S / per)), max(0, round((deadline - now) / per)))
            if n <= 0:
                return
            self._run(n)
            before, now = now, clock()
            per = max((now - before) / n, 1e-12)

    def describe(self) -> str:
        return (f"{self.mode}: {self._what}, {format_duration_us(self.unit_s)} us a "
                "unit, calibrated once per world with every rank at once")


def cpu_run(device: Any) -> Callable[[int], None]:
    import torch

    a = torch.rand(MATRIX, MATRIX, device=device)
    b = torch.rand(MATRIX, MATRIX, device=device)
    c = torch.empty(MATRIX, MATRIX, device=device)

    def run(n: int) -> None:
        for _ in range(n):
            torch.mm(a, b, out=c)
    return run


def gpu_run() -> Callable[[int], None]:
    import torch

    def run(cycles: int) -> None:
        torch.cuda._sleep(cycles)
        torch.cuda.current_stream().synchronize()
    return run


def gpu_fill() -> Callable[[int], None]:
    import torch

    return lambda cycles: torch.cuda._sleep(cycles)  # queued: the host goes on


class Paced:
    """A worker's gaps of one iteration kept to their recorded sum: a gap that ran over (a
    sleep woken late, a chunk of work descheduled under load) shortens the next ones by as
    much, so the overruns do not add up over the dozens of gaps of a step. `reset()` at each
    iteration's start. For a worker that only queues work (gpu) the gaps are passed as is."""

    def __init__(self, worker: Worker, clock: Callable[[], float] = time.perf_counter) -> None:
        self.worker, self._clock, self.debt = worker, clock, 0.0

    def reset(self) -> None:
        self.debt = 0.0

    def __call__(self, seconds: float) -> None:
        if not self.worker.blocking:
            self.worker.fill(seconds)
            return
        target = seconds - self.debt
        if target <= 0:
            self.debt = -target
            return
        start = self._clock()
        self.worker.fill(target)
        self.debt = self._clock() - start - target


_CALIBRATED: dict[tuple[str, str], float] = {}


def worker(mode: str, device: Any, barrier: Callable[[], None]) -> Worker:
    """The worker of a resolved mode in this rank; a busy one calibrated once per world (every
    rank calls this together: `barrier` lines them up before they calibrate at once)."""
    if mode == "off":
        return Worker()
    if mode == "idle":
        return Idle()
    key = (mode, str(device))
    if mode == "cpu":
        run = cpu_run(device)
        if key not in _CALIBRATED:
            barrier()
            _CALIBRATED[key] = seconds_per_unit(run)
        return Busy("cpu", run, _CALIBRATED[key],
                     f"{MATRIX} x {MATRIX} float32 matrix products until the gap's time has "
                     "passed", clock=time.perf_counter)
    if key not in _CALIBRATED:
        barrier()
        _CALIBRATED[key] = seconds_per_unit(gpu_run())
    return Busy("gpu", gpu_fill(), _CALIBRATED[key], "torch.cuda._sleep, in GPU cycles")
