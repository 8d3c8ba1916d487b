"""A benchmark's stored runs as a series: where its speed stepped, and the current segment a new
run is judged against (docs/gating.md, "The history of a baseline").

The runs of a baseline (document/history.py) are split first where the environment
fingerprint changes between consecutive runs (another torch, NCCL, CUDA, CPU or GPU model,
CPU count or set of world sizes): an environment change starts a new segment and is never a
regression. Within each stretch of one environment, statistics/changepoints.py finds where
the p50 stepped. The current segment is the runs since the last boundary of either kind.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..document.history import history_of, stored_runs
from ..document.schema import records
from ..rendering.fit import QUOTED, printable
from ..statistics.changepoints import change_points
from ..statistics.stats import median

# A slowdown that starts the current segment is a regression for this many runs after the
# history first shows it (about a week of nightly runs); then it is the accepted speed, as it
# already is for the gate. Counted from when it was shown, not from the step itself: a step
# on a noisy series takes more runs to show, and must still be reported.
RECENT_RUNS = 7
# How far (runs) the change point found in a shorter series may lie from today's and still be
# the same step: the change-point test keeps 5 runs a side, so two steps are further apart.
NEAR = 2


def date_of(created: str | None) -> str:
    """'2026-12-02 03:29' (a stored run's UTC time, to the minute), or 'unknown'."""
    return created[:16].replace("T", " ") if created else "unknown"


@dataclass(frozen=True)
class Run:
    """One stored run, as the history keeps it."""

    index: int  # in the file's time order: 0 = the oldest stored run
    created: str | None
    commit: str | None
    dirty: bool | None
    environment: dict[str, Any]

    @property
    def commit_label(self) -> str:
        """The commit as git abbreviates it, '-dirty' when the tree had changes; 'unknown'."""
        if not self.commit:
            return "unknown"
        return self.commit[:7] + ("-dirty" if self.dirty else "")

    @property
    def date(self) -> str:
        return date_of(self.created)


@dataclass(frozen=True)
class Step:
    """Where a new segment starts: a change point (the p50 stepped, `p` its p-value) or an
    environment change (`differences` names what changed; no p)."""

    run: Run  # the first run of the new segment
    kind: Literal["change", "environment"]
    before: float  # median p50 of the segment before, seconds
    after: float  # median p50 of the segment it starts, seconds
    p: float | None
    differences: tuple[str, ...] = ()

    @property
    def change_pct(self) -> float:
        return (self.after / self.before - 1) * 100 if self.before > 0 else math.inf


@dataclass(frozen=True)
class Series:
    """One benchmark's p50 in every stored run that holds it, oldest first, and its steps."""

    id: str
    runs: tuple[Run, ...]
    p50s: tuple[float, ...]  # seconds, one per run
    steps: tuple[Step, ...]  # oldest first

    @property
    def start(self) -> int:
        """The position (in `p50s`) of the current segment's first run."""
        return self.runs.index(self.steps[-1].run) if self.steps else 0

    @property
    def current(self) -> tuple[float, ...]:
        """The current segment's p50s: what a new run is judged against."""
        return self.p50s[self.start:]

    @property
    def current_median(self) -> float:
        return median(self.current)

    def describe_current(self, commit: bool = True) -> str:
        """'the 7 runs since run 12 (commit abc1234)', or for a series without a step 'the 3
        stored runs'."""
        n = len(self.current)
        if not self.steps:
            return f"the {n} stored run{'s' if n != 1 else ''}"
        step = self.steps[-1]
        why = ", an environment change" if step.kind == "environment" else ""
        said = f"the {n} run{'s' if n != 1 else ''} since run {step.run.index}"
        return f"{said} (commit {step.run.commit_label}{why})" if commit else said

    def regression(self, threshold: float, recent: int = RECENT_RUNS) -> Step | None:
        """The change point that starts the current segment when it is a slowdown beyond
        `threshold` (a fraction) that the series as it stood `recent` runs ago did not show
        yet (the history first showed it within its `recent` newest runs), else None."""
        if not self.steps:
            return None
        step, at = self.steps[-1], self.start
        if step.kind != "change" or step.change_pct <= threshold * 100:
            return None
        # The current environment's stretch, as it stood `recent` runs ago.
        lo = max((self.runs.index(s.run) for s in self.steps if s.kind == "environment"),
                 default=0)
        then = self.p50s[lo:len(self.p50s) - recent]
        shown = len(then) > at - lo and any(
            abs(lo + cp.run - at) <= NEAR and cp.change_pct > threshold * 100
            for cp in change_points(then))
        return None if shown else step


def series_of(document: dict[str, Any]) -> dict[str, Series]:
    """Every benchmark of a (validated) baseline as a series, in the file's order: the ids of
    its own (latest) run first, then those only earlier runs hold; one whose every p50 is 0
    (nothing a ratio can be taken of) has none."""
    stored = stored_runs(document)
    runs = [Run(i, run.get("created"), run.get("commit"), run.get("dirty"),
                run.get("environment") or {}) for i, run in enumerate(stored)]
    ids = list(records(document)) + [bid for run in stored for bid in run["p50_s"]]
    found = (series_for(bid, runs, [run["p50_s"].get(bid) for run in stored])
             for bid in dict.fromkeys(ids))
    return {s.id: s for s in found if s.runs}


def series_for(benchmark_id: str, runs: Sequence[Run], p50s: Sequence[float | None]
               ) -> Series:
    """The series of one benchmark from every run and its p50 there (None: not measured)."""
    kept = [(run, p) for run, p in zip(runs, p50s, strict=True)
            if p is not None and math.isfinite(p) and p > 0]
    held = tuple(run for run, _ in kept)
    values = tuple(p for _, p in kept)
    bounds: list[tuple[int, Step | None]] = []  # (position, step) where a segment starts
    for lo, hi in _stretches(held):
        if lo > 0:
            bounds.append((lo, None))  # filled in below, once the medians are known
        bounds += [(lo + cp.run, Step(held[lo + cp.run], "change", cp.before, cp.after, cp.p))
                   for cp in change_points(values[lo:hi])]
    edges = [b for b, _ in bounds] + [len(values)]
    steps = []
    for k, (position, step) in enumerate(bounds):
        if step is None:
            before = median(values[edges[k - 1] if k else 0:position])
            after = median(values[position:edges[k + 1]])
            step = Step(held[position], "environment", before, after, None,
                        _differences(held[position - 1].environment,
                                     held[position].environment))
        steps.append(step)
    return Series(benchmark_id, held, values, tuple(steps))


def _stretches(runs: Sequence[Run]) -> list[tuple[int, int]]:
    """[lo, hi) spans of consecutive runs in one environment."""
    spans, lo = [], 0
    for i in range(1, len(runs)):
        if _differences(runs[i - 1].environment, runs[i].environment):
            spans.append((lo, i))
            lo = i
    return spans + [(lo, len(runs))] if runs else []


def _differences(before: dict[str, Any], after: dict[str, Any]) -> tuple[str, ...]:
    """'torch: 2.12.0 -> 2.13.0' per fingerprint field both runs recorded and that differs
    (an older run recorded only its torch: what it does not say is not a change)."""
    return tuple(f"{key}: {describe(before[key])} -> {describe(after[key])}"
                 for key in before if key in after and before[key] != after[key])


def describe(value: Any) -> str:
    """A fingerprint field's value as the reports print it (the file's own text made safe)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):  # the file's own text (a GPU's name): shown safe
        return printable(value, most=QUOTED) or '""'
    if isinstance(value, list):
        return "[" + ", ".join(describe(v) for v in value) + "]" if value else "none"
    if isinstance(value, dict):
        inner = ", ".join(f"{k}={describe(v)}" for k, v in value.items())
        return "{" + inner + "}"
    return str(value)


@dataclass(frozen=True)
class History:
    """Every benchmark's series of one baseline, and the rule its regressions are found by."""

    label: str  # the file, as the user named it
    runs: int  # stored runs in the file
    first: str  # the oldest and the newest run's dates
    last: str
    series: Mapping[str, Series]
    names: Mapping[str, str]  # id -> the name the tables show
    threshold: float  # a fraction
    recent: int

    def regressions(self) -> list[tuple[Series, Step]]:
        return [(s, step) for s in self.series.values()
                if (step := s.regression(self.threshold, self.recent)) is not None]


def read_history(document: dict[str, Any], label: str, threshold: float,
                 recent: int = RECENT_RUNS) -> History | None:
    """A (validated) baseline's history, or None for a file of one run (no stored history)."""
    if not history_of(document):
        return None
    series = series_of(document)
    runs = [run.get("created") for run in stored_runs(document)]
    dates = [date_of(created) for created in (runs[0], runs[-1])]
    names = {bid: str(rec.get("name") or bid) for bid, rec in records(document).items()}
    return History(label, len(runs), dates[0], dates[1], series, names, threshold, recent)
