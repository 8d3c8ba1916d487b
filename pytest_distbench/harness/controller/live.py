"""Live reports of a running measurement, printed as they arrive (their words:
results/rendering/live.py).

The rank's end is ranks/progress.py: in rank 0, a `Reporter` thread wakes once per interval (a
timed wait, no polling) and sends a `Progress` message up the rank's pipe. In the
controller, a `LivePrinter` keeps each one for the record and, under -v, turns it into a line
and writes it through pytest's terminal reporter with output capture suspended, so the line
appears while the test runs, with or without -s; after the test it writes the measurement's
totals as the table shows them.

In launcher mode rank 0 is the reporting process itself: its Reporter thread hands each report
to a LivePrinter in the same process, which writes to a copy of the terminal's file descriptor
taken before any test ran (`terminal_stream`). Output capture is never touched from that thread
(suspending it there would race with the main thread, which is inside the test body).
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any, TextIO

from ...results.document.record import Record
from ...results.rendering.live import Rate, closing_line, report_line
from ..wire import Progress


class LivePrinter:
    """Keeps rank 0's Progress reports of one test; under -v prints them as they arrive, and
    then the measurement's totals as the table prints them. Without -v nothing is printed:
    a line in the middle of pytest's progress line would break it after every test."""

    def __init__(self, config: Any, stream: TextIO | None = None, shown: bool = True) -> None:
        """`shown`: False keeps the reports and prints nothing (a revisit's)."""
        shown = shown and config.get_verbosity() >= 1
        self._terminal = config.pluginmanager.get_plugin("terminalreporter") if shown else None
        self._capture = config.pluginmanager.get_plugin("capturemanager")
        self._stream = stream  # set: write there, from any thread, capture left alone
        self._last: dict[str | None, Progress] = {}
        # Per measurement name: [elapsed_s, iterations, delay_s] of each report (the record's
        # live_reports); delay = arrival here - the moment the interval closed in rank 0.
        self.reports: dict[str | None, list[dict[str, float]]] = {}

    def __call__(self, progress: Progress) -> None:
        arrived = time.monotonic()
        previous = self._last.get(progress.name)
        self._last[progress.name] = progress
        line = progress_line(progress, previous)
        self.reports.setdefault(progress.name, []).append({
            "time_s": progress.elapsed_s,
            "iterations": progress.iterations,
            "delay_s": arrived - progress.due,
        })
        self._write(line, name=progress.name)

    def finish(self, records: list[Record]) -> None:
        """After the test: each reported measurement's totals, the figures its table row
        shows, where the live lines count otherwise."""
        for name, reports in self.reports.items():
            # judge() hands each record its measurement's own list of reports.
            for record in records:
                if record.get("live_reports") is reports:
                    self._write(closing_line(record), name=name)

    def _write(self, line: str, *, name: str | None) -> None:
        if self._terminal is None:
            return
        line = f"  live{f'[{name}]' if name else ''}: {line}"
        if self._stream is not None:
            text = ""
            if self._terminal.currentfspath:
                # The reporter is mid-line ("test_x.py "): end it; it starts its next result
                # on a fresh line, as after ensure_newline().
                self._terminal.currentfspath = None
                text += "\n"
                # ...and pads its progress column from an empty line, as after a newline
                # written through it (private attribute, set only where it exists).
                writer = getattr(self._terminal, "_tw", None)
                if isinstance(getattr(writer, "_current_line", None), str):
                    writer._current_line = ""  # type: ignore[union-attr]
            self._stream.write(text + line + "\n")
            self._stream.flush()
            return
        suspended = (self._capture.global_and_fixture_disabled() if self._capture is not None
                     else contextlib.nullcontext())
        with suspended:
            self._terminal.ensure_newline()
            self._terminal.write_line(line)
            self._terminal.flush()


def terminal_stream() -> TextIO | None:
    """A file on a copy of descriptor 1, taken now (before any test, so not yet redirected by
    pytest's fd capture): writes to it reach the terminal while a test's output is captured.
    None where there is no descriptor 1."""
    try:
        return os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8", errors="replace")
    except OSError:
        return None


def progress_line(progress: Progress, previous: Progress | None) -> str:
    """The seed's line for one report, given the measurement's report before it."""
    k = progress.messages_per_iteration
    before_s = previous.elapsed_s if previous else 0.0
    before_n = previous.iterations if previous else 0
    interval = Rate(progress.elapsed_s - before_s, (progress.iterations - before_n) * k,
                    progress.nbytes)
    total = Rate(progress.elapsed_s, progress.iterations * k, progress.nbytes)
    return report_line(interval, total)
