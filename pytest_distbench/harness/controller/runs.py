"""One way to run a point: the run protocol every mode implements (local worlds, a
launcher's ranks), and the protocol of the schedules that call it (a test's own run and its
revisits, controller/revisits.Once; A/B rounds, harness/ab/mode.py). The schedule is chosen
once, at configure time (plugin.py)."""

from __future__ import annotations

from typing import Protocol

import pytest

from ...settings import Settings
from ..wire import RunTest, WorldKey
from .points import Point


class Runner(Protocol):
    """Runs one test once in the world `key` names: its points, or its failure or skip
    raised as pytest does. `task`: one already prepared (a revisit's; A/B mode's baseline,
    with its own interpreter's path). `fresh_world_after`: stop the world after it even if
    it ended cleanly (an RPC test). `keep=False`: a revisit, whose runs join the points it
    revisits (nothing kept, nothing printed live); an A/B round's points (the key's variant)
    are A/B mode's to merge and keep."""

    def run_item(self, item: pytest.Function, settings: Settings, key: WorldKey, *,
                 task: RunTest | None = None, fresh_world_after: bool = False,
                 keep: bool = True) -> list[Point]: ...


class Schedule(Protocol):
    """When and how often a test runs: the schedule of the session's mode. The points the
    caller reports (none where the schedule judged them itself)."""

    def run_test(self, runner: Runner, item: pytest.Function, settings: Settings,
                 key: WorldKey, fresh_world_after: bool) -> list[Point]: ...


SCHEDULE_KEY = pytest.StashKey[Schedule]()  # the run's schedule, in config.stash
