"""Revisits: some points run once more later in the session, so that the session measures its
own run-to-run noise and every figure's ± carries it (results/statistics/noise.py).

A record's stratum is its family, backend, world size, run length (a count, a duration or a
budget) and time scale (session_intervals.stratum_of; its point carries it): the noise of one
stratum is pooled over the runs of its revisited points, less those whose runs are their own
story (a flip, a stall: noise.own_spread_points). Right after a point, the latest point of its
stratum measured at least REVISIT_GAP_S ago is run again, at most once per REVISIT_GAP_S and
`per_group` times per stratum (--distbench-revisits, 5 by default); a stratum the session left
short gets its revisits at the end of the test loop, cheapest first, unless the session was
interrupted or stopped early. Points whose tables print no ± (registry.prints_interval) are
never revisited.
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
from ...results.document.session_intervals import (
    NOT_REVISITED,
    REVISITS_OFF,
    SESSION,
    SO_FAR,
    Evidence,
    rounds_evidence,
)
from ...results.rendering.fit import wrap
from ...results.statistics.noise import RunNoise, sampling_target, stopped_by_noise, stratum_noise
from ...settings import Settings
from ..wire import WorldKey
from .points import Point
from .runs import Runner

REVISIT_GAP_S = 2.0
PER_GROUP = 5
# Degrees of freedom below which the noise is too unsure to loosen a run's stop (t > 3.2).
MIN_DOF_TO_STOP = 2


@dataclass
class Visit:
    """One test that ran, as a revisit runs it again, and its points (points.Point: record
    id -> the point, whose runs its revisits join)."""

    item: pytest.Function
    settings: Any
    task: Any  # the wire.RunTest, made while the test's fixtures were still set up
    key: Any
    fresh_world_after: bool
    stratum: str  # its first point's: where its revisits are counted
    finished_at: float
    seconds: float  # what its run took: a revisit costs about as much
    points: dict[str, Point] = field(default_factory=dict)
    revisits: int = 0


class Revisits:
    def __init__(self, per_group: int = PER_GROUP) -> None:
        self.per_group = per_group
        self.visits: dict[str, list[Visit]] = {}  # stratum -> the tests counted there
        self._points: dict[str, dict[str, Point]] = {}  # stratum -> record id -> point
        self._strata_of_test: dict[tuple[str, str], set[str]] = {}
        self._noise: dict[str, RunNoise | None] = {}  # stratum -> its pooled noise (cache)
        self._last_revisit: dict[str, float] = {}
        self._pending: Visit | None = None  # due after the test noted last
        self.runs = 0  # revisits run, and the seconds they took
        self.seconds = 0.0

    # -- before a test ------------------------------------------------------------------------

    def sampling_for(self, item: pytest.Function,
                     settings: Any) -> tuple[float, bool] | None:
        """The sampling target to run `item` with where the noise of its earlier points'
        strata already dominates the user's precision target (the least noisy of them, so
        the stop loosens least), and whether that stop is the noise's; None: the user's."""
        target = getattr(settings, "precision", None)
        if target is None:  # no stop to loosen: the strata's noise is not pooled for it
            return None
        noises = [noise for stratum in self._strata_of_test.get(_test_key(item), ())
                  if (noise := self.noise(stratum)) is not None
                  and noise.dof >= MIN_DOF_TO_STOP]
        if not noises:
            return None
        noise = min(noises, key=lambda n: n.half_log())
        return sampling_target(target, noise), stopped_by_noise(target, noise)

    # -- after a test -------------------------------------------------------------------------

    def note(self, item: pytest.Function, settings: Any, task: Any, key: Any,
             points: Sequence[Point], fresh_world_after: bool, seconds: float) -> None:
        """Note a test's own points (`seconds`: what its run in the world took), and whether
        an earlier test of their stratum is due a revisit (revisit_due runs it)."""
        if not self.per_group:
            return
        measured = [p for p in points if p.first.figure is not None
                    and registry.prints_interval(p.first.record["family"])]
        if not measured:
            return
        self._strata_of_test.setdefault(_test_key(item), set()).update(
            p.stratum for p in measured)
        stratum = measured[0].stratum
        visit = Visit(item, settings, task, key, fresh_world_after, stratum, time.monotonic(),
                      seconds, {p.id: p for p in measured})
        self._pending = self._due(stratum)
        self.visits.setdefault(stratum, []).append(visit)
        for point in measured:
            self._points.setdefault(point.stratum, {})[point.id] = point
            self._noise.pop(point.stratum, None)

    def revisit_due(self, runner: Runner) -> None:
        """Run the revisit the last test noted was due, if any (runs.Once, after the test)."""
        due, self._pending = self._pending, None
        if due is not None:
            self._revisit(runner, due)

    def _due(self, stratum: str) -> Visit | None:
        """The test to revisit now, if any: the latest one measured at least REVISIT_GAP_S
        ago, once that long has passed since the stratum's last revisit too, so that the
        revisits spread over the session and over the points of a sweep."""
        visits = self.visits.get(stratum, [])
        now = time.monotonic()
        if (sum(v.revisits for v in visits) >= self.per_group
                or now - self._last_revisit.get(stratum, -math.inf) < REVISIT_GAP_S):
            return None
        old = [v for v in _affordable(visits)
               if not v.revisits and now - v.finished_at >= REVISIT_GAP_S]
        return old[-1] if old else None

    def _revisit(self, runner: Runner, visit: Visit) -> None:
        visit.revisits += 1
        began = self._last_revisit[visit.stratum] = time.monotonic()
        self.runs += 1
        try:
            again = runner.run_item(visit.item, visit.settings, visit.key,
                                    fresh_world_after=visit.fresh_world_after,
                                    task=visit.task, keep=False)
        except (pytest.fail.Exception, pytest.skip.Exception, pytest.xfail.Exception):
            return  # a revisit that fails only gives no figure; the test itself passed
        finally:
            self.seconds += time.monotonic() - began
        for new in again or ():
            if new.first.figure is not None and new.id in visit.points:
                visit.points[new.id].revisits.append(new.first)
                self._noise.pop(visit.points[new.id].stratum, None)

    # -- the interval -------------------------------------------------------------------------

    def noise(self, stratum: str) -> RunNoise | None:
        """The stratum's pooled noise, without the points whose runs are their own story."""
        if stratum not in self._noise:
            runs = {pid: p.figures() for pid, p in self._points.get(stratum, {}).items()}
            self._noise[stratum] = stratum_noise(runs)
        return self._noise[stratum]

    def evidence(self, point: Point, final: bool = False) -> Evidence:
        """What the session knows of `point` now (`final`: at the end of the test loop), for
        points.record_of."""
        if point.ab is not None:
            return rounds_evidence(point.ab)
        basis = SESSION if final else SO_FAR
        if not self.per_group:
            return Evidence(basis, noise_missing=REVISITS_OFF)
        if self._points.get(point.stratum, {}).get(point.id) is not point:
            return Evidence(basis, noise_missing=NOT_REVISITED)
        return Evidence(basis, self.noise(point.stratum), point.stratum, point.other_figures(),
                        NOT_REVISITED)

    # -- the end of the test loop -------------------------------------------------------------

    def finish(self, runner: Runner, notes: list[str], more: bool = True) -> None:
        """Revisits for the strata the session left short (`per_group` each; none with
        `more` False: an interrupted or stopped session starts none), each revisited point's
        record made its median run's, and a note of what the revisits cost."""
        for visits in self.visits.values() if more else ():
            order = sorted(_affordable(visits), key=lambda v: (v.revisits, v.seconds))
            index = 0
            while sum(v.revisits for v in visits) < self.per_group and order:
                self._revisit(runner, order[index % len(order)])
                index += 1
        for by_id in self._points.values():
            for point in by_id.values():
                point.lead_with_median()
        if self.runs:
            notes.extend(wrap(
                f"distbench: {self.runs} revisit(s) (earlier points run again to measure the "
                f"run-to-run noise every ± carries) took {self.seconds:.1f} s; "
                "--distbench-revisits=N sets how many per stratum"))


def _affordable(visits: Sequence[Visit]) -> list[Visit]:
    """The tests a revisit may repeat: none that took more than twice the stratum's median
    (a TCPStore init that met a 5 s name-lookup stall would cost that again)."""
    if not visits:
        return []
    ordered = sorted(v.seconds for v in visits)
    typical = ordered[(len(ordered) - 1) // 2]
    return [v for v in visits if v.seconds <= 2 * typical]


def _test_key(item: pytest.Function) -> tuple[str, str]:
    return (str(item.path), item.originalname)


class Once:
    """runs.Schedule of every mode but A/B: a test's own run, then a revisit of an earlier
    test when one is due (`revisits` None where the mode cannot run a point again)."""

    def __init__(self, revisits: Revisits | None) -> None:
        self.revisits = revisits

    def run_test(self, runner: Runner, item: pytest.Function, settings: Settings,
                 key: WorldKey, fresh_world_after: bool) -> list[Point]:
        points = runner.run_item(item, settings, key, fresh_world_after=fresh_world_after)
        if self.revisits is not None:
            self.revisits.revisit_due(runner)
        return points
