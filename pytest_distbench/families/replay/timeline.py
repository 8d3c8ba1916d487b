"""A captured rank's timeline read back (no torch): where each call was waited, rebuilt from
when it completed; the rank's own work between its calls (the gaps a replay puts back); and
how long the original steps took, per call and whole.

The gaps follow the replay's order of events (step.py): before call i the rank waits for the
calls due there (waits_at), then works, then issues call i. So the work before call i is the
time from the moment the rank was free to go on (its previous issue returned, and the calls
waited there completed) to call i's issue. A call that completed while the program computed
and a call the program blocked on read the same from their times; both are waited first and
the rest of the interval is work, so a replay whose calls take as long as the original's
issues each call when the original did. Across a step boundary the gap is the step's tail
(to its end) plus the next one's head (from its start), where the trace has the step spans.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ...units import format_figure
from .schedule import due_points, implied_waits, waits_before
from .trace import Call, Trace


def with_waits(calls: Sequence[Call]) -> list[Call]:
    """`calls` (one rank's, in order, with issue and completion times) with `wait_before`
    rebuilt: a call is waited before the first call the rank issued after it completed (a
    synchronous call: at once; an overlapped one: where the program had it done); one whose
    completion is not known as schedule.implied_waits says; one still out at its step's end
    before the next step's first call. In time n log n in the calls at most (one pass from the
    end, each completion looked up by bisection among the later issues)."""
    n = len(calls)
    ends = [n] * n  # the index where each call's run of calls of its step ends
    for i in range(n - 2, -1, -1):
        ends[i] = ends[i + 1] if calls[i + 1].step == calls[i].step else i + 1
    implied = implied_waits([c.op for c in calls], ends)
    waits: list[int | None] = [None] * n
    # The later calls of the step that were issued after every call between them and the one
    # at hand: their issue times fall from the list's start to its end, so the first call
    # issued at or after a moment is found by bisection (a call issued later than another but
    # after it in the list can never be the first).
    later: list[int] = []
    keys: list[float] = []  # -issued of each of `later`: ascending, for bisect
    for i in range(n - 1, -1, -1):
        c = calls[i]
        if i + 1 < n and ends[i] != ends[i + 1]:  # a new step's run: nothing later in it
            later.clear()
            keys.clear()
        if c.completed_s is not None:
            q = bisect_right(keys, -c.completed_s)
            wait = later[q - 1] if q else None
        else:
            wait = implied[i]
        if wait is None and ends[i] < n:
            wait = ends[i]
        waits[i] = wait
        issued = c.issued_s or 0.0
        while keys and -keys[-1] <= issued:
            later.pop()
            keys.pop()
        later.append(i)
        keys.append(-issued)
    return [replace(c, wait_before=w) for c, w in zip(calls, waits, strict=True)]


def waits_at(calls: Sequence[Call]) -> list[list[int]]:
    """For each call index i (and len(calls): the end), the calls the replay waits for before
    issuing call i: the hang check's own rule (schedule.py)."""
    return waits_before(due_points([c.op for c in calls], [c.wait_before for c in calls]))


@dataclass(frozen=True)
class Gaps:
    """One rank's own work, in seconds: `before[i]` after the waits due at call i and before
    its issue; `after` after the waits due at the end, to the end of the last step. `blind`
    says what the times could not show (empty: nothing)."""

    before: tuple[float, ...]
    after: float
    blind: tuple[str, ...] = ()

    @property
    def total(self) -> float:
        return sum(self.before) + self.after


NO_ISSUE_TIMES = ("the trace has no issue times (PARAM's basic traces and hand-written ones "
                  "have none)")
HEAD = "the work before the first call and after the last (the trace has no step spans)"
ISSUE = "each gap holds the issue of the call before it (issue returns not recorded)"
SKIPPED_STEPS = "the steps between non-consecutive captured steps"


def rank_gaps(calls: Sequence[Call], spans: dict[int, tuple[float, float]] | None = None
              ) -> Gaps | str:
    """The work between one rank's calls (Gaps), or why it cannot be known (a line)."""
    spans = spans or {}
    if not calls:
        return Gaps((), sum(b - a for a, b in spans.values()))
    if any(c.issued_s is None for c in calls):
        return NO_ISSUE_TIMES
    due = waits_at(calls)
    blind: set[str] = set()
    if any(c.returned_s is None for c in calls):
        blind.add(ISSUE)
    before = []
    for i, c in enumerate(calls):
        assert c.issued_s is not None
        if i == 0:
            start = spans.get(c.step, (None, None))[0]
            if start is None:
                blind.add(HEAD)
            gap = c.issued_s - (c.issued_s if start is None else start)
        else:
            prev = calls[i - 1]
            ready = _ready(calls, i - 1, due[i])
            gap = c.issued_s - ready
            if c.step != prev.step:
                if prev.step in spans and c.step in spans:
                    gap = (max(0.0, spans[prev.step][1] - ready)
                           + c.issued_s - spans[c.step][0])
                elif c.step != prev.step + 1:
                    blind.add(SKIPPED_STEPS)
                    gap = 0.0
        before.append(max(0.0, gap))
    last = calls[-1]
    end = spans.get(last.step, (None, None))[1]
    after = 0.0 if end is None else max(0.0, end - _ready(calls, len(calls) - 1, due[-1]))
    return Gaps(tuple(before), after, tuple(sorted(blind)))


def _ready(calls: Sequence[Call], k: int, waited: Sequence[int]) -> float:
    """When the rank was free to go on after issuing call k and waiting for `waited`: its
    issue returned (its start where not recorded) and every waited call that says when it
    completed had."""
    c = calls[k]
    moment = c.returned_s if c.returned_s is not None else c.issued_s
    assert moment is not None
    for j in waited:
        if calls[j].completed_s is not None:
            moment = max(moment, calls[j].completed_s)
    return moment


def trace_gaps(trace: Trace) -> dict[int, Gaps] | str:
    """Every rank's gaps, or why the trace's cannot be rebuilt (the first rank's reason)."""
    found = {}
    for rank, calls in sorted(trace.calls.items()):
        gaps = rank_gaps(calls, trace.spans.get(rank))
        if isinstance(gaps, str):
            return gaps
        found[rank] = gaps
    return found


def original_seconds(call: Call) -> float | None:
    """How long the call was outstanding in the original: issue to completion (None where the
    backend did not say when it completed)."""
    if call.issued_s is None or call.completed_s is None:
        return None
    return max(0.0, call.completed_s - call.issued_s)


SPANS = "step spans"
CALLS = "first issue to last completion of each step"


def rank_original(calls: Sequence[Call], spans: dict[int, tuple[float, float]] | None = None
                  ) -> float | None:
    """How long one rank's captured steps took in the original: the sum of its step spans
    (start to end of each step), else of each step's first issue to its last completion or
    return (the work before and after the calls left out). None: no issue times."""
    if spans:
        return sum(b - a for a, b in spans.values())
    total = 0.0
    by_step: dict[int, list[Call]] = {}
    for c in calls:
        by_step.setdefault(c.step, []).append(c)
    for mine in by_step.values():
        starts = [c.issued_s for c in mine if c.issued_s is not None]
        if len(starts) < len(mine):
            return None
        ends = [t for c in mine for t in (c.issued_s, c.returned_s, c.completed_s)
                if t is not None]
        total += max(ends) - min(starts)
    return total


def original_step(trace: Trace) -> tuple[float, str] | None:
    """The original's time for all its captured steps, the slowest rank's, and how it is known
    (SPANS or CALLS). None: a rank without issue times."""
    per_rank = [rank_original(calls, trace.spans.get(rank))
                for rank, calls in trace.calls.items()]
    if not per_rank or any(p is None for p in per_rank):
        return None
    how = SPANS if all(trace.spans.get(r) for r in trace.calls) else CALLS
    return max(p for p in per_rank if p is not None), how


def longest_gap(calls: Sequence[Call], gaps: Gaps) -> tuple[float, str] | None:
    """A rank's longest gap and where it is ("before its call 7 (all_reduce) in step 2"), for
    a refusal to name; None: no gap."""
    if not calls:
        return None
    i = max(range(len(gaps.before)), key=gaps.before.__getitem__)
    if gaps.after > gaps.before[i]:
        return gaps.after, f"after its last call, to the end of step {calls[-1].step}"
    return gaps.before[i], f"before its call {i} ({calls[i].op}) in step {calls[i].step}"


@dataclass(frozen=True)
class RankTimes:
    """What one rank's times say, for the others (each rank reads what its own calls say):
    its gaps (or why none), its original time (None: unknown), whether from step spans, and
    its longest gap and where it is (longest_gap)."""

    gaps: Gaps | str
    original: float | None
    spanned: bool
    longest: tuple[float, str] | None = None

    @classmethod
    def of(cls, calls: Sequence[Call], spans: dict[int, tuple[float, float]] | None
           ) -> RankTimes:
        gaps = rank_gaps(calls, spans)
        return cls(gaps, rank_original(calls, spans), bool(spans),
                   longest_gap(calls, gaps) if isinstance(gaps, Gaps) else None)


def overrun(times: Sequence[RankTimes], replays: int, timeout_s: float) -> str | None:
    """Why `replays` replays cannot finish within `timeout_s` on their gaps alone (None: they
    might): the busiest rank's gaps of one replay, times the replays, reach the timeout."""
    spans = [(t.gaps.total, r) for r, t in enumerate(times) if isinstance(t.gaps, Gaps)]
    if not spans:
        return None
    total, rank = max(spans)
    if total * replays < timeout_s:
        return None
    longest = times[rank].longest
    where = f"; the longest, {_seconds(longest[0])}, {longest[1]}" if longest else ""
    return (f"rank {rank}'s gaps last {_seconds(total)} a replay{where}; the test replays the "
            f"trace at least {replays} time(s), {_seconds(total * replays)}, past "
            f"--distbench-timeout ({_seconds(timeout_s)}): it could not finish. Replay without "
            "the gaps (--distbench-replay-gaps=off) or give it a longer timeout")


def _seconds(value: float) -> str:
    return f"{format_figure(value, 3)} s"
