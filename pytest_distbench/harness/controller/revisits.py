"""Revisits: some points run once more later in the session, so that the session measures its
own run-to-run noise and every figure's ± carries it (results/statistics/noise.py).

Points are grouped by family, backend, world size and run length (a count, a duration or a
budget): the noise of one group is pooled over the runs of its revisited points. Right after
a point of a group, the latest point of that group measured at least REVISIT_GAP_S ago is
run again, at most once per REVISIT_GAP_S and `per_group` times (--distbench-revisits, 4 by
default); a group the session left short gets its revisits at the end of the test loop. A
revisit is not a test: its records only feed the noise, and a revisit that fails is dropped.
A precision-targeted point of a group whose noise is already known stops once more samples
cannot narrow its printed interval much (noise.sampling_target).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from ... import registry
from ...results.document.record import Record
from ...results.document.session_intervals import NOT_MEASURED, apply_noise, headline
from ...results.rendering.fit import wrap
from ...results.statistics.noise import (
    RunNoise,
    pooled_run_noise,
    sampling_target,
    stopped_by_noise,
)
from .outcome import prepare

REVISIT_GAP_S = 2.0
PER_GROUP = 4
# Degrees of freedom below which the noise is too unsure to loosen a run's stop (t > 3.2).
MIN_DOF_TO_STOP = 2
UNDER_LAUNCHER = "run-to-run noise not measured under a launcher"


@dataclass
class Point:
    """One test that ran, and the figures of its records' runs (record id -> figures)."""

    item: pytest.Function
    settings: Any
    task: Any  # the wire.RunTest, made while the test's fixtures were still set up
    key: Any
    fresh_world_after: bool
    group: str
    finished_at: float
    seconds: float  # what its run took: a revisit costs about as much
    runs: dict[str, list[float]] = field(default_factory=dict)
    revisits: int = 0


@dataclass
class Stop:
    """The precision target a record was run with: the user's, and whether the run's own
    stop was loosened because the noise dominates."""

    target: float | None
    by_noise: bool


class Revisits:
    def __init__(self, per_group: int = PER_GROUP) -> None:
        self.per_group = per_group
        self.points: dict[str, list[Point]] = {}
        self._point_of: dict[str, Point] = {}  # record id -> the point that measured it
        self._group_of_test: dict[tuple[str, str], str] = {}
        self._stops: dict[str, Stop] = {}
        self._pending_stop: Stop | None = None
        self._last_revisit: dict[str, float] = {}
        self.runs = 0  # revisits run, and the seconds they took
        self.seconds = 0.0

    # -- before a test ------------------------------------------------------------------------

    def settings_for(self, item: pytest.Function, settings: Any) -> Any:
        """The settings to run `item` with: its own, with a looser sampling target where its
        group's noise already dominates the user's precision target."""
        target = getattr(settings, "precision", None)
        self._pending_stop = Stop(target, False)
        group = self._group_of_test.get(_test_key(item))
        noise = self.noise(group) if group else None
        if target is None or noise is None or noise.dof < MIN_DOF_TO_STOP:
            return settings
        self._pending_stop = Stop(target, stopped_by_noise(target, noise))
        return dataclasses.replace(settings, precision=sampling_target(target, noise))

    # -- after a test -------------------------------------------------------------------------

    def after_test(self, session: Any, item: pytest.Function, settings: Any, key: Any,
                   records: Sequence[Record], fresh_world_after: bool, seconds: float) -> None:
        """Note the point (`seconds`: what its run in the world took), give its records the
        interval known so far (the gate and the -v line read it), and revisit an earlier point
        of its group when one is due."""
        stop = self._pending_stop or Stop(getattr(settings, "precision", None), False)
        self._pending_stop = None
        for record in records:
            self._stops[record["id"]] = stop
        measured = [r for r in records if headline(r) is not None]
        if not measured:
            self._apply(records)
            return
        group = group_of(measured[0], settings)
        self._group_of_test[_test_key(item)] = group
        now = time.monotonic()
        point = Point(item, settings, prepare(item, settings), key, fresh_world_after, group,
                      now, seconds,
                      {r["id"]: [headline(r)] for r in measured})  # type: ignore[misc]
        due = self._due(group)
        self.points.setdefault(group, []).append(point)
        self._point_of.update(dict.fromkeys(point.runs, point))
        if due is not None:
            self._revisit(session, due)
        self._apply(records)

    def _due(self, group: str) -> Point | None:
        """The point to revisit now, if any: the latest one measured at least REVISIT_GAP_S
        ago, once that long has passed since the group's last revisit too, so that the
        revisits spread over the session and over the points of a sweep."""
        points = self.points.get(group, [])
        now = time.monotonic()
        if (sum(p.revisits for p in points) >= self.per_group
                or now - self._last_revisit.get(group, -math.inf) < REVISIT_GAP_S):
            return None
        old = [p for p in _affordable(points)
               if not p.revisits and now - p.finished_at >= REVISIT_GAP_S]
        return old[-1] if old else None

    def _revisit(self, session: Any, point: Point) -> None:
        point.revisits += 1
        began = self._last_revisit[point.group] = time.monotonic()
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
            value = headline(record)
            if value is not None and record["id"] in point.runs:
                point.runs[record["id"]].append(value)

    # -- the end of the test loop -------------------------------------------------------------

    def finish(self, session: Any, more: bool = True) -> None:
        """Revisits for the groups the session left short (`per_group` each; none with
        `more` False), then every record's interval from its group's final noise, and a note
        of what the revisits cost."""
        for points in self.points.values() if more else ():
            wanted = self.per_group
            order = sorted(_affordable(points), key=lambda p: (p.revisits, p.seconds))
            index = 0
            while sum(p.revisits for p in points) < wanted and order:
                self._revisit(session, order[index % len(order)])
                index += 1
        # Only this session's own: an xdist controller's records came finished from workers.
        self._apply([r for r in session.records if r["id"] in self._stops])
        if self.runs:
            session.notes.extend(wrap(
                f"distbench: {self.runs} revisit(s) (earlier points run again to measure the "
                f"run-to-run noise every ± carries) took {self.seconds:.1f} s; "
                "--distbench-revisits=N sets how many per group"))

    def noise(self, group: str) -> RunNoise | None:
        runs: dict[str, list[float]] = {}
        for point in self.points.get(group, []):
            runs.update(point.runs)
        return pooled_run_noise(runs)

    def _apply(self, records: Sequence[Record]) -> None:
        noises: dict[str, RunNoise | None] = {}
        for record in records:
            stop = self._stops.get(record["id"], Stop(None, False))
            point = self._point_of.get(record["id"])
            group = noise = None
            if point is not None:
                group = point.group
                if group not in noises:
                    noises[group] = self.noise(group)
                noise = noises[group]
                runs = point.runs[record["id"]]
                if len(runs) > 1:
                    record["revisits"] = runs[1:]  # first: apply_noise reads the regimes
            apply_noise(record, noise, group or "", target=stop.target,
                        noise_stopped=stop.by_noise,
                        why=self._why_none(group))

    def _why_none(self, group: str | None) -> str:
        if not self.per_group:
            return f"{NOT_MEASURED} (--distbench-revisits=0)"
        return f"{NOT_MEASURED} yet" if group else NOT_MEASURED


def group_of(record: Record, settings: Any) -> str:
    """'collectives gloo ws8 0.5 s budget': the records whose runs share one run-to-run
    noise."""
    family = registry.family_of(record["family"]) or record["family"]
    if getattr(settings, "iterations", None):
        length = f"{settings.iterations} iterations"
    elif getattr(settings, "duration", None):
        length = f"{settings.duration:g} s duration"
    else:
        length = f"{settings.budget:g} s budget"
    return f"{family} {record['backend']} ws{record['world_size']} {length}"


def without_revisits(records: Sequence[Record], why: str = UNDER_LAUNCHER) -> None:
    """Records of a session that cannot revisit: no printed interval, and why."""
    for record in records:
        apply_noise(record, None, "", why=why)


def _affordable(points: Sequence[Point]) -> list[Point]:
    """The points a revisit may repeat: none that took more than twice the group's median
    (a TCPStore init that met a 5 s name-lookup stall would cost that again)."""
    if not points:
        return []
    ordered = sorted(p.seconds for p in points)
    typical = ordered[(len(ordered) - 1) // 2]
    return [p for p in points if p.seconds <= 2 * typical]


def _test_key(item: pytest.Function) -> tuple[str, str]:
    return (str(item.path), item.originalname)
