"""The in-rank `distbench` object: how one benchmark is timed on one rank."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from .wire import Measurement, MeasureSettings


class Distbench:
    """Measures a callable in every rank of the world, the same way in each.

    Warm-up calls run untimed; all ranks then agree on the iteration count and meet at a
    barrier, and every timed iteration is timed on its own, so the controller can take the
    slowest rank per iteration (a collective lasts as long as its slowest rank).
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
    ) -> None:
        self.rank = rank
        self.world_size = world_size
        self.backend = backend
        self.device = device
        self.group = group
        self.dtype: torch.dtype = getattr(torch, settings.dtype)
        self._control = control_group
        self._settings = settings
        self.measurements: list[Measurement] = []

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
    ) -> None:
        """Time `fn()`; bandwidth comes from `nbytes`, `check()` counts wrong elements.

        `figures` are the family's own JSON-able values for the record (rank 0's are kept).
        """
        self._check_new(name, nbytes, "measure")
        s = self._settings
        warm = [self._timed_call(fn) for _ in range(s.warmup)]
        iterations = s.iterations if s.iterations is not None else self._calibrate(fn, warm)
        self._synchronize()
        dist.barrier(group=self._control)
        samples = [self._timed_call(fn) for _ in range(iterations)]
        wrong = None
        if check is not None:
            dist.barrier(group=self._control)
            wrong = int(check())
            self._synchronize()
        self.measurements.append(
            Measurement(
                name=name,
                family=family,
                nbytes=nbytes,
                count=count,
                dtype=str(dtype).removeprefix("torch.") if dtype is not None else None,
                busbw_factor=float(busbw_factor),
                warmup=s.warmup,
                samples=samples,
                wrong=wrong,
                figures=dict(figures or {}),
            )
        )

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
    ) -> None:
        """Hand in samples (seconds) timed by the test itself, for what `measure` cannot time.

        Every rank must call it with the same number of samples, as with `measure`; the
        controller takes the slowest rank per sample. A rank with nothing of its own to time
        passes the samples it was given by the rank that timed them.
        """
        self._check_new(name, nbytes, "record")
        self.measurements.append(
            Measurement(
                name=name,
                family=family,
                nbytes=nbytes,
                count=count,
                dtype=str(dtype).removeprefix("torch.") if dtype is not None else None,
                busbw_factor=float(busbw_factor),
                warmup=0,
                samples=[float(s) for s in samples],
                wrong=wrong,
                figures=dict(figures or {}),
            )
        )

    def _check_new(self, name: str | None, nbytes: int | None, what: str) -> None:
        if nbytes is not None and nbytes < 0:
            raise ValueError(f"distbench.{what}: nbytes must be >= 0, got {nbytes}")
        if any(m.name == name for m in self.measurements):
            raise ValueError(
                f"distbench.{what}: called twice in one test with the same name; "
                "pass name=... to tell the measurements apart"
            )

    def _timed_call(self, fn: Callable[[], Any]) -> float:
        start = time.perf_counter()
        result = fn()
        if result is not None and hasattr(result, "wait"):
            result.wait()
        self._synchronize()
        return time.perf_counter() - start

    def _synchronize(self) -> None:
        # A CUDA launch returns before the work is done; a host clock needs the device drained.
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _calibrate(self, fn: Callable[[], Any], warm: list[float]) -> int:
        s = self._settings
        if not warm:
            warm = [self._timed_call(fn)]
        # The median ignores the loopback stalls; the max over ranks makes every rank agree.
        estimate = torch.tensor([statistics.median(warm)], dtype=torch.float64)
        dist.all_reduce(estimate, op=dist.ReduceOp.MAX, group=self._control)
        per_call = max(float(estimate.item()), 1e-9)
        wanted = math.ceil(s.budget_s / per_call)
        return max(s.min_iterations, min(s.max_iterations, wanted))
