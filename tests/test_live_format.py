"""Rate arithmetic and the live line (hypothesis), the rank-side reporter, memory checks."""

from __future__ import annotations

import re
import threading
import time

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pytest_distbench.harness.controller.live import progress_line
from pytest_distbench.harness.ranks import pressure
from pytest_distbench.harness.ranks.progress import Reporter, messages_per_iteration
from pytest_distbench.harness.wire import PressureSettings, Progress
from pytest_distbench.results.rendering.live import Rate, report_line

NUMBER = r"([\d.]+|-)"
PART = re.compile(
    rf"Time: {NUMBER}s Msgs: (\d+) Rate: {NUMBER}msg/s \({NUMBER}us\) {NUMBER}MB/s"
)
TOTALS = re.compile(rf"Time: {NUMBER}s Msgs: (\d+) Rate: {NUMBER}msg/s")

seconds = st.floats(min_value=1e-3, max_value=1e5, allow_nan=False)
messages = st.integers(min_value=0, max_value=10**12)
sizes = st.one_of(st.none(), st.integers(min_value=0, max_value=2**40))


@given(seconds, messages, sizes)
def test_rate_figures_follow_from_messages_time_and_size(t, n, nbytes):
    rate = Rate(t, n, nbytes)
    assert rate.per_second == pytest.approx(n / t)
    assert rate.mbps == pytest.approx(n * (nbytes or 0) / t / 1e6)  # decimal MB
    if n:
        assert rate.us_per_message * rate.per_second == pytest.approx(1e6)
    else:
        assert rate.us_per_message is None


def printed(value: float):
    """A figure printed with two decimals: off by at most half a cent, plus the float's own
    rounding, which exceeds a cent above ~1e13 (MB/s of 10**12 messages of 2**40 bytes)."""
    return pytest.approx(value, abs=0.006, rel=1e-14)


@given(seconds, messages, sizes, seconds, messages)
@example(1.0, 0, 3_671_602_476, 0.75, 15_978_174_494)  # 33523145733788.82 MB/s, found by CI
def test_line_has_the_seeds_shape_and_its_numbers(t, n, nbytes, extra_t, extra_n):
    line = report_line(Rate(t, n, nbytes), Rate(t + extra_t, n + extra_n, nbytes))
    head, sep, tail = line.partition(" TOTALS: ")
    assert sep
    m = PART.fullmatch(head)
    assert m, head
    assert float(m[1]) == printed(t)
    assert int(m[2]) == n
    assert float(m[3]) == printed(n / t)
    if n:
        assert float(m[4]) == printed(t / n * 1e6)
    else:
        assert m[4] == "-"
    assert float(m[5]) == printed(n * (nbytes or 0) / t / 1e6)
    totals = TOTALS.fullmatch(tail)
    assert totals, tail  # time, count and rate: the seed's us and MB/s are not said twice
    tt, nn = t + extra_t, n + extra_n
    assert float(totals[1]) == printed(tt) and int(totals[2]) == nn
    assert float(totals[3]) == printed(nn / tt)
    # The first line's totals are its interval's: said once.
    assert report_line(Rate(t, n, nbytes), Rate(t, n, nbytes)) == head


def _progress(index, elapsed, iterations, k=1, nbytes=8):
    return Progress(name=None, index=index, elapsed_s=elapsed, iterations=iterations,
                    messages_per_iteration=k, nbytes=nbytes, due=0.0, sent=0.0)


@given(st.lists(st.tuples(st.floats(min_value=0.01, max_value=100),
                          st.integers(min_value=0, max_value=10**6)), min_size=1, max_size=20),
       st.integers(min_value=1, max_value=1000))
def test_intervals_add_up_to_the_totals(steps, k):
    """Each line's interval is the difference of two cumulative reports; the totals are the
    sums of the intervals, in messages (iterations x messages per iteration)."""
    elapsed, iterations, previous = 0.0, 0, None
    interval_msgs = 0
    for dt, dn in steps:
        elapsed, iterations = elapsed + dt, iterations + dn
        current = _progress(len(steps), elapsed, iterations, k=k)
        head, sep, tail = progress_line(current, previous).partition(" TOTALS: ")
        interval_msgs += int(PART.fullmatch(head)[2])
        assert int(PART.fullmatch(head)[2]) == dn * k
        total = int(TOTALS.fullmatch(tail)[2]) if sep else interval_msgs
        assert bool(sep) == (previous is not None)  # the first line's totals are its own
        assert total == iterations * k == interval_msgs
        assert float(PART.fullmatch(head)[1]) == pytest.approx(dt, abs=0.006)
        previous = current


@pytest.mark.parametrize("bad", [0, -1, 1.5, "3", True])
def test_messages_per_iteration_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match="messages_per_iteration"):
        messages_per_iteration({"messages_per_iteration": bad})
    assert messages_per_iteration({}) == 1


def test_reporter_reports_each_interval_and_the_tail():
    sent: list[Progress] = []
    samples: list[float] = []
    reporter = Reporter(sent.append, 0.2, samples, name="m", nbytes=4,
                        figures={"messages_per_iteration": 2})
    reporter.start()
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:  # a stand-in for the timed loop
        samples.append(0.0)
        time.sleep(0.001)
    reporter.stop()
    assert [p.index for p in sent] == [1, 2, 3]  # 0.2, 0.4, then the 0.1 s tail
    assert [p.final for p in sent] == [False, False, True]
    assert [p.elapsed_s for p in sent] == sorted(p.elapsed_s for p in sent)
    assert sent[0].elapsed_s == pytest.approx(0.2, abs=0.1)
    assert sent[-1].iterations == len(samples)
    assert all(p.messages_per_iteration == 2 and p.nbytes == 4 for p in sent)
    assert not any(t.name == "distbench-reporter" for t in threading.enumerate())


def test_reporter_skips_a_tail_too_short_to_mean_anything():
    sent: list[Progress] = []
    reporter = Reporter(sent.append, 10.0, [], name=None, nbytes=None, figures={})
    reporter.start()
    reporter.stop()
    assert sent == []


GIB = 2**30


@given(allocate=st.integers(min_value=0, max_value=64 * GIB),
       touch=st.integers(min_value=0, max_value=64 * GIB),
       sharing=st.integers(min_value=1, max_value=8),
       available=st.integers(min_value=GIB, max_value=32 * GIB))
def test_memory_problem_names_the_option_that_asks_too_much(allocate, touch, sharing,
                                                            available):
    total = 32 * GIB
    info = {"MemTotal": total, "SwapTotal": 0, "MemAvailable": available}
    original = (pressure._meminfo, pressure._cgroup_headroom, pressure._overcommit_strict)
    pressure._meminfo = lambda: info
    pressure._cgroup_headroom = lambda: None
    pressure._overcommit_strict = lambda: False
    try:
        problem = pressure.memory_problem(
            PressureSettings(allocate_bytes=allocate, touch_bytes=touch), sharing)
    finally:
        pressure._meminfo, pressure._cgroup_headroom, pressure._overcommit_strict = original
    if max(allocate, touch) > total:
        assert problem and "cannot allocate" in problem
        assert problem.startswith(("--distbench-allocate=", "--distbench-touch="))
    elif touch * sharing > available:
        assert problem and problem.startswith("--distbench-touch=")
        assert f"{sharing} pressured rank(s)" in problem
    else:
        assert problem is None
