"""A/B mode: every benchmark measured in R rounds, baseline and candidate back to back.

Round r runs the test once in the baseline's world and once in the candidate's, in the order
AB, BA, AB, BA... (ABBA: each side goes first equally often, so "second in the round" cannot
favour one of them). The two variants have worlds of their own (the world key carries the
variant) and the baseline's ranks come from their own forkserver (variants.py), started with
the baseline's environment overrides or interpreter. The verdict is paired
(results/statistics/paired.py): each round's ratio (of its fastest iterations) cancels what
the machine did during that round.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import pytest

from ...results.comparison.ab import ab_field, failure_message, junit_properties
from ...results.statistics import paired, vocabulary
from ...settings import Settings
from ..controller.outcome import prepare
from ..controller.points import Point, Points, merged_rounds
from ..controller.runs import Runner
from ..local.session import LocalSession
from ..local.world import PRELOAD
from ..wire import WorldKey
from .variants import InterpreterFacts, VariantServer

BASELINE, CANDIDATE = "baseline", "candidate"
DEFAULT_ROUNDS = 20
# --distbench-budget in A/B mode unless the user gives one: the timed part of one variant's run
# in one round.
RUN_BUDGET = "0.2s"
# The statistic of a round's samples that stands for the round in the paired test: its fastest
# iteration. A run here is disturbed in spells (a neighbour's burst of CPU, a slow mode of the
# loopback) that only ever add time and cover part of a run; the fastest iteration is the one
# they missed. Measured against p25, p50 and the mean on this machine: docs/gating.md.
ROUND_STATISTIC = "min"


@dataclass
class ABOutcome:
    """One benchmark (record id) judged from its rounds."""

    id: str
    name: str
    family: str
    nbytes: int | None
    baseline_p50s: list[float]
    candidate_p50s: list[float]
    verdict: paired.PairedVerdict
    wall_s: float
    # Each round's ROUND_STATISTIC, what the verdict compares.
    baseline_round_s: list[float]
    candidate_round_s: list[float]

    @classmethod
    def of_record(cls, record: Any) -> ABOutcome:
        """The outcome a record's "ab" field keeps (an xdist worker's, on the controller)."""
        ab = record["ab"]

        def bound(value: float | None, missing: float) -> float:
            return missing if value is None else value

        verdict = paired.PairedVerdict(
            ab["verdict"], ab["ratio"], bound(ab["ratio_low"], 0.0),
            bound(ab["ratio_high"], math.inf), ab["p_value"], bound(ab["detectable"], math.inf),
            ab["rounds"], ab["threshold"], ab["level"])
        return cls(record["id"], record["name"], record["family"], record.get("nbytes"),
                   ab["baseline_p50_s"], ab["candidate_p50_s"], verdict, ab["wall_s"],
                   ab["baseline_round_s"], ab["candidate_round_s"])


@dataclass
class ABMode:
    rounds: int
    # Rounds added, `rounds` at a time, to a test whose rounds left a regression open
    # (paired.look_rounds).
    extra_rounds: int
    env_overrides: dict[str, str]
    interpreter: InterpreterFacts | None
    outcomes: list[ABOutcome] = field(default_factory=list)
    tests: int = 1  # the session's distbench tests (gating.py): each point's level is a share
    _server: VariantServer | None = None
    _points: Points = field(default_factory=Points)  # the session's (start)

    @property
    def description(self) -> str:
        parts = []
        if self.env_overrides:
            parts.append("environment " + " ".join(f"{k}={v}" for k, v in
                                                   self.env_overrides.items()))
        if self.interpreter is not None:
            parts.append(f"python {self.interpreter.executable} (torch "
                         f"{self.interpreter.torch})")
        return ", ".join(parts)

    def start(self, session: LocalSession) -> None:
        """Start the baseline's forkserver now, so its imports overlap collection; the
        session's baseline worlds fork from it, and it keeps the merged points."""
        self._points = session.points
        self._server = VariantServer(
            preload=list(PRELOAD), env_overrides=dict(self.env_overrides),
            interpreter=self.interpreter,
        )
        session.contexts[BASELINE] = self._server.context(BASELINE)
        session.inside(self._server.ensure_running)

    def close(self) -> None:
        if self._server is not None:
            self._server.stop()

    # -- running ----------------------------------------------------------------------------

    def run_test(self, runner: Runner, item: pytest.Function, settings: Settings,
                 key: WorldKey, fresh_world_after: bool = False) -> list[Point]:
        """runs.Schedule of A/B mode: the rounds; keep the candidate's points (rounds
        merged), judged here: none left for the caller to report; fail on a regression."""
        import time

        began = time.perf_counter()
        task = prepare(item, settings)
        tasks = {CANDIDATE: task, BASELINE: self._baseline_task(task)}
        runs: dict[str, list[list[Point]]] = {BASELINE: [], CANDIDATE: []}

        def run_rounds(rounds: range) -> None:
            for r in rounds:
                order = (BASELINE, CANDIDATE) if r % 2 == 0 else (CANDIDATE, BASELINE)
                for variant in order:
                    runs[variant].append(runner.run_item(
                        item, settings, dataclasses.replace(key, variant=variant),
                        task=tasks[variant]))

        run_rounds(range(self.rounds))
        count = len(runs[CANDIDATE][0])
        level = vocabulary.point_level(self.tests, count)
        looks = paired.look_rounds(self.rounds, self.extra_rounds, level)
        judged = self._judged(runs, settings.threshold, level / len(looks))
        for done, more in pairwise(looks):
            if not any(paired.open_to_regression(verdict) for *_, verdict in judged):
                break
            # The rounds so far left a regression open: more (ABBA goes on), and the test
            # judged again on all of them, each look at its share of the level.
            run_rounds(range(done, more))
            judged = self._judged(runs, settings.threshold, level / len(looks))
        wall = time.perf_counter() - began
        failures, merged, named = [], [], []
        for i, (base_stat, cand_stat, verdict) in enumerate(judged):
            base = [rnd[i].first.record for rnd in runs[BASELINE]]
            cand = [rnd[i].first.record for rnd in runs[CANDIDATE]]
            first = runs[CANDIDATE][0][i]
            record = first.first.record
            outcome = ABOutcome(record["id"], record["name"], record["family"],
                                record.get("nbytes"), [r["summary"]["p50"] for r in base],
                                [r["summary"]["p50"] for r in cand], verdict,
                                wall / max(count, 1), base_stat, cand_stat)
            self.outcomes.append(outcome)
            ab = ab_field(outcome, self.description, ROUND_STATISTIC)
            ab["baseline_rounds"] = [r["summary"] for r in base]
            ab["candidate_rounds"] = [r["summary"] for r in cand]
            named.append((record["name"], ab))
            merged.append(Point(first.id, merged_rounds([rnd[i].first
                                                         for rnd in runs[CANDIDATE]]),
                                live_reports=first.live_reports, ab=ab))
            if verdict.kind == "regression":
                failures.append(failure_message(outcome, self.description, ROUND_STATISTIC))
        self._points.add(merged)
        item.user_properties.extend(junit_properties(named))  # passed or failed
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)
        return []

    @staticmethod
    def _judged(runs: dict[str, list[list[Point]]], threshold: float, level: float
                ) -> list[tuple[list[float], list[float], paired.PairedVerdict]]:
        """Each point's round values (baseline, candidate) from every round so far, and its
        paired verdict on them at `level`."""
        judged = []
        for i, first in enumerate(runs[CANDIDATE][0]):
            base, cand = ([round_value(rnd[i].first.record["samples"]) for rnd in runs[side]]
                          for side in (BASELINE, CANDIDATE))
            try:
                judged.append((base, cand, paired.judge_paired(base, cand, threshold,
                                                               alpha=level)))
            except ValueError as exc:  # e.g. a time of 0: a clock too coarse for the body
                pytest.fail(f"A/B: cannot compare {first.first.record['name']}: {exc}",
                            pytrace=False)
        return judged

    def _baseline_task(self, task: Any) -> Any:
        if self.interpreter is None or self._server is None:
            return task
        # Already on the rank's path, in the order that lets the baseline's own installation
        # win over anything of the controller's.
        return dataclasses.replace(
            task, sys_path=tuple(self._server.rank_sys_path(list(task.sys_path)))
        )


def round_value(samples: list[float]) -> float:
    """The ROUND_STATISTIC of one round's samples (seconds per iteration)."""
    return min(samples)
