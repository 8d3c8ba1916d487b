"""The machine's own limits, measured once per process: what the sanity rules hold figures to.

Measured in the process that judges the records (the controller, or rank 0 under a launcher),
on first use, in well under a second: the fastest memory copy torch makes, and the shortest
round trip of one byte between two processes through the kernel. A GPU's copy rate is
measured by the ranks of a CUDA world when it starts (ranks/device_probe.py: the controller
never touches a GPU) and noted here from what they report.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from ...results.sanity import MachineBounds

# In cache and well out of it: the faster of the two bounds every host transfer. The small
# copy is repeated many times (a few ms in all): on a loaded machine any one copy may be
# preempted, and a bound measured low would call a real figure impossible.
COPY_SIZES = ((1 << 20, 50), (64 << 20, 5))  # (bytes, repeats)
ROUND_TRIPS = 2000
ECHO_TIMEOUT_S = 20.0

# The echo child: reads one byte, writes it back, until its input closes.
_ECHO = (
    "import os\n"
    "while True:\n"
    "    b = os.read(0, 1)\n"
    "    if not b:\n"
    "        break\n"
    "    os.write(1, b)\n"
)


_best: list[MachineBounds] = []  # the best bounds measured so far in this process
_device_copies: list[float] = []  # what the ranks of CUDA worlds measured (GB/s)
_gpus: list[str] = []  # the GPUs' names the ranks reported, first seen first


def note_rank_facts(infos: Iterable[dict[str, Any]]) -> None:
    """Keep the GPU copy rates the ranks of a new world measured (rank_environment's
    `device_copy_gbps`)."""
    for info in infos:
        if info.get("gpu") and info["gpu"] not in _gpus:
            _gpus.append(str(info["gpu"]))
        gbps = info.get("device_copy_gbps")
        if isinstance(gbps, (int, float)) and not isinstance(gbps, bool) and gbps > 0:
            _device_copies.append(float(gbps))


def gpu_names() -> list[str]:
    """The names of the GPUs the ranks of this session's CUDA worlds drove."""
    return list(_gpus)


def machine_bounds() -> MachineBounds:
    """The machine's limits, measured on first use, with the GPUs' copy rate noted so far."""
    if not _best:
        _best.append(_measure())
    return _with_device(_best[0])


def _with_device(bounds: MachineBounds) -> MachineBounds:
    # The fastest any rank measured: a bound is the best the hardware showed (as the host's
    # copy), so a slow probe in one rank never calls another rank's real figure impossible.
    return replace(bounds, device_copy_gbps=max(_device_copies, default=None))


def refined_bounds() -> MachineBounds:
    """Measured again, keeping the best of every measurement: a figure is called impossible
    only against limits that a fresh measurement confirms (a loaded machine can make one
    measurement of its own round trip slow)."""
    old, new = machine_bounds(), _measure()
    _best[0] = MachineBounds(copy_gbps=_best_of(max, old.copy_gbps, new.copy_gbps),
                             round_trip_s=_best_of(min, old.round_trip_s, new.round_trip_s))
    return _with_device(_best[0])


def measured_bounds() -> MachineBounds | None:
    """The bounds if this process measured them (for the results file), else None."""
    return _with_device(_best[0]) if _best else None


def _measure() -> MachineBounds:
    return MachineBounds(copy_gbps=copy_gbps(), round_trip_s=shortest_round_trip_s())


def _best_of(pick: Callable[..., float], a: float | None, b: float | None) -> float | None:
    known = [x for x in (a, b) if x is not None]
    return pick(known) if known else None


def copy_gbps() -> float | None:
    """The fastest of the copies of COPY_SIZES (each repeated), decimal GB/s."""
    try:
        import torch
    except ImportError:
        return None
    best = 0.0
    for size, repeats in COPY_SIZES:
        src = torch.ones(size, dtype=torch.uint8)
        dst = torch.empty_like(src)
        for _ in range(repeats):
            began = time.perf_counter()
            dst.copy_(src)
            took = time.perf_counter() - began
            if took > 0:
                best = max(best, size / took / 1e9)
    return best or None


def shortest_round_trip_s() -> float | None:
    """The shortest of ROUND_TRIPS one-byte round trips to a child process over pipes."""
    try:
        child = subprocess.Popen(
            [sys.executable, "-S", "-c", _ECHO], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, bufsize=0)
    except OSError:
        return None
    assert child.stdin is not None and child.stdout is not None
    write_fd, read_fd = child.stdin.fileno(), child.stdout.fileno()
    best = float("inf")
    deadline = time.monotonic() + ECHO_TIMEOUT_S
    try:
        for _ in range(ROUND_TRIPS):
            began = time.perf_counter()
            os.write(write_fd, b"x")
            if not os.read(read_fd, 1):
                return None
            best = min(best, time.perf_counter() - began)
            if time.monotonic() > deadline:
                break
    except OSError:
        return None
    finally:
        child.stdin.close()
        try:
            child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        child.stdout.close()
    return best if best < float("inf") else None
