"""Rank 0's end of the live reports (controller/live.py prints them): a thread that wakes once
per interval (a timed wait, no polling), reads how many iterations the timed loop has appended
so far -- the loop itself does no extra work per iteration -- and sends a `Progress` message.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sized
from typing import Any

from ..wire import Progress

# A measurement that ends between two intervals reports the part since the last line only if
# it is at least this fraction of an interval (a 3 ms tail would print a meaningless rate).
MIN_FINAL_FRACTION = 0.1
JOIN_TIMEOUT_S = 5.0


class Reporter:
    """Rank 0's reporter thread for one timed region."""

    def __init__(self, send: Callable[[Progress], None], every_s: float, samples: Sized, *,
                 name: str | None, nbytes: int | None, figures: dict[str, Any]) -> None:
        self._send = send
        self._every = every_s
        self._samples = samples
        self._name = name
        self._nbytes = nbytes
        self._per_iteration = messages_per_iteration(figures)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="distbench-reporter",
                                        daemon=True)
        self._start = 0.0
        self._index = 1  # the interval the next report closes
        self._last = 0.0  # elapsed time of the last report

    def start(self) -> None:
        self._start = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        """End of the timed region: report the interval that is due or the tail, then stop."""
        now = time.monotonic()
        self._stop.set()
        self._thread.join(JOIN_TIMEOUT_S)
        if self._thread.is_alive():
            return
        due = self._start + self._index * self._every
        if now >= due or (now - self._start) - self._last >= MIN_FINAL_FRACTION * self._every:
            self._report(min(now, due), now, final=True)

    def _loop(self) -> None:
        while True:
            due = self._start + self._index * self._every
            if self._stop.wait(max(0.0, due - time.monotonic())):
                return
            self._report(due, time.monotonic(), final=False)

    def _report(self, due: float, now: float, *, final: bool) -> None:
        iterations = len(self._samples)  # the loop's own append count; no per-iteration work
        elapsed = now - self._start
        try:
            self._send(Progress(name=self._name, index=self._index, elapsed_s=elapsed,
                                iterations=iterations, messages_per_iteration=self._per_iteration,
                                nbytes=self._nbytes, due=due, sent=time.monotonic(),
                                final=final))
        except (OSError, ValueError):
            pass  # the controller is gone; the rank's lifeline ends it
        self._index += 1
        self._last = elapsed


def messages_per_iteration(figures: dict[str, Any]) -> int:
    value = figures.get("messages_per_iteration", 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"figures['messages_per_iteration'] must be a positive int, got {value!r}")
    return value
