"""Change points of a history of p50s (results/statistics/changepoints.py): pure logic,
hypothesis."""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_distbench.results.statistics import changepoints as cp

positive = st.floats(min_value=1e-7, max_value=1e3, allow_nan=False, allow_infinity=False)
seeds = st.integers(min_value=0, max_value=2**32 - 1)
# The fewest runs before a step of MIN_SIZE runs with which the split can reach the default
# alpha: the rank test's smallest two-sided p is 2 / C(before + after, after).
BEFORE = next(b for b in range(cp.MIN_SIZE, 1000)
              if 2 / math.comb(b + cp.MIN_SIZE, cp.MIN_SIZE) < cp.DEFAULT_ALPHA)


def noisy(seed: int, n: int, sd: float, level: float = 1.0) -> list[float]:
    return list(level * np.exp(np.random.default_rng(seed).normal(0.0, sd, n)))


def test_a_step_with_fewer_runs_before_it_is_not_found():
    values = [1 + i / 1000 for i in range(BEFORE)] + [2 + i / 1000 for i in range(cp.MIN_SIZE)]
    assert [p.run for p in cp.change_points(values[1:])] == []
    assert [p.run for p in cp.change_points(values)] == [BEFORE]


@settings(max_examples=40, deadline=None)
@given(positive, st.integers(min_value=0, max_value=150))
def test_a_constant_series_has_none(value, n):
    assert cp.change_points([value] * n) == []
    assert cp.segment_start([value] * n) == 0


@settings(max_examples=40, deadline=None)
@given(st.lists(positive, max_size=2 * cp.MIN_SIZE - 1))
def test_a_short_series_has_none(values):
    assert cp.change_points(values) == []


@settings(max_examples=40, deadline=None)
@given(seeds, st.integers(min_value=BEFORE, max_value=70),
       st.integers(min_value=cp.MIN_SIZE, max_value=40), st.sampled_from([1.3, 1 / 1.3]),
       st.floats(min_value=0.0, max_value=0.02), positive)
def test_a_clean_step_is_found_at_the_run_it_started(seed, before, after, factor, sd, level):
    values = noisy(seed, before + after, sd, level)
    values[before:] = [v * factor for v in values[before:]]
    (point,) = cp.change_points(values)
    assert point.run == before
    assert point.change_pct == pytest.approx((factor - 1) * 100, abs=10 * sd * 100 + 1e-6)
    assert point.after / point.before == pytest.approx(1 + point.change_pct / 100)
    assert 0 < point.p < cp.DEFAULT_ALPHA
    assert cp.segment_start(values) == before


@settings(max_examples=40, deadline=None)
@given(seeds, st.integers(min_value=30, max_value=80),
       st.integers(min_value=1, max_value=cp.MIN_SIZE - 1))
def test_a_few_odd_runs_are_not_a_segment(seed, n, odd):
    # a burst shorter than MIN_SIZE, in the middle or as the newest runs (a step not yet
    # MIN_SIZE runs old: it waits for its fifth run)
    for start in (n // 2, n - odd):
        values = noisy(seed, n, 0.01)
        values[start:start + odd] = [2 * v for v in values[start:start + odd]]
        assert cp.change_points(values) == []


@settings(max_examples=30, deadline=None)
@given(seeds, st.integers(min_value=10, max_value=100),
       st.lists(st.tuples(st.integers(min_value=0, max_value=99),
                          st.floats(min_value=0.5, max_value=2.0)), max_size=3),
       st.floats(min_value=1e-3, max_value=1e3))
def test_scaling_every_value_changes_nothing(seed, n, steps, factor):
    values = noisy(seed, n, 0.03)
    for at, step in steps:
        values[at:] = [v * step for v in values[at:]]
    plain = cp.change_points(values)
    scaled = cp.change_points([v * factor for v in values])
    assert [p.run for p in scaled] == [p.run for p in plain]
    for a, b in zip(plain, scaled, strict=True):
        assert b.p == pytest.approx(a.p, rel=1e-9)
        assert b.change_pct == pytest.approx(a.change_pct, rel=1e-6, abs=1e-9)
        assert b.before == pytest.approx(a.before * factor, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.lists(positive, max_size=120), st.sampled_from([1e-4, 1e-2, 0.5]),
       st.integers(min_value=2, max_value=8))
def test_every_point_is_a_kept_split_and_segment_start_the_last(values, alpha, min_size):
    points = cp.change_points(values, alpha=alpha, min_size=min_size)
    runs = [p.run for p in points]
    bounds = [0, *runs, len(values)]
    assert runs == sorted(set(runs))
    assert not runs or all(b - a >= min_size for a, b in pairwise(bounds))
    for i, point in enumerate(points):
        assert 0 < point.p < alpha <= 1
        assert point.before == pytest.approx(float(np.median(values[bounds[i]:point.run])))
        assert point.after == pytest.approx(float(np.median(values[point.run:bounds[i + 2]])))
    assert cp.segment_start(values, alpha=alpha, min_size=min_size) == (runs[-1] if runs else 0)


@settings(max_examples=30, deadline=None)
@given(seeds)
def test_a_step_each_way_gives_a_change_each_way(seed):
    values = noisy(seed, 60, 0.01)
    values[20:40] = [v * 1.5 for v in values[20:40]]
    assert [(p.run, p.change_pct > 0) for p in cp.change_points(values)] == \
        [(20, True), (40, False)]


@pytest.mark.parametrize("bad, name", [
    ([1.0, 0.0, 1.0], "run 1 is 0.0"), ([1.0, -2.0], "run 1 is -2.0"),
    ([math.nan], "run 0 is nan"), ([1.0, 1.0, math.inf], "run 2 is inf"),
    ([1.0, "2"], "run 1 is '2'"), ([True], "run 0 is True"),
])
def test_bad_values_are_named(bad, name):
    with pytest.raises(ValueError, match=f"p50s must be finite positive numbers: {name}"):
        cp.change_points(bad)


@pytest.mark.parametrize("kwargs, name", [({"alpha": 0}, "alpha"), ({"alpha": 1.5}, "alpha"),
                                          ({"min_size": 1}, "min_size"),
                                          ({"min_size": 2.5}, "min_size")])
def test_bad_settings_are_named(kwargs, name):
    with pytest.raises(ValueError, match=name):
        cp.change_points([1.0] * 20, **kwargs)
