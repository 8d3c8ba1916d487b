"""Load a rank puts on itself during a timed region: busy threads, memory, stderr logging.

The seed's computation options (threads, allocateMb/touchMb/touchOnce, logthreads/logCount,
printEnv), as `--distbench-cpu-threads`, `--distbench-allocate`, `--distbench-touch`,
`--distbench-touch-once`, `--distbench-log-threads`, `--distbench-log-lines` and
`--distbench-print-env`.

Every thread here spends its time in C code that releases the GIL (OpenSSL's PBKDF2, memset,
write(2)), so it takes CPU, memory bandwidth or I/O from the rank, as a computation's native
worker threads would, without also serializing the benchmark loop on the interpreter lock.
Threads are daemons and check a stop event between short calls: they never keep a rank alive
and stop within milliseconds. Memory is an anonymous mapping, unmapped by `close()`.
"""

from __future__ import annotations

import ctypes
import hashlib
import mmap
import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ...units import format_size
from ..wire import PressureSettings

# One busy call lasts about this long: long enough that a busy thread asks for the GIL only
# ~100 times a second, short enough that stop() returns promptly.
BUSY_CALL_S = 0.01
TOUCH_CHUNK_BYTES = 64 * 1024 * 1024
LOG_LINE_BYTES = 80  # the seed's 80-character lines, newline included
STOP_TIMEOUT_S = 5.0


class PressureError(Exception):
    """Pressure that cannot run as asked; the message names the option."""


# -- what the host can give ------------------------------------------------------------------


def _meminfo() -> dict[str, int]:
    values: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if parts:
                    values[key] = int(parts[0]) * 1024  # kB (KiB)
    except (OSError, ValueError):
        pass
    return values


def memory_available() -> int | None:
    """MemAvailable in bytes, None where /proc/meminfo cannot be read."""
    return _meminfo().get("MemAvailable")


def _cgroup_headroom() -> int | None:
    """Bytes this process's cgroup (v2) may still charge, None without a limit."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                base = Path("/sys/fs/cgroup") / line[3:].lstrip("/")
                limit = (base / "memory.max").read_text().strip()
                if limit == "max":
                    return None
                return int(limit) - int((base / "memory.current").read_text().strip())
    except (OSError, ValueError):
        pass
    return None


def _overcommit_strict() -> bool:
    try:
        return Path("/proc/sys/vm/overcommit_memory").read_text().strip() == "2"
    except OSError:
        return False


def memory_problem(settings: PressureSettings, sharing: int) -> str | None:
    """Why the memory asked for cannot be had here (None if it can), naming the option.

    `sharing` is how many pressured ranks on this host allocate the same amount.
    """
    allocate = max(settings.allocate_bytes, settings.touch_bytes)
    if not allocate:
        return None
    info = _meminfo()
    total = info.get("MemTotal", 0) + info.get("SwapTotal", 0)
    option = ("--distbench-allocate" if settings.allocate_bytes >= settings.touch_bytes
              else "--distbench-touch")
    if total and allocate > total:
        return (f"{option}={format_size(allocate).replace(' ', '')}: cannot allocate "
                f"{format_size(allocate)} in a rank: this host has {format_size(total)} of "
                "memory and swap in all")
    if _overcommit_strict() and "CommitLimit" in info:
        room = info["CommitLimit"] - info.get("Committed_AS", 0)
        if allocate * sharing > room:
            return (f"{option}={format_size(allocate).replace(' ', '')}: {sharing} pressured "
                    f"rank(s) x {format_size(allocate)} exceeds the {format_size(max(room, 0))} "
                    "this host still lets processes commit (vm.overcommit_memory=2)")
    touch = settings.touch_bytes * sharing
    available = info.get("MemAvailable")
    headroom = _cgroup_headroom()
    if headroom is not None:
        available = headroom if available is None else min(available, headroom)
    if touch and available is not None and touch > available:
        return (f"--distbench-touch={format_size(settings.touch_bytes).replace(' ', '')}: "
                f"{sharing} pressured rank(s) x {format_size(settings.touch_bytes)} = "
                f"{format_size(touch)} to touch, but only {format_size(max(available, 0))} is "
                "available (MemAvailable, or the cgroup's memory.max)")
    return None


# -- the pressure of one timed region ------------------------------------------------------


class Pressure:
    """Pressure of one rank for one timed region: prepare(), start(), stop(), close()."""

    def __init__(self, settings: PressureSettings, *, sharing: int = 1,
                 cpus: Iterable[int] | None = None) -> None:
        self.settings = settings
        self.sharing = max(1, sharing)
        self.cpus = set(cpus) if cpus else None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._memory: mmap.mmap | None = None
        self._anchor: ctypes.c_char | None = None  # pins the mapping's address for memset
        self._address = 0
        self._busy_rounds = 0
        self.lines_written = 0
        self._lines_lock = threading.Lock()
        self.env: dict[str, str] | None = None

    # -- setup, outside the timed region --------------------------------------------------

    def check(self) -> str | None:
        """Why this pressure cannot run here, before anything is allocated (None: it can)."""
        return memory_problem(self.settings, self.sharing)

    def prepare(self) -> None:
        """Allocate the memory (touching it once if asked); raise PressureError."""
        s = self.settings
        allocate = max(s.allocate_bytes, s.touch_bytes)
        if allocate:
            try:
                self._memory = mmap.mmap(-1, allocate, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            except (OSError, MemoryError, OverflowError) as exc:
                raise PressureError(
                    f"--distbench-allocate={format_size(allocate).replace(' ', '')}: the kernel "
                    f"refused {format_size(allocate)} ({exc})") from None
            self._anchor = ctypes.c_char.from_buffer(self._memory)
            self._address = ctypes.addressof(self._anchor)
            if s.touch_bytes and s.touch_once:
                self._touch_pass(1, self._stop)
        if s.cpu_threads:
            self._busy_rounds = _calibrate_busy()
        if s.print_env:
            self.env = dict(os.environ)

    def start(self) -> None:
        s = self.settings
        for i in range(s.cpu_threads):
            self._spawn(f"distbench-busy-{i}", self._busy)
        if s.touch_bytes and not s.touch_once:
            self._spawn("distbench-touch", self._touch_continuously)
        if s.log_lines:
            threads = min(s.log_threads, s.log_lines)
            for i in range(threads):
                share = s.log_lines // threads + (1 if i < s.log_lines % threads else 0)
                self._spawn(f"distbench-log-{i}", self._log, i, share)

    def stop(self) -> None:
        """Stop every thread (bounded wait; they are daemons either way)."""
        self._stop.set()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._threads = [t for t in self._threads if t.is_alive()]

    def close(self) -> None:
        """Stop and give the memory back to the system."""
        self.stop()
        self._anchor = None  # the exported buffer must go before the mapping can close
        if self._memory is not None and not self._threads:
            self._memory.close()
            self._memory = None

    def describe(self) -> dict[str, Any]:
        """What ran, for the record (sizes in bytes)."""
        s = self.settings
        out: dict[str, Any] = {
            "cpu_threads": s.cpu_threads,
            "allocate_bytes": max(s.allocate_bytes, s.touch_bytes),
            "touch_bytes": s.touch_bytes,
            "touch_once": s.touch_once,
            "log_threads": min(s.log_threads, s.log_lines) if s.log_lines else 0,
            "log_lines": s.log_lines,
            "log_lines_written": self.lines_written,
            "print_env": s.print_env,
        }
        if self.env is not None:
            out["env"] = self.env
        return out

    # -- threads ----------------------------------------------------------------------------

    def _spawn(self, name: str, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=self._run, args=(target, *args), name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _run(self, target: Any, *args: Any) -> None:
        if self.cpus and hasattr(os, "sched_setaffinity"):
            # The rank's own thread may be pinned to one core; its pressure runs where the
            # rank's process may run, as a computation's worker threads would.
            try:
                os.sched_setaffinity(0, self.cpus)
            except OSError:
                pass
        target(*args)

    def _busy(self) -> None:
        rounds = self._busy_rounds
        while not self._stop.is_set():
            hashlib.pbkdf2_hmac("sha256", b"distbench", b"pressure", rounds)

    def _touch_continuously(self) -> None:
        value = 1
        while not self._stop.is_set():
            self._touch_pass(value, self._stop)
            value = value % 255 + 1  # a new value each pass: every pass really writes

    def _touch_pass(self, value: int, stop: threading.Event) -> None:
        offset, end = 0, self.settings.touch_bytes
        while offset < end and not stop.is_set():
            n = min(TOUCH_CHUNK_BYTES, end - offset)
            ctypes.memset(self._address + offset, value, n)  # releases the GIL
            offset += n

    def _log(self, index: int, lines: int) -> None:
        head = f"distbench pressure log thread {index:3d} line "
        written = 0
        for i in range(lines):
            if self._stop.is_set():
                break
            text = f"{head}{i:10d} "
            line = (text + "." * (LOG_LINE_BYTES - 1 - len(text)) + "\n").encode()
            try:
                os.write(2, line)
            except OSError:
                break
            written += 1
        with self._lines_lock:
            self.lines_written += written


def _calibrate_busy() -> int:
    """PBKDF2 rounds that take about BUSY_CALL_S here."""
    rounds = 2000
    start = time.perf_counter()
    hashlib.pbkdf2_hmac("sha256", b"distbench", b"pressure", rounds)
    elapsed = max(time.perf_counter() - start, 1e-6)
    return max(1000, min(10_000_000, int(rounds * BUSY_CALL_S / elapsed)))
