"""The headline's 95 % interval: order statistics of the median, block bootstrap of a rate."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_distbench.results.statistics.interval import (
    block_bootstrap_mean,
    median_interval,
    median_ranks,
    p50_interval,
)
from pytest_distbench.results.statistics.stats import summarize

times = st.lists(st.floats(min_value=0, max_value=10, allow_nan=False), min_size=1,
                 max_size=300)


@given(times)
def test_the_interval_holds_the_sample_median_within_the_samples(samples):
    bounds = median_interval(samples)
    if len(samples) < 6:
        assert bounds is None  # no 95 % interval from so few: none is invented
        return
    low, high = bounds
    p50 = summarize(samples).p50
    assert min(samples) <= low <= p50 <= high <= max(samples)
    stored = p50_interval(samples, p50)
    assert (stored["low"], stored["high"]) == bounds and stored["level"] == 0.95


@given(times)
def test_a_monotone_transform_moves_the_interval_with_it(samples):
    # Order statistics: a rate k / t takes its interval from the same two samples, inverted.
    bounds = median_interval(samples)
    positive = [t + 1e-3 for t in samples]
    rates = median_interval([1 / t for t in positive])
    if bounds is None:
        assert rates is None
        return
    low, high = median_interval(positive)
    assert math.isclose(rates[0], 1 / high) and math.isclose(rates[1], 1 / low)
    squared = median_interval([t * t for t in samples])
    # Within rounding, as the rates above: CI's hypothesis found 25.608949760517405 against
    # 25.6089497605174 (the same order statistic, squared along another path).
    assert squared is not None
    assert math.isclose(squared[0], bounds[0] ** 2) and math.isclose(squared[1], bounds[1] ** 2)


@given(st.integers(min_value=6, max_value=5000))
def test_ranks_cover_95_percent_and_narrow_with_n(n):
    low, high = median_ranks(n)
    assert 1 <= low <= (n + 1) / 2 <= high <= n and low + high == n + 1
    if n <= 1000:  # exact: P(l <= B <= u - 1) >= 95 %, and one rank narrower is not
        coverage = sum(math.comb(n, k) for k in range(low, high)) / 2**n
        assert coverage >= 0.95
        if low + 1 < high - 1:
            assert sum(math.comb(n, k) for k in range(low + 1, high - 1)) / 2**n < 0.95
    # The interval's share of the ranks shrinks like 1 / sqrt(n).
    assert (high - low) / n <= 4.5 / math.sqrt(n)
    bigger = median_ranks(4 * n)
    assert (bigger[1] - bigger[0]) / (4 * n) < (high - low) / n or n < 10


def test_the_median_interval_covers_a_skewed_median_95_percent_of_the_time():
    rng = random.Random(7)
    true_median = math.exp(0.0)  # lognormal(0, 1): median 1, heavy right tail
    for n in (10, 40, 200):
        hits = 0
        for _ in range(2000):
            low, high = median_interval([rng.lognormvariate(0, 1) for _ in range(n)])
            hits += low <= true_median <= high
        assert hits / 2000 >= 0.93, (n, hits)


def test_the_block_bootstrap_covers_the_mean_of_a_skewed_rate():
    rng = random.Random(11)
    true_mean = math.exp(0.5 * 0.6**2)  # lognormal(0, 0.6)
    hits = 0
    draws = 200
    for _ in range(draws):
        values = [rng.lognormvariate(0, 0.6) for _ in range(300)]
        low, high = block_bootstrap_mean(values, resamples=400)
        hits += low <= true_mean <= high
    assert hits / draws >= 0.88, hits


@settings(max_examples=50)
@given(st.lists(st.floats(min_value=1e-6, max_value=1.0), min_size=30, max_size=400))
def test_the_bootstrap_is_within_the_data_fixed_by_its_seed_and_needs_ten_blocks(values):
    low, high = block_bootstrap_mean(values)
    assert min(values) - 1e-12 <= low <= high <= max(values) + 1e-12
    assert block_bootstrap_mean(values) == (low, high)
    assert block_bootstrap_mean(values[:9]) is None
