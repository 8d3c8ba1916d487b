"""The live lines' words, in the seed's shape (message-rate-bandwidth-benchmark):

    Time: 5.00s Msgs: 38876 Rate: 7775.15msg/s (128.61us) 0.01MB/s TOTALS: Time: 10.00s ...

(TOTALS without the seed's repeated us and MB/s, and none on the first line: report_line), and
the closing line after the test. Pure: harness/controller/live.py prints them as the reports
arrive.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...units import figure_cell
from ..document.record import Record


@dataclass(frozen=True)
class Rate:
    """Messages over a span of time, and what follows from them."""

    seconds: float
    messages: int
    nbytes: int | None

    @property
    def per_second(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    @property
    def us_per_message(self) -> float | None:
        return self.seconds / self.messages * 1e6 if self.messages else None

    @property
    def mbps(self) -> float:
        """Decimal MB/s (1e6 bytes) of payload."""
        return self.per_second * (self.nbytes or 0) / 1e6

    def text(self) -> str:
        us = self.us_per_message
        return (f"Time: {self.seconds:.2f}s Msgs: {self.messages} "
                f"Rate: {self.per_second:.2f}msg/s ({'-' if us is None else f'{us:.2f}'}us) "
                f"{self.mbps:.2f}MB/s")


def report_line(interval: Rate, total: Rate) -> str:
    """The seed's line, less what it says twice: TOTALS keeps time, count and rate (the mean
    time per message and MB/s follow from them), and the first line, whose totals are its
    interval's, has none."""
    if total == interval:
        return interval.text()
    return (f"{interval.text()} TOTALS: Time: {total.seconds:.2f}s Msgs: {total.messages} "
            f"Rate: {total.per_second:.2f}msg/s")


def closing_line(record: Record) -> str:
    """`done: 3510 msgs in 4.968 s = 706.5 msgs/s (the table's: ...)`: a message family's
    totals (figures of its record, the table's cells), else the record's headline figures.
    The live lines' Time is rank 0's clock since the timed region began, the waits at chunk
    ends included, so their last TOTALS may read a little slower than this."""
    from .registered import headline

    f = record.get("figures") or {}
    if f.get("total_messages") and f.get("total_s") and f.get("msgs_per_s"):
        return (f"done: {f['total_messages']} msgs in {figure_cell(f['total_s'])} s = "
                f"{figure_cell(f['msgs_per_s'])} msgs/s (the table's figures: time = the slowest "
                "rank's timed iterations)")
    return f"done: {headline([record]) or 'no figure'} (as in the table)"
