"""The one rule every comparison words its verdict by, and the session's family-wise levels
(results/statistics/vocabulary.py; docs/gating.md)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_distbench.results.statistics import vocabulary
from pytest_distbench.results.statistics.paired import judge_paired
from pytest_distbench.results.statistics.runs import judge_history

JUDGED = {"regression", "improvement", "slower", "faster", "unchanged", "inconclusive"}
MIRROR = {"regression": "improvement", "improvement": "regression", "slower": "faster",
          "faster": "slower", "unchanged": "unchanged", "inconclusive": "inconclusive"}

ps = st.floats(min_value=0.0, max_value=1.0)
levels = st.floats(min_value=1e-9, max_value=0.5)
logs = st.floats(min_value=-3.0, max_value=3.0)
thresholds = st.floats(min_value=0.0, max_value=1.0)


@st.composite
def points(draw):
    """The inputs of one verdict: two one-sided p's that add up to at least 1 (as any test's
    do), an interval around an estimate, a threshold, a level and whether it can gate."""
    p_slower = draw(ps)
    p_faster = draw(st.floats(min_value=1.0 - p_slower, max_value=1.0))
    low = draw(logs)
    high = low + draw(st.floats(min_value=0.0, max_value=2.0))
    return dict(p_slower=p_slower, p_faster=p_faster, low=low, high=high,
                threshold=draw(thresholds), gateable=draw(st.booleans()))


@given(points(), levels)
def test_every_verdict_is_a_word_of_the_vocabulary(point, level):
    assert vocabulary.decide(level=level, **point) in JUDGED


@given(points(), levels)
def test_a_regression_is_shown_beyond_the_threshold_by_a_comparison_that_gates(point, level):
    kind = vocabulary.decide(level=level, **point)
    if kind == "regression":
        assert point["p_slower"] < level and point["gateable"]
        assert point["low"] > math.log1p(point["threshold"])
    if point["p_slower"] >= level or not point["gateable"]:
        assert kind != "regression"


@given(points(), levels)
def test_the_rule_is_symmetric(point, level):
    mirrored = dict(point, p_slower=point["p_faster"], p_faster=point["p_slower"],
                    low=-point["high"], high=-point["low"])
    assert vocabulary.decide(level=level, **mirrored) == MIRROR[
        vocabulary.decide(level=level, **point)]


@given(points(), levels, st.floats(min_value=0.0, max_value=1.0))
def test_a_lower_level_never_makes_a_regression(point, level, shrink):
    lower = level * shrink if level * shrink > 0 else level
    if vocabulary.decide(level=level, **point) != "regression":
        assert vocabulary.decide(level=lower, **point) != "regression"


@given(points(), levels)
def test_unchanged_and_inconclusive_are_told_apart_by_the_interval_alone(point, level):
    kind = vocabulary.decide(level=level, **point)
    limit = math.log1p(point["threshold"])
    if kind == "unchanged":
        assert -limit <= point["low"] and point["high"] <= limit
    if kind == "inconclusive":
        assert point["low"] < -limit or point["high"] > limit


def test_only_slower_and_faster_read_not_gateable():
    assert [vocabulary.label(k) for k in sorted(JUDGED)] == [
        "faster, not gateable", "improvement", "inconclusive", "regression",
        "slower, not gateable", "unchanged"]


@given(st.integers(min_value=1, max_value=500), st.integers(min_value=1, max_value=50))
def test_bonferroni_level_of_a_point(tests, points_in_test):
    level = vocabulary.point_level(tests, points_in_test)
    assert level == pytest.approx(0.01 / (tests * points_in_test))
    # Every point of every test at its level: the union bound holds the family to 1 %.
    assert tests * points_in_test * level == pytest.approx(0.01)


@given(st.lists(st.integers(min_value=1, max_value=30), min_size=1, max_size=60))
def test_a_session_of_tests_with_different_points_sums_to_its_rate(points_per_test):
    total = sum(k * vocabulary.point_level(len(points_per_test), k) for k in points_per_test)
    assert total == pytest.approx(vocabulary.FAMILY_ALPHA)


def test_the_family_clause_states_the_rule_and_the_level():
    assert vocabulary.family_clause(0.01, 67, [0.01 / 67] * 3) == (
        "family-wise 1 % over 67 tests (Bonferroni: each point at p < 0.00015)")
    mixed = vocabulary.family_clause(0.01, 4, [0.0025, 0.00125])
    assert "each point at p < 1 % / (4 x its test's points): 0.0013 to 0.0025" in mixed


def test_the_issue_rows_read_what_they_show():
    """Issue 52's A/B rows: a slowdown shown at p < 0.01 whose interval reaches into the
    threshold is "slower", not "unchanged"; an interval of +-70 % that shows nothing is
    "inconclusive"; a 31x speed-up shown beyond the threshold is an improvement."""
    slower = vocabulary.decide(p_slower=0.0077, p_faster=0.99, level=0.01,
                               low=math.log(1.030), high=math.log(1.410), threshold=0.1)
    assert slower == "slower"
    wide = vocabulary.decide(p_slower=0.31, p_faster=0.69, level=0.01, low=math.log(0.732),
                             high=math.log(1.695), threshold=0.1)
    assert wide == "inconclusive"
    fast = vocabulary.decide(p_slower=1.0, p_faster=1e-6, level=0.01, low=math.log(0.030),
                             high=math.log(0.036), threshold=0.1)
    assert fast == "improvement"


def test_paired_and_history_verdicts_take_the_level_as_their_alpha():
    base = [1.0 + 0.001 * i for i in range(20)]
    cand = [b * 1.3 for b in base]
    shown = judge_paired(base, cand, 0.1, alpha=0.01)
    assert shown.kind == "regression" and shown.level == 0.01
    # 20 rounds all slower: p = 2^-20; a level below it cannot be met.
    assert judge_paired(base, cand, 0.1, alpha=1e-7).kind == "inconclusive"
    assert judge_paired(base, cand, 0.1, alpha=1e-7).detectable == math.inf
    history = [1.00, 1.01, 0.99, 1.00, 1.02]
    judged = judge_history(history, 1.25, 0.1, alpha=0.01)
    assert judged.kind == "regression" and judged.p_value < 0.01
    assert judged.baseline_p50 == pytest.approx(1.0)
    strict = judge_history(history, 1.25, 0.1, alpha=judged.p_value / 2)
    assert strict.kind == "inconclusive"
