"""A point and its runs: what the session measured of one benchmark (one record id), and the
one function that makes its JSON record from it.

A `Run` is one execution of a test in one world, for one of its measure() calls: the record
its ranks' measurements made (controller/records.py, never written to again) and what the
controller judged of it. A `Point` owns its runs (the first, its revisits; an A/B point's
candidate rounds, merged) and the facts of the test (what it printed live, the sizes asked
for). `record_of(point, evidence)` is the record every reader sees: the session's views call
it with the evidence so far, the end of the test loop once (`Points.seal`).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ...results.document.record import ABField, OfPeak, Record
from ...results.document.session_intervals import Evidence, headline, with_interval
from ...results.document.summary import summary_of
from ...results.peaks import NOT_JUDGED


@dataclass(frozen=True)
class Run:
    """One execution of one measure() call in one world."""

    record: Record  # as records.py made it (its typed facts: timing, headline_statistic, ...)
    invalid: tuple[str, ...] = ()  # the physical sanity rules it broke (results/sanity.py)
    of_peak: OfPeak | None | str = NOT_JUDGED  # its share of the peak (results/peaks.share)
    variant: str = ""  # A/B mode's "baseline" or "candidate"

    @property
    def figure(self) -> float | None:
        """The figure its printed interval belongs to (session_intervals.headline); None for
        an invalid run."""
        return None if self.invalid else headline(self.record)


@dataclass
class Point:
    """One benchmark of the session: the facts of its test and its runs."""

    id: str
    first: Run
    live_reports: list[Any] | None = None  # what the test printed while it ran
    requested_nbytes: list[int] | None = None  # the sizes asked for, where merged
    stratum: str = ""  # whose run-to-run noise its ± takes (session_intervals.stratum_of)
    revisits: list[Run] = field(default_factory=list)  # controller/revisits.py
    ab: ABField | None = None  # an A/B point: `first` is its candidate rounds merged
    lead: int = 0  # which run the record shows: the first, until the median is chosen
    sealed: Record | None = None  # its record, once the test loop ended

    @property
    def runs(self) -> list[Run]:
        return [self.first, *self.revisits]

    def figures(self) -> list[float]:
        return [value for run in self.runs if (value := run.figure) is not None]

    def other_figures(self) -> tuple[float, ...]:
        """The figures of its runs other than the one its record shows."""
        return tuple(value for i, run in enumerate(self.runs)
                     if i != self.lead and (value := run.figure) is not None)

    def lead_with_median(self) -> None:
        """The record shows the run nearest the median of the point's runs (the earliest of a
        tie): the headline is the point's value in the session, not whichever run came
        first. Only where every run has a figure."""
        values = self.figures()
        if len(values) < 2 or len(values) != len(self.runs):
            return
        centre = sorted(values)[(len(values) - 1) // 2]
        self.lead = min(range(len(values)),
                        key=lambda i: (abs(math.log(values[i] / centre)), i))


def record_of(point: Point, evidence: Evidence | None = None) -> Record:
    """The point's JSON record: its leading run's, with the test's facts and, given the
    session's `evidence`, its printed interval (session_intervals.with_interval). A sealed
    point's record is the one the seal made. Pure: a new record each call."""
    if point.sealed is not None:
        return dict(point.sealed)  # type: ignore[return-value]
    run = point.runs[point.lead]
    record: Record = dict(run.record)  # type: ignore[assignment]
    if point.live_reports:
        record["live_reports"] = point.live_reports
    if run.invalid:
        record["invalid"] = list(run.invalid)
    if run.of_peak != NOT_JUDGED:
        record["of_peak"] = run.of_peak  # type: ignore[typeddict-item]
    if point.requested_nbytes:
        record["requested_nbytes"] = point.requested_nbytes
    if point.ab is not None:
        record["ab"] = point.ab
    return record if evidence is None else with_interval(record, evidence)


def merged_rounds(rounds: list[Run]) -> Run:
    """One run of the same benchmark measured in several rounds (A/B mode's candidate):
    samples in time order, summarised once; what round 1 was judged keeps."""
    records = [run.record for run in rounds]
    first = dict(records[0])
    first.update(summary_of(first, [[s for r in records for s in r["rank_samples"][rank]]  # type: ignore[arg-type]
                                    for rank in range(len(first["rank_samples"]))]))
    if first.get("wrong") is not None:
        first["wrong"] = sum(r["wrong"] or 0 for r in records)
    elapsed = [r.get("elapsed_s") for r in records]
    first.pop("elapsed_s", None)
    # The rounds' timed regions, one after another, per rank (a duration run's rounds were
    # each held to the duration when they were judged).
    if all(elapsed) and first.get("duration_s") is None:
        first["elapsed_s"] = [None if any(e[rank] is None for e in elapsed)  # type: ignore[index]
                              else sum(e[rank] for e in elapsed)  # type: ignore[index]
                              for rank in range(len(elapsed[0]))]  # type: ignore[arg-type]
    return Run(first, rounds[0].invalid, rounds[0].of_peak, rounds[0].variant)  # type: ignore[arg-type]


class Points:
    """The session's points, in the order the results show them: the one way a record enters
    the session."""

    def __init__(self) -> None:
        self._entries: list[tuple[int, int, Point]] = []  # (position, arrival, point)

    def add(self, points: Iterable[Point], position: int = 0) -> None:
        """Keep `points`; `position`: where they go among the others (an xdist worker's, by
        the test's place in the collection), after those already there."""
        for point in points:
            bisect.insort(self._entries, (position, len(self._entries), point),
                          key=lambda entry: entry[:2])

    def __iter__(self) -> Iterator[Point]:
        return (point for _, _, point in self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def records(self) -> list[Record]:
        return [record_of(point) for point in self]

    def seal(self, evidence_of: Callable[[Point], Evidence]) -> list[Record]:
        """The end of the test loop: every point not sealed yet gets its record, once, with
        its printed interval (local, launcher and A/B mode alike; an xdist worker's come
        sealed). Those sealed now, for the pytest_distbench_record hooks."""
        sealed = []
        for point in self:
            if point.sealed is None:
                point.sealed = record_of(point, evidence_of(point))
                sealed.append(point.sealed)
        return sealed
