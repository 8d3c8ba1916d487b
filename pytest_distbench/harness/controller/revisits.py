"""Revisits: some points run once more later in the session, so that the session measures its
own run-to-run noise and every figure's ± carries it (results/statistics/noise.py).

A record's stratum is its family, backend, world size, run length (a count, a duration or a
budget) and time scale (noise.time_class): the noise of one stratum is pooled over the runs
of its revisited points, less those whose runs are their own story (a flip, a stall:
noise.own_spread_points). Right after a point, the latest point of its stratum measured at
least REVISIT_GAP_S ago is run again, at most once per REVISIT_GAP_S and `per_group` times
per stratum (--distbench-revisits, 5 by default); a stratum the session left short gets its
revisits at the end of the test loop, cheapest first, unless the session was interrupted or
stopped early. Points whose tables print no ± (registry.prints_interval) are never revisited.
A revisit is not a test: its records only feed the noise and the point's headline (the run
nearest the median of its runs), and a revisit that fails is dropped. A precision-targeted
point stops once more samples cannot narrow its printed interval much
(noise.sampling_target).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from ... import registry
from ...results.document.record import Record
from ...results.document.session_intervals import (
    NOT_REVISITED,
    REVISITS_OFF,
    SESSION,
    SO_FAR,
    Evidence,
    headline,
    is_rate,
    rounds_evidence,
)
from ...results.rendering.fit import wrap
from ...results.statistics.noise import (
    RunNoise,
    sampling_target,
    stopped_by_noise,
    stratum_noise,
    time_class,
)

REVISIT_GAP_S = 2.0
PER_GROUP = 5
# Degrees of freedom below which the noise is too unsure to loosen a run's stop (t > 3.2).
MIN_DOF_TO_STOP = 2
# What a record keeps of its first run when a later run becomes its headline: what was said
# of the test itself, not of one run.
OF_THE_TEST = ("live_reports", "requested_nbytes")


@dataclass
class Point:
    """One test that ran, and its records' runs (record id -> the records of its runs, the
    session's own first)."""

    item: pytest.Function
    settings: Any
    task: Any  # the wire.RunTest, made while the test's fixtures were still set up
    key: Any
    fresh_world_after: bool
    stratum: str  # its first record's: where its revisits are counted
    finished_at: float
    seconds: float  # what its run took: a revisit costs about as much
    runs: dict[str, list[Record]] = field(default_factory=dict)
    revisits: int = 0


class Revisits:
    def __init__(self, per_group: int = PER_GROUP) -> None:
        self.per_group = per_group
        self.points: dict[str, list[Point]] = {}  # stratum -> the points counted there
        self._runs: dict[str, dict[str, list[Record]]] = {}  # stratum -> record id -> runs
        self._stratum_of: dict[str, str] = {}  # record id -> its stratum
        self._strata_of_test: dict[tuple[str, str], set[str]] = {}
        self._noise: dict[str, RunNoise | None] = {}  # stratum -> its pooled noise (cache)
        self._last_revisit: dict[str, float] = {}
        self.runs = 0  # revisits run, and the seconds they took
        self.seconds = 0.0

    # -- before a test ------------------------------------------------------------------------

    def sampling_for(self, item: pytest.Function,
                     settings: Any) -> tuple[float, bool] | None:
        """The sampling target to run `item` with where the noise of its earlier points'
        strata already dominates the user's precision target (the least noisy of them, so
        the stop loosens least), and whether that stop is the noise's; None: the user's."""
        target = getattr(settings, "precision", None)
        noises = [noise for stratum in self._strata_of_test.get(_test_key(item), ())
                  if (noise := self.noise(stratum)) is not None
                  and noise.dof >= MIN_DOF_TO_STOP]
        if target is None or not noises:
            return None
        noise = min(noises, key=lambda n: n.half_log())
        return sampling_target(target, noise), stopped_by_noise(target, noise)

    # -- after a test -------------------------------------------------------------------------

    def after_test(self, session: Any, item: pytest.Function, settings: Any, task: Any,
                   key: Any, records: Sequence[Record], fresh_world_after: bool,
                   seconds: float) -> None:
        """Note the point (`seconds`: what its run in the world took) and revisit an earlier
        point of its stratum when one is due."""
        if not self.per_group:
            return
        measured = [r for r in records if headline(r) is not None
                    and registry.prints_interval(r["family"])]
        if not measured:
            return
        strata = {r["id"]: stratum_of(r, settings) for r in measured}
        self._strata_of_test.setdefault(_test_key(item), set()).update(strata.values())
        stratum = strata[measured[0]["id"]]
        point = Point(item, settings, task, key, fresh_world_after, stratum, time.monotonic(),
                      seconds, {r["id"]: [r] for r in measured})
        due = self._due(stratum)
        self.points.setdefault(stratum, []).append(point)
        for record_id, stratum_here in strata.items():
            self._stratum_of[record_id] = stratum_here
            self._runs.setdefault(stratum_here, {})[record_id] = point.runs[record_id]
            self._noise.pop(stratum_here, None)
        if due is not None:
            self._revisit(session, due)

    def _due(self, stratum: str) -> Point | None:
        """The point to revisit now, if any: the latest one measured at least REVISIT_GAP_S
        ago, once that long has passed since the stratum's last revisit too, so that the
        revisits spread over the session and over the points of a sweep."""
        points = self.points.get(stratum, [])
        now = time.monotonic()
        if (sum(p.revisits for p in points) >= self.per_group
                or now - self._last_revisit.get(stratum, -math.inf) < REVISIT_GAP_S):
            return None
        old = [p for p in _affordable(points)
               if not p.revisits and now - p.finished_at >= REVISIT_GAP_S]
        return old[-1] if old else None

    def _revisit(self, session: Any, point: Point) -> None:
        point.revisits += 1
        began = self._last_revisit[point.stratum] = time.monotonic()
        self.runs += 1
        try:
            records = session.run_item(point.item, point.settings, point.key,
                                       fresh_world_after=point.fresh_world_after,
                                       task=point.task, keep=False)
        except (pytest.fail.Exception, pytest.skip.Exception, pytest.xfail.Exception):
            return  # a revisit that fails only gives no figure; the test itself passed
        finally:
            self.seconds += time.monotonic() - began
        for record in records or ():
            if headline(record) is not None and record["id"] in point.runs:
                point.runs[record["id"]].append(record)
                self._noise.pop(self._stratum_of[record["id"]], None)

    # -- the interval -------------------------------------------------------------------------

    def noise(self, stratum: str) -> RunNoise | None:
        """The stratum's pooled noise, without the points whose runs are their own story."""
        if stratum not in self._noise:
            runs = {rid: _figures(recs) for rid, recs in self._runs.get(stratum, {}).items()}
            self._noise[stratum] = stratum_noise(runs)
        return self._noise[stratum]

    def evidence(self, record: Record, final: bool = False) -> Evidence:
        """What the session knows of `record`'s point now (`final`: at the end of the test
        loop), for session_intervals.with_interval."""
        if record.get("ab"):
            return rounds_evidence(record)
        basis = SESSION if final else SO_FAR
        if not self.per_group:
            return Evidence(basis, noise_missing=REVISITS_OFF)
        stratum = self._stratum_of.get(record["id"])
        if stratum is None:
            return Evidence(basis, noise_missing=NOT_REVISITED)
        runs = _figures(self._runs[stratum][record["id"]])
        own = headline(record)
        if own in runs:
            runs.remove(own)  # the others: the record's own run is its headline
        return Evidence(basis, self.noise(stratum), stratum, tuple(runs), NOT_REVISITED)

    # -- the end of the test loop -------------------------------------------------------------

    def finish(self, session: Any, more: bool = True) -> None:
        """Revisits for the strata the session left short (`per_group` each; none with
        `more` False: an interrupted or stopped session starts none), each revisited point's
        headline made its median run, and a note of what the revisits cost."""
        for points in self.points.values() if more else ():
            order = sorted(_affordable(points), key=lambda p: (p.revisits, p.seconds))
            index = 0
            while sum(p.revisits for p in points) < self.per_group and order:
                self._revisit(session, order[index % len(order)])
                index += 1
        for by_record in self._runs.values():
            for runs in by_record.values():
                _median_run_first(runs)
        if self.runs:
            session.notes.extend(wrap(
                f"distbench: {self.runs} revisit(s) (earlier points run again to measure the "
                f"run-to-run noise every ± carries) took {self.seconds:.1f} s; "
                "--distbench-revisits=N sets how many per stratum"))


def stratum_of(record: Record, settings: Any) -> str:
    """'collectives gloo ws8 0.5 s budget, 100 us-10 ms': the records whose runs share one
    run-to-run noise. A rate over the whole timed region (p2p bandwidth) is a stratum apart
    from the p50 times of its family: pooled with p2p latency's, its ± was 3.4x what its runs
    needed and the latency's 0.66x (benchmarks/bench_coverage.py, docs/user-guide.md)."""
    family = registry.family_of(record["family"]) or record["family"]
    if getattr(settings, "iterations", None):
        length = f"{settings.iterations} iterations"
    elif getattr(settings, "duration", None):
        length = f"{settings.duration:g} s duration"
    else:
        length = f"{settings.budget:g} s budget"
    scale = time_class(record["summary"]["p50"])
    kind = ", rates" if is_rate(record) else ""
    return f"{family} {record['backend']} ws{record['world_size']} {length}, {scale}{kind}"


def _figures(runs: Sequence[Record]) -> list[float]:
    return [value for r in runs if (value := headline(r)) is not None]


def _median_run_first(runs: list[Record]) -> None:
    """Make the session's record (runs[0], the object every reader holds) the run nearest
    the median of the point's runs (the earliest of a tie), keeping what was said of the test
    itself: the headline is the point's value in the session, not whichever run came first."""
    values = _figures(runs)
    if len(values) < 2 or len(values) != len(runs):
        return
    centre = sorted(values)[(len(values) - 1) // 2]
    best = min(range(len(runs)), key=lambda i: (abs(math.log(values[i] / centre)), i))
    if best == 0:
        return
    kept = runs[0]
    chosen = {**runs[best], **{k: kept[k] for k in OF_THE_TEST if k in kept}}
    runs[best] = dict(kept)  # type: ignore[assignment]  # the first run, now one of the others
    kept.clear()
    kept.update(chosen)


def _affordable(points: Sequence[Point]) -> list[Point]:
    """The points a revisit may repeat: none that took more than twice the stratum's median
    (a TCPStore init that met a 5 s name-lookup stall would cost that again)."""
    if not points:
        return []
    ordered = sorted(p.seconds for p in points)
    typical = ordered[(len(ordered) - 1) // 2]
    return [p for p in points if p.seconds <= 2 * typical]


def _test_key(item: pytest.Function) -> tuple[str, str]:
    return (str(item.path), item.originalname)
