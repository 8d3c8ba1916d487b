"""Settings of the harness itself: duration-bound runs, live reports, pressure during a run.

settings.py adds them to the core settings as it adds each family's (registry.py), so each
one gets a CLI option, an ini key, a marker keyword and an attribute of `Settings`.
Torch-free on purpose.
"""

from __future__ import annotations

from typing import Any

import pytest

from .. import units
from ..registry import Setting
from ..units import parse_bounded_duration, parse_count
from .ranks import cuda_timing

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def _optional_duration(text: str) -> float | None:
    return None if text.strip().lower() in ("", "off", "none") else parse_bounded_duration(text)


def _report_every(text: str) -> float | str | None:
    value = text.strip().lower()
    if value == "auto":
        return "auto"
    return _optional_duration(text)


def _optional_size(text: str) -> int:
    return 0 if text.strip().lower() in ("", "0", "off", "none") else units.parse_size(text)


def _cuda_timing(text: str) -> str:
    value = text.strip().lower()
    if value not in cuda_timing.TIMINGS:
        raise ValueError(f"invalid CUDA timing {text!r}: expected batch or each")
    return value


def _cuda_batch(text: str) -> int | None:
    return None if text.strip().lower() in ("", "auto") else parse_count(1)(text)


def parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"invalid switch {text!r}: expected true or false")


SETTINGS: tuple[Setting, ...] = (
    Setting("duration", "--distbench-duration", "off", _optional_duration,
            "run each measurement's timed region for this long (e.g. 30s) instead of a "
            "count or budget, or 'off'", group="length"),
    Setting("report_every", "--distbench-report-every", "auto", _report_every,
            "print a live line this often while a measurement runs ('auto': every 5s in "
            "duration runs, 'off': never)", group="outputs"),
    Setting("cpu_threads", "--distbench-cpu-threads", "0", parse_count(0),
            "busy threads run in each pressured rank during the timed region", group="pressure"),
    Setting("allocate", "--distbench-allocate", "0", _optional_size,
            "memory each pressured rank allocates for the timed region, e.g. 2GiB (0: the "
            "--distbench-touch size)", group="pressure"),
    Setting("touch", "--distbench-touch", "0", _optional_size,
            "how much of the allocated memory is written, all through the timed region or "
            "once with --distbench-touch-once", group="pressure"),
    Setting("touch_once", "--distbench-touch-once", "false", parse_bool,
            "write the touched memory once before the timed region (resident, no ongoing "
            "memory traffic)", flag=True, group="pressure"),
    Setting("log_threads", "--distbench-log-threads", "12", parse_count(1),
            "threads sharing --distbench-log-lines", group="pressure"),
    Setting("log_lines", "--distbench-log-lines", "0", parse_count(0),
            "80-character lines each pressured rank's log threads write to stderr as fast "
            "as they can during the timed region", group="pressure"),
    Setting("print_env", "--distbench-print-env", "false", parse_bool,
            "put the environment of the pressured ranks into the report and the record",
            flag=True, group="pressure"),
    # CUDA worlds only (docs/gpu.md); a CPU world is timed per call on the host whatever
    # these say, and its records say "host-each".
    Setting("cuda_timing", "--distbench-cuda-timing", "batch", _cuda_timing,
            "CUDA worlds: batch (CUDA events around back-to-back iterations, as nccl-tests) "
            "or each (host clock, device synchronized after every call)", group="gpu"),
    Setting("cuda_batch", "--distbench-cuda-batch", "auto", _cuda_batch,
            "iterations per CUDA batch, or 'auto' for as many as last about 2 ms "
            f"({cuda_timing.MIN_BATCH} to {cuda_timing.MAX_BATCH})", group="gpu"),
    Setting("cuda_graph", "--distbench-cuda-graph", "false", parse_bool,
            "capture each CUDA batch in a graph and time its replays (nccl-tests -G), "
            "skipping a world or call that cannot be captured", flag=True, group="gpu"),
)

DEFAULT_REPORT_EVERY_S = 5.0


def report_every_s(settings: Any) -> float | None:
    """The live report interval of a run: 'auto' reports every 5 s in duration runs only."""
    if settings.report_every == "auto":
        return DEFAULT_REPORT_EVERY_S if settings.duration is not None else None
    return settings.report_every


def pressure_used(settings: Any) -> bool:
    return bool(settings.cpu_threads or settings.allocate or settings.touch
                or settings.log_lines or settings.print_env)


def check(settings: Any) -> None:
    """Combinations no single option can refuse on its own."""
    if settings.allocate and settings.touch > settings.allocate:
        raise pytest.UsageError(
            f"--distbench-touch ({units.format_size(settings.touch)}) is larger than "
            f"--distbench-allocate ({units.format_size(settings.allocate)}): only allocated "
            "memory can be touched"
        )
    if settings.touch_once and not settings.touch:
        raise pytest.UsageError(
            "--distbench-touch-once needs --distbench-touch: there is no memory to touch"
        )
    if settings.cuda_graph and settings.cuda_timing != "batch":
        raise pytest.UsageError(
            "--distbench-cuda-graph replays a captured batch: it needs "
            "--distbench-cuda-timing=batch, not each"
        )
    if settings.duration is not None and settings.duration >= settings.timeout:
        raise pytest.UsageError(
            f"--distbench-duration ({settings.duration:g} s) must be shorter than "
            f"--distbench-timeout ({settings.timeout:g} s), or every test would time out"
        )
