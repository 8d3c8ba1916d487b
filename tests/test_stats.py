import math
import random
import re
import statistics

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from pytest_distbench.results.statistics.stats import (
    Summary,
    algbw_gbps,
    busbw_gbps,
    per_iteration_max,
    percentile,
    rank_skew,
    stall_count,
    summarize,
)

# Hypothesis costs several ms per example here; these budgets keep the file near 3 s.
FAST = settings(max_examples=50, deadline=None)
MATRIX = settings(max_examples=30, deadline=None)

# Timing-like values: non-negative seconds; hypothesis favours 0 and other edge values.
timings = st.floats(min_value=0.0, max_value=1e3, allow_subnormal=False)
sample_lists = st.lists(timings, min_size=1, max_size=40)
any_samples = st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=1, max_size=40)


@st.composite
def rank_matrices(draw: st.DrawFn) -> list[list[float]]:
    ranks = draw(st.integers(min_value=1, max_value=6))
    iters = draw(st.integers(min_value=1, max_value=8))
    return [draw(st.lists(timings, min_size=iters, max_size=iters)) for _ in range(ranks)]


# --- percentile --------------------------------------------------------------


@pytest.mark.parametrize(
    ("samples", "q", "expected"),
    [
        ([5.0], 0, 5.0),
        ([5.0], 50, 5.0),
        ([5.0], 100, 5.0),
        ([1.0, 2.0], 50, 1.5),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
        ([1.0, 2.0, 3.0, 4.0], 25, 1.75),
        ([1.0, 2.0, 3.0, 4.0], 75, 3.25),
        ([1.0, 2.0, 3.0, 4.0], 0, 1.0),
        ([1.0, 2.0, 3.0, 4.0], 100, 4.0),
        ([0.0, 10.0, 20.0, 30.0, 40.0], 90, 36.0),
        ([0.0, 10.0, 20.0, 30.0, 40.0], 99, 39.6),
    ],
)
def test_percentile_examples(samples: list[float], q: float, expected: float) -> None:
    assert percentile(samples, q) == pytest.approx(expected)


@pytest.mark.parametrize("q", [-0.1, 100.1, math.nan, math.inf])
def test_percentile_rejects_q_out_of_range(q: float) -> None:
    with pytest.raises(ValueError, match="outside"):
        percentile([1.0, 2.0], q)


def test_percentile_rejects_empty() -> None:
    with pytest.raises(ValueError, match="no samples"):
        percentile([], 50)


@FAST
@given(any_samples, st.floats(min_value=0, max_value=100))
@example([1.0, 2.0, 3.0, 4.0], 33.3)
def test_percentile_matches_numpy(samples: list[float], q: float) -> None:
    ordered = sorted(samples)
    expected = float(np.percentile(np.array(ordered), q))
    # numpy's float lerp loses absolute precision relative to the samples' magnitude
    # (cancellation near zero), so the tolerance scales with the largest sample.
    scale = max(abs(ordered[0]), abs(ordered[-1]))
    assert percentile(ordered, q) == pytest.approx(expected, rel=1e-12, abs=1e-12 * scale)


def test_percentile_midpoint_is_exact_median() -> None:
    # a + (b - a) / 2 would give 65.97500000000001 here.
    samples = [1.9500000000000028, 130.0]
    assert percentile(samples, 50) == statistics.median(samples)


def test_percentile_rejects_non_finite_bracket() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        percentile([1.0, math.inf], 50)


@FAST
@given(any_samples, st.floats(0, 100), st.floats(0, 100))
def test_percentile_is_monotonic_and_bounded(samples: list[float], q1: float, q2: float) -> None:
    ordered = sorted(samples)
    lo, hi = min(q1, q2), max(q1, q2)
    assert ordered[0] <= percentile(ordered, lo) <= percentile(ordered, hi) <= ordered[-1]


# --- summarize ---------------------------------------------------------------


def test_summarize_example() -> None:
    s = summarize([4.0, 1.0, 3.0, 2.0])
    assert s.n == 4
    assert (s.min, s.max) == (1.0, 4.0)
    assert s.p50 == 2.5
    assert s.p75 == 3.25
    assert s.p90 == pytest.approx(3.7)
    assert s.p95 == pytest.approx(3.85)
    assert s.p99 == pytest.approx(3.97)
    assert s.mean == 2.5
    assert s.stddev == pytest.approx(statistics.stdev([1.0, 2.0, 3.0, 4.0]))
    assert s.iqr == pytest.approx(3.25 - 1.75)


def test_summarize_single_sample() -> None:
    s = summarize([0.25])
    assert s == Summary(
        n=1, min=0.25, p50=0.25, p75=0.25, p90=0.25, p95=0.25, p99=0.25, max=0.25,
        mean=0.25, stddev=0.0, iqr=0.0,
    )  # fmt: skip


def test_summary_as_dict_and_frozen() -> None:
    s = summarize([1.0, 2.0])
    d = s.as_dict()
    assert list(d) == [
        "n", "min", "p50", "p75", "p90", "p95", "p99", "max", "mean", "stddev", "iqr",
    ]  # fmt: skip
    assert d["n"] == 2 and isinstance(d["n"], int)
    assert d["p50"] == 1.5
    with pytest.raises(AttributeError):
        s.n = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("samples", "message"),
    [
        ([], "no samples"),
        ([1.0, math.nan], "non-finite"),
        ([math.inf], "non-finite"),
        ([1.0, -math.inf, 2.0], "non-finite"),
    ],
)
def test_summarize_rejects_bad_input(samples: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        summarize(samples)


def test_summarize_mean_stays_in_range_for_identical_values() -> None:
    # fsum(3 * [0.1]) / 3 rounds above 0.1; the mean must not exceed max.
    s = summarize([0.1] * 3)
    assert s.min == s.mean == s.max == 0.1
    assert s.stddev == 0.0


def test_summarize_accepts_integers_and_tuples() -> None:
    s = summarize((3, 1, 2))
    assert (s.min, s.p50, s.max, s.mean) == (1.0, 2.0, 3.0, 2.0)
    assert isinstance(s.min, float) and isinstance(s.max, float)


@FAST
@given(sample_lists)
def test_summarize_invariants(samples: list[float]) -> None:
    s = summarize(samples)
    assert s.n == len(samples)
    assert s.min <= s.p50 <= s.p75 <= s.p90 <= s.p95 <= s.p99 <= s.max
    assert s.min <= s.mean <= s.max
    assert s.min == min(samples) and s.max == max(samples)
    assert s.p50 == statistics.median(samples)
    assert s.iqr >= 0
    assert s.stddev >= 0
    if len(samples) > 1:
        assert s.stddev == pytest.approx(statistics.stdev(samples), rel=1e-9, abs=1e-12)
        assert s.mean == pytest.approx(statistics.fmean(samples), rel=1e-12)
    else:
        assert s.stddev == 0.0


@FAST
@given(sample_lists, st.randoms(use_true_random=False))
def test_summarize_is_permutation_invariant(samples: list[float], rnd: random.Random) -> None:
    shuffled = list(samples)
    rnd.shuffle(shuffled)
    assert summarize(shuffled) == summarize(samples)


# --- per_iteration_max -------------------------------------------------------


def test_per_iteration_max_example() -> None:
    assert per_iteration_max([[1.0, 5.0, 2.0], [3.0, 1.0, 2.5]]) == [3.0, 5.0, 2.5]
    assert per_iteration_max([[1.0, 2.0]]) == [1.0, 2.0]
    assert per_iteration_max([[], []]) == []


def test_per_iteration_max_rejects_ragged() -> None:
    with pytest.raises(ValueError, match=re.escape("different sample counts: [3, 2, 3]")):
        per_iteration_max([[1.0, 2.0, 3.0], [1.0, 2.0], [1.0, 2.0, 3.0]])


def test_per_iteration_max_rejects_no_ranks() -> None:
    with pytest.raises(ValueError, match="no ranks"):
        per_iteration_max([])


@MATRIX
@given(rank_matrices())
def test_per_iteration_max_properties(matrix: list[list[float]]) -> None:
    got = per_iteration_max(matrix)
    assert len(got) == len(matrix[0])
    for i, value in enumerate(got):
        column = [rank[i] for rank in matrix]
        assert all(value >= x for x in column)
        assert value in column


# --- rank_skew ---------------------------------------------------------------


def test_rank_skew_examples() -> None:
    assert rank_skew([[1.0, 2.0, 3.0]]) == 1.0
    assert rank_skew([[1.0], [1.0], [1.0], [1.0]]) == 1.0
    # p50s 1, 1, 3 -> median 1, slowest 3.
    assert rank_skew([[1.0, 1.0], [0.5, 1.5], [3.0, 3.0]]) == 3.0
    # Even count: p50s 1, 2, 3, 6 -> median (2 + 3) / 2 = 2.5, slowest 6.
    assert rank_skew([[1.0], [2.0], [3.0], [6.0]]) == pytest.approx(6.0 / 2.5)


def test_rank_skew_zero_median() -> None:
    assert rank_skew([[0.0], [0.0], [5.0]]) == 1.0
    assert rank_skew([[0.0]]) == 1.0


def test_rank_skew_allows_different_counts() -> None:
    assert rank_skew([[1.0, 1.0, 1.0], [2.0]]) == pytest.approx(2.0 / 1.5)


@pytest.mark.parametrize(
    ("matrix", "message"),
    [([], "no ranks"), ([[1.0], []], "no rank 1 samples"), ([[math.nan]], "non-finite")],
)
def test_rank_skew_rejects_bad_input(matrix: list[list[float]], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        rank_skew(matrix)


@MATRIX
@given(rank_matrices())
def test_rank_skew_at_least_one(matrix: list[list[float]]) -> None:
    skew = rank_skew(matrix)
    assert skew >= 1.0
    p50s = [statistics.median(rank) for rank in matrix]
    middle = statistics.median(p50s)
    if middle > 0:
        assert skew == pytest.approx(max(p50s) / middle)


@MATRIX
@given(rank_matrices(), st.integers(min_value=-20, max_value=20))
def test_rank_skew_is_scale_invariant(matrix: list[list[float]], exponent: int) -> None:
    # Power-of-two scaling is exact unless it underflows, so the ratio must match exactly.
    assume(all(x == 0 or x > 1e-290 for rank in matrix for x in rank))
    scaled = [[x * 2.0**exponent for x in rank] for rank in matrix]
    assert rank_skew(scaled) == rank_skew(matrix)


# --- stall_count -------------------------------------------------------------


def test_stall_count_examples() -> None:
    # Heavy tail like loopback: nine 10 us iterations and one 150 us stall.
    samples = [10e-6] * 9 + [150e-6]
    assert stall_count(samples) == 1
    assert stall_count(samples, ratio=20.0) == 0
    assert stall_count([1.0, 1.0, 5.0]) == 0  # exactly 5x is not a stall
    assert stall_count([1.0, 1.0, 5.000001]) == 1
    assert stall_count([2.0]) == 0


@pytest.mark.parametrize("ratio", [0.0, -1.0, math.nan])
def test_stall_count_rejects_bad_ratio(ratio: float) -> None:
    with pytest.raises(ValueError, match="ratio must be positive"):
        stall_count([1.0], ratio)


def test_stall_count_rejects_empty() -> None:
    with pytest.raises(ValueError, match="no samples"):
        stall_count([])


@FAST
@given(sample_lists, st.floats(min_value=1.0, max_value=50.0))
def test_stall_count_properties(samples: list[float], ratio: float) -> None:
    count = stall_count(samples, ratio)
    assert count == sum(x > ratio * statistics.median(samples) for x in samples)
    # Nothing at or below the median can stall, so at most half the samples do.
    assert 0 <= count <= len(samples) // 2


# --- bandwidth ---------------------------------------------------------------


def test_algbw_and_busbw() -> None:
    assert algbw_gbps(10**9, 1.0) == 1.0
    assert algbw_gbps(64 << 20, 0.001) == pytest.approx(67.108864)
    assert algbw_gbps(0, 1.0) == 0.0
    assert busbw_gbps(10.0, 2 * (4 - 1) / 4) == pytest.approx(15.0)
    assert busbw_gbps(3.0, 1.0) == 3.0


@pytest.mark.parametrize(
    ("nbytes", "seconds", "message"),
    [
        (1, 0.0, "time must be positive"),
        (1, -1.0, "time must be positive"),
        (1, math.nan, "time must be positive"),
        (1, math.inf, "time must be positive"),
        (-1, 1.0, "must not be negative"),
    ],
)
def test_algbw_rejects_bad_input(nbytes: int, seconds: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        algbw_gbps(nbytes, seconds)
