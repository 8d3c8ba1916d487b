"""The work between a replay's calls (docs/replay.md, "The gaps"): rebuilt from a trace's
times (timeline.py), filled by the ranks (gapwork.py), and a real session replaying it."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from replay_traces import edit_json

from pytest_distbench.families.replay import gapwork, timeline
from pytest_distbench.families.replay import trace as fmt
from pytest_distbench.families.replay.reading import read
from pytest_distbench.families.replay.trace import Buffer, Call, Trace, TraceError

F = (Buffer("float32", (256,)),)

# One rank's program: per call, (work before it, issue time, time in flight, synchronous).
PROGRAM = st.lists(st.tuples(st.floats(0, 0.05), st.floats(1e-6, 1e-3), st.floats(0, 0.02),
                             st.booleans()), min_size=1, max_size=12)


def _run(program, steps: int = 1, head: float = 0.0, tail: float = 0.0, start: float = 1.0):
    """The calls (with wait_before rebuilt as the capture does) and step spans a rank records
    running `program` split into `steps` steps: it works, issues, then for a synchronous call
    blocks until it completes; an asynchronous one completes in flight."""
    per_step = math.ceil(len(program) / steps)
    now, calls, spans = start, [], {}
    for s in range(steps):
        began = now
        now += head
        for work, issue, flight, sync in program[s * per_step:(s + 1) * per_step]:
            now += work
            issued = now
            now += issue
            completed = now + flight
            if sync:
                now = completed
            calls.append(Call("all_reduce", 0, F, F, reduce_op="sum", step=s, issued_s=issued,
                              returned_s=issued + issue, completed_s=completed))
        now = max([now] + [c.completed_s for c in calls if c.step == s]) + tail
        spans[s] = (began, now)
    return timeline.with_waits(calls), spans


@given(PROGRAM)
def test_the_work_between_synchronous_calls_is_what_the_program_did(program):
    program = [(w, i, f, True) for w, i, f, _ in program]
    calls, spans = _run(program)
    gaps = timeline.rank_gaps(calls, spans)
    assert not isinstance(gaps, str) and gaps.blind == ()
    for got, (work, *_) in zip(gaps.before, program, strict=True):
        assert math.isclose(got, work, abs_tol=1e-9)
    assert math.isclose(gaps.after, 0.0, abs_tol=1e-9)


@given(PROGRAM, st.integers(1, 3), st.floats(0, 0.05), st.floats(0, 0.05))
def test_a_replay_as_fast_as_the_original_issues_each_call_when_it_did(program, steps, head,
                                                                      tail):
    """Wait for the calls due, then work for the gap, then issue: with every call lasting as
    long as in the original, each issue lands on the original's, and the iteration lasts the
    captured steps' time, whatever was synchronous and whatever overlapped."""
    calls, spans = _run(program, steps, head, tail)
    gaps = timeline.rank_gaps(calls, spans)
    assert not isinstance(gaps, str)
    due = timeline.waits_at(calls)
    now = spans[calls[0].step][0]
    done = {}
    for i, c in enumerate(calls):
        now = max([now] + [done[k] for k in due[i]]) + gaps.before[i]
        assert math.isclose(now, c.issued_s, abs_tol=1e-9)
        now = c.returned_s
        done[i] = c.completed_s
    now = max([now] + [done[k] for k in due[-1]]) + gaps.after
    assert math.isclose(now, spans[calls[-1].step][1], abs_tol=1e-9)
    total, how = timeline.original_step(Trace("t", 1, {0: (0,)}, {0: calls}, spans={0: spans}))
    assert math.isclose(total, sum(b - a for a, b in spans.values())) and how == "step spans"


@given(PROGRAM)
def test_a_version_1_trace_gets_its_gaps_from_issue_and_completion_times(program):
    calls, spans = _run(program)
    old = [Call(**{**c.__dict__, "returned_s": None}) for c in calls]
    new, rebuilt = timeline.rank_gaps(calls, spans), timeline.rank_gaps(old)
    assert not isinstance(rebuilt, str) and not isinstance(new, str)
    assert set(rebuilt.blind) == {timeline.HEAD, timeline.ISSUE}
    assert rebuilt.before[0] == 0.0 and rebuilt.after == 0.0
    for i in range(1, len(calls)):  # each gap holds at most the issue before it besides
        issue = calls[i - 1].returned_s - calls[i - 1].issued_s
        assert new.before[i] - 1e-9 <= rebuilt.before[i] <= new.before[i] + issue + 1e-9


def test_gaps_cannot_come_from_a_trace_without_times():
    calls = [Call("all_reduce", 0, F, F, reduce_op="sum", wait_before=1)]
    assert timeline.rank_gaps(calls) == timeline.NO_ISSUE_TIMES
    t = Trace("t", 1, {0: (0,)}, {0: calls})
    assert timeline.trace_gaps(t) == timeline.NO_ISSUE_TIMES
    assert timeline.original_step(t) is None


# -- the workers ----------------------------------------------------------------------------

class FakeDevice:
    """A device whose batch of n units lasts `fixed + n * unit` seconds, with jitter."""

    def __init__(self, unit: float, fixed: float, jitter: float, seed: int) -> None:
        import random

        self.unit, self.fixed, self.jitter = unit, fixed, jitter
        self.now = 0.0
        self.random = random.Random(seed)
        self.ran: list[int] = []

    def clock(self) -> float:
        return self.now

    def run(self, n: int) -> None:
        self.ran.append(n)
        self.now += (self.fixed + n * self.unit) * (1 + self.random.uniform(0, self.jitter))


@given(st.floats(1e-9, 1e-3), st.floats(0, 1e-3), st.integers(0, 1000))
def test_calibration_finds_a_units_time_whatever_a_batch_costs_besides(unit, fixed, seed):
    """As torch.cuda._sleep in cycles, with a launch and a synchronization per batch, or a
    matrix product: the unit's time within the jitter, the batch's fixed cost cancelled."""
    device = FakeDevice(unit, fixed, jitter=0.02, seed=seed)
    found = gapwork.seconds_per_unit(device.run, device.clock, budget_s=0.05)
    assert abs(found / unit - 1) < 0.1 + 2 * 0.02 * fixed / (unit * max(device.ran) / 2)
    # A batch long enough for the clock to see it: at least budget / 15, or the cap.
    assert (fixed + max(device.ran) / 2 * unit) * 1.02 >= 0.05 / 15 or max(device.ran) >= 1 << 40


def test_a_busy_worker_fills_a_gap_with_its_length_in_units():
    ran = []
    busy = gapwork.Busy("gpu", ran.append, 1e-9, "cycles")
    busy.fill(0.002)
    busy.fill(0.0)
    assert ran == [2_000_000]  # nothing for a gap of nothing
    assert busy.units(0.4e-9) == 0 and busy.units(1.6e-9) == 2
    slept = []
    gapwork.Idle(slept.append).fill(0.25)
    assert slept == [0.25]


@given(st.floats(1e-6, 1e-3), st.floats(0.5, 3), st.lists(st.floats(0, 0.05), max_size=5))
def test_the_cpu_worker_works_for_the_gap_whatever_the_load(unit, slowdown, gaps):
    """Its unit calibrated at `unit` s, run `slowdown` times slower (the load moved): each gap
    still lasts its time, within a unit, and the clock is read about every millisecond."""
    device = FakeDevice(unit * slowdown, 0.0, jitter=0.0, seed=0)
    busy = gapwork.Busy("cpu", device.run, unit, "products", clock=device.clock)
    for gap in gaps:
        before, device.ran = device.now, []
        busy.fill(gap)
        took = device.now - before
        slow = unit * slowdown  # one unit's time now
        # Past the gap by at most the first chunk's misestimate (it is sized by the
        # calibration; the later ones by the pace the one before ran at) and a unit.
        late = max(0.0, slowdown - 1) * min(gapwork.CHUNK_S, gap) + max(slow, unit)
        # Short by at most half a unit: the calibrated one before any ran, then as seen.
        assert gap - max(slow, unit) / 2 - 1e-12 <= took <= gap + late + 1e-12
        assert all(n * slow <= gapwork.CHUNK_S * 1.5 + unit * slowdown for n in device.ran[1:])


@given(st.lists(st.tuples(st.floats(0, 0.05), st.floats(0, 0.01)), max_size=30))
def test_overruns_do_not_add_up_over_an_iterations_gaps(gaps_and_overruns):
    """Each gap's fill runs over by some delay (a late wake-up): the next gaps are shortened
    by it, so the iteration's gaps last their recorded sum, late by one overrun at most."""
    now = [0.0]
    overruns = iter([o for _, o in gaps_and_overruns])

    class Late(gapwork.Worker):
        blocking = True

        def fill(self, seconds: float) -> None:
            now[0] += seconds + next(overruns)

    paced = gapwork.Paced(Late(), clock=lambda: now[0])
    paced.reset()
    for gap, _ in gaps_and_overruns:
        paced(gap)
    total = sum(g for g, _ in gaps_and_overruns)
    worst = max((o for _, o in gaps_and_overruns), default=0.0)
    assert total - 1e-9 <= now[0] <= total + worst + 1e-9


def test_busy_is_the_gpu_in_a_cuda_world_and_the_cpu_elsewhere():
    assert gapwork.resolve("busy", "cuda") == "gpu" and gapwork.resolve("busy", "cpu") == "cpu"
    assert gapwork.resolve("idle", "cuda") == "idle"
    with pytest.raises(ValueError, match="gap mode gpu needs a CUDA world; this one runs on cpu"):
        gapwork.resolve("gpu", "cpu")
    with pytest.raises(ValueError, match="invalid gap mode 'fast': expected one of busy, cpu"):
        gapwork.parse_mode("fast")


def test_the_cpu_worker_calibrated_here_fills_a_gap_for_about_its_length():
    """The real matrix products on this machine's CPU, as the ranks build them: never short of
    the gap, and no more work than it: bounded in CPU time, which a loaded machine's
    descheduling does not inflate (its wall time read 0.716 s for a 50 ms gap under load)."""
    import time

    import torch

    busy = gapwork.worker("cpu", torch.device("cpu"), barrier=lambda: None)
    assert busy.blocking and busy.unit_s > 0  # a descheduled calibration may overstate it
    t0, cpu0 = time.perf_counter(), time.process_time()
    busy.fill(0.05)
    took, worked = time.perf_counter() - t0, time.process_time() - cpu0
    assert took >= 0.05 - busy.unit_s, (busy.unit_s, took)
    assert worked < 0.5, (busy.unit_s, worked)


# -- the format -----------------------------------------------------------------------------

def timed_trace(world: int = 3, gap: float = 0.02) -> Trace:
    """Every rank: two steps of two all_reduces, `gap` of work before each, with spans."""
    calls, spans = {}, {}
    for r in range(world):
        mine, now, spans[r] = [], 0.0, {}
        for step in (1, 2):
            began = now
            for _ in range(2):
                now += gap
                mine.append(Call("all_reduce", 0, F, F, reduce_op="sum", step=step,
                                 issued_s=now, returned_s=now + 1e-5, completed_s=now + 1e-3))
                now += 1e-3
            spans[r][step] = (began, now)
        calls[r] = timeline.with_waits(mine)
    return Trace("timed", world, {0: tuple(range(world))}, calls, backend="gloo", device="cpu",
                 steps=[1, 2], spans=spans)


def test_version_2_fields_read_back_and_version_1_traces_still_read(tmp_path):
    t = timed_trace()
    fmt.write(t, tmp_path / "t")
    back = read(tmp_path / "t")
    assert back.calls == t.calls and back.spans == t.spans
    assert json.loads((tmp_path / "t" / "manifest.json").read_text())["version"] == 2
    # A version 1 trace: no returned_s, no spans.
    fmt.write(t, tmp_path / "old")
    for path in (tmp_path / "old").iterdir():
        edit_json(path, lambda d: d.update(version=1))
        if path.name != "manifest.json":
            edit_json(path, lambda d: (d.pop("steps"), [c.pop("returned_s") for c in d["calls"]]))
    old = read(tmp_path / "old")
    assert old.spans == {} and all(c.returned_s is None for c in old.calls[0])
    gaps = timeline.trace_gaps(old)
    assert not isinstance(gaps, str) and timeline.HEAD in gaps[0].blind


NEW_FIELD_DAMAGES = {
    "returned_s not a number": (
        lambda r: r["calls"][1].__setitem__("returned_s", "soon"), "calls[1]: field 'returned_s'"),
    "returned_s out of range": (
        lambda r: r["calls"][0].__setitem__("returned_s", 1e300), "field 'returned_s'"),
    "steps not a list": (lambda r: r.__setitem__("steps", {"1": [0, 1]}), "field 'steps'"),
    "a span ending before it starts": (
        lambda r: r["steps"][0].update(end_s=-1.0), "field 'steps[0]'"),
    "a span without its step": (lambda r: r["steps"][1].pop("step"), "field 'steps[1].step'"),
    "a step given twice": (lambda r: r["steps"][1].update(step=1), "field 'steps[1].step'"),
    "a span's start not seconds": (
        lambda r: r["steps"][0].update(start_s=[0]), "field 'steps[0].start_s'"),
}


@pytest.mark.parametrize("damage", list(NEW_FIELD_DAMAGES))
def test_damaged_new_fields_are_refused_in_one_line_naming_file_and_field(tmp_path, damage):
    change, expected = NEW_FIELD_DAMAGES[damage]
    fmt.write(timed_trace(), tmp_path / "t")
    edit_json(tmp_path / "t" / "rank2.json", change)
    with pytest.raises(TraceError) as caught:
        read(tmp_path / "t")
    message = str(caught.value)
    assert "\n" not in message and "rank2.json" in message and expected in message, message


# -- a real session -------------------------------------------------------------------------

def test_a_replay_puts_the_gaps_back_at_three_ranks_and_says_how(pytester, distbench_run):
    """25 ms of work before each of the 4 calls (2 steps): with gaps the replay lasts at least
    those 100 ms; off, the calls back to back, less by most of them (this loaded machine
    takes up to ~30 ms for the 12 calls alone); the table says which mode ran."""
    fmt.write(timed_trace(3, gap=0.025), pytester.path / "timed")
    pytester.makepyfile(test_modes=f"""
        import pytest
        from pytest_distbench.families.replay.step import replay

        @pytest.mark.distbench
        def test_modes(distbench):
            replay(distbench, {str(pytester.path / 'timed')!r}, gaps="off", name="off")
            replay(distbench, {str(pytester.path / 'timed')!r}, gaps="idle", name="idle")
        """)
    out = pytester.path / "out.json"
    result = distbench_run("--distbench", "--world-size=3", "test_modes.py",
                           "--distbench-replay=timed", "--distbench-replay-gaps=cpu",
                           "--distbench-iterations=3", "--distbench-warmup=1",
                           "--distbench-revisits=0", f"--distbench-json={out}")
    result.assert_outcomes(passed=2)
    records = {r["name"].rsplit("::", 1)[-1] if "::" in r["name"] else "suite": r
               for r in (b["distbench"] for b in json.loads(out.read_text())["benchmarks"])}
    suite, off, idle = records["suite"], records["off"], records["idle"]
    gaps = 4 * 0.025
    for r in (suite, idle):
        assert r["summary"]["p50"] >= 0.9 * gaps and r["wrong"] == 0
        assert math.isclose(r["figures"]["gap_s"], gaps)
        assert math.isclose(r["figures"]["original_s"], gaps + 4e-3)
    assert (suite["figures"]["gaps"], idle["figures"]["gaps"], off["figures"]["gaps"]) == (
        "cpu", "idle", "off")
    assert off["summary"]["p50"] < idle["summary"]["p50"] - 0.5 * gaps
    assert off["figures"]["gaps_how"] == "none: the calls back to back, as captured"
    rows = suite["figures"]["breakdown"]
    assert [(b["calls"], b["original_calls"]) for b in rows] == [(12, 12)]
    assert math.isclose(rows[0]["original_seconds"], 12 * 1e-3)
    assert suite["figures"]["gaps_how"].startswith(
        "cpu: 64 x 64 float32 matrix products until the gap's time has passed, ")
    result.stdout.fnmatch_lines([
        "# gaps between the calls: cpu: 64 x 64 float32 matrix products until the gap's time *",
        "*100 ms per iteration in the busiest rank",
        "# original: the captured steps, slowest rank, from the step spans"])


# -- gaps that cannot fit in the test's timeout -----------------------------------------------

def gapped_trace(gap_s: float, world: int = 2) -> Trace:
    """timed_trace's, with rank 1's call 3 (step 2) issued `gap_s` later: its gap before it."""
    t = timed_trace(world, gap=0.001)
    t.name = "gapped"
    calls = t.calls[1]
    late = lambda v: None if v is None else v + gap_s  # noqa: E731
    t.calls[1] = timeline.with_waits(
        calls[:3] + [Call(**{**c.__dict__, "issued_s": late(c.issued_s),
                             "returned_s": late(c.returned_s),
                             "completed_s": late(c.completed_s)}) for c in calls[3:]])
    start, end = t.spans[1][2]
    t.spans[1][2] = (start, end + gap_s)
    return t


def test_gaps_past_the_timeout_are_refused_naming_rank_step_and_call():
    t = gapped_trace(36000.0)
    times = [timeline.RankTimes.of(t.calls[r], t.spans[r]) for r in range(2)]
    assert times[1].longest == (pytest.approx(36000.0), "before its call 3 (all_reduce) in "
                                "step 2")
    said = timeline.overrun(times, 6, 300.0)
    assert said == (
        "rank 1's gaps last 36,000 s a replay; the longest, 36,000 s, before its call 3 "
        "(all_reduce) in step 2; the test replays the trace at least 6 time(s), 216,000 s, "
        "past --distbench-timeout (300 s): it could not finish. Replay without the gaps "
        "(--distbench-replay-gaps=off) or give it a longer timeout")
    # A replay whose gaps alone fit (the calls may still not: that is a hang's to report).
    assert timeline.overrun(times, 6, 7 * 24 * 3600.0) is None
    short = timed_trace(2, gap=0.02)
    assert timeline.overrun([timeline.RankTimes.of(short.calls[r], short.spans[r])
                             for r in range(2)], 6, 300.0) is None



@settings(deadline=None, max_examples=40,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 6), st.one_of(st.none(), st.integers(1, 12)), st.integers(1, 40),
       st.sampled_from([None, 1e-3]), st.sampled_from([1e-7, 0.01]))
def test_measure_calls_a_function_at_least_its_fewest_calls(one_rank_group, warmup,
                                                             iterations, min_iterations,
                                                             duration, budget):
    """The floor the replay checks its gaps against, for every way a test is timed (a fixed
    count, a budget, a duration): the real loop calls the function at least that often, and
    exactly that often where a budget is spent by the first iterations."""
    import torch

    from pytest_distbench.harness.ranks.measure import Distbench, fewest_calls
    from pytest_distbench.harness.wire import MeasureSettings

    s = MeasureSettings(warmup=warmup, iterations=iterations, min_iterations=min_iterations,
                        max_iterations=10_000, budget_s=budget, dtype="float32",
                        duration_s=duration, precision=None)
    bench = Distbench(rank=0, world_size=1, backend="gloo", device=torch.device("cpu"),
                      group=one_rank_group, control_group=one_rank_group, settings=s)
    calls = []
    bench.measure(lambda: calls.append(1), nbytes=4)
    assert len(calls) >= fewest_calls(s) == bench.fewest_calls()
    if iterations is None and duration is None and budget < 1e-6:
        assert len(calls) == fewest_calls(s)


def test_a_session_refuses_gaps_past_its_timeout_in_one_line_before_running_any(
        pytester, distbench_run):
    """A 10-hour gap was replayed until the timeout and reported as a hang; one of 1e11 s
    (under the format's bound of 10^12) failed every rank with OverflowError in time.sleep.
    Both are refused at once, naming the rank, the step and the call."""
    for name, gap in (("hours", 36000.0), ("ages", 1e11)):
        t = gapped_trace(gap)
        t.name = name
        fmt.write(t, pytester.path / "traces" / name)
    result = distbench_run("--distbench", "--world-size=2",
                           f"--distbench-replay={pytester.path / 'traces'}",
                           "--distbench-replay-gaps=idle", "--distbench-iterations=3",
                           "--distbench-warmup=1", "--distbench-revisits=0",
                           "--distbench-timeout=60s")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "*Failed: trace ages: rank 1's gaps last 100,000,000,000 s a replay; the longest, "
        "100,000,000,000 s, before its call 3 (all_reduce) in step 2; the test replays the "
        "trace at least 4 time(s), 400,000,000,000 s, past --distbench-timeout (60.0 s): it "
        "could not finish.*"])
    result.stdout.fnmatch_lines([
        "*Failed: trace hours: rank 1's gaps last 36,000 s a replay; the longest, 36,000 s, "
        "before its call 3 (all_reduce) in step 2; the test replays the trace at least 4 "
        "time(s), 144,000 s, past --distbench-timeout (60.0 s): it could not finish.*"])
    assert "OverflowError" not in result.stdout.str() and "timed out" not in result.stdout.str()
    assert "Traceback" not in result.stdout.str()
