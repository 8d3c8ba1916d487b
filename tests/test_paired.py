"""The paired statistics of A/B mode and the detectable arithmetic (pure logic, hypothesis)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy.stats import rankdata, wilcoxon

from pytest_distbench.results.statistics import paired

times = st.floats(min_value=1e-6, max_value=10.0, allow_nan=False)
round_pairs = st.lists(st.tuples(times, times), min_size=2, max_size=30)
thresholds = st.floats(min_value=0.0, max_value=1.0)


def split(pairs):
    return [b for b, _ in pairs], [c for _, c in pairs]


@settings(max_examples=60, deadline=None)
@given(round_pairs, thresholds)
def test_swapping_the_variants_mirrors_the_verdict(pairs, threshold):
    base, cand = split(pairs)
    forward = paired.judge_paired(base, cand, threshold)
    backward = paired.judge_paired(cand, base, threshold)
    mirror = {"regression": "improvement", "improvement": "regression", "slower": "faster",
              "faster": "slower", "unchanged": "unchanged", "inconclusive": "inconclusive"}
    assert backward.kind == mirror[forward.kind]
    assert backward.ratio == pytest.approx(1 / forward.ratio, rel=1e-9)
    assert backward.detectable == pytest.approx(forward.detectable, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(round_pairs, thresholds, st.floats(min_value=1e-3, max_value=1e3))
def test_a_common_speed_factor_changes_nothing(pairs, threshold, factor):
    # What the machine does to both variants alike is exactly what pairing cancels.
    base, cand = split(pairs)
    plain = paired.judge_paired(base, cand, threshold)
    scaled = paired.judge_paired([b * factor for b in base], [c * factor for c in cand], threshold)
    assert scaled.kind == plain.kind
    assert scaled.ratio == pytest.approx(plain.ratio, rel=1e-6)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=-1, max_value=1), min_size=1, max_size=40),
       st.sampled_from([0.8, 0.9, 0.95, 0.99]))
def test_interval_holds_the_estimate_and_widens_with_confidence(ratios, confidence):
    estimate, low, high = paired.hodges_lehmann_interval(ratios, confidence)
    assert low <= estimate <= high
    assert min(ratios) <= estimate <= max(ratios)
    wider = min(0.999, confidence + 0.009)
    _, wider_low, wider_high = paired.hodges_lehmann_interval(ratios, wider)
    assert wider_low <= low and high <= wider_high


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=-1, max_value=1), min_size=1, max_size=25, unique=True))
def test_exact_null_distribution_matches_scipy(ratios):
    # Our table of P(T+ <= t) (used for the interval) against scipy's exact signed-rank p-value.
    assume(all(r != 0 for r in ratios))
    assume(len({abs(r) for r in ratios}) == len(ratios))  # no ties in |r|
    ranks = {v: i + 1 for i, v in enumerate(sorted(abs(r) for r in ratios))}
    t_plus = sum(ranks[abs(r)] for r in ratios if r > 0)
    cdf = paired._signed_rank_cdf(len(ratios))
    ours = 1 - (cdf[t_plus - 1] if t_plus > 0 else 0.0)  # P(T+ >= t_plus)
    theirs = wilcoxon(ratios, alternative="greater", method="exact").pvalue
    assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(min_value=-1, max_value=1), min_size=1, max_size=70, unique=True))
def test_signed_rank_p_values_without_ties_are_scipys_exact_or_normal_ones(ratios):
    assume(all(r != 0 for r in ratios))
    assume(len({abs(r) for r in ratios}) == len(ratios))
    method = "exact" if len(ratios) <= paired.EXACT_SIGNED_RANK_UP_TO else "approx"
    slower, faster = paired.signed_rank_p_values(ratios)
    assert slower == pytest.approx(
        wilcoxon(ratios, alternative="greater", method=method).pvalue, rel=1e-9, abs=1e-12)
    assert faster == pytest.approx(
        wilcoxon(ratios, alternative="less", method=method).pvalue, rel=1e-9, abs=1e-12)


TIED = st.sampled_from([-0.3, -0.1, -0.05, 0.0, 0.05, 0.1, 0.2, 0.3])


def _enumerated_p_values(nonzero: list[float]) -> tuple[float, float]:
    """P(T+ >= t), P(T+ <= t) over all 2**n sign flips of scipy's average ranks of |r|."""
    ranks = rankdata(np.abs(nonzero))
    t_plus = ranks[np.asarray(nonzero) > 0].sum()
    flips = np.array(list(itertools.product((0, 1), repeat=len(nonzero))))
    sums = flips @ ranks
    return float(np.mean(sums >= t_plus - 1e-9)), float(np.mean(sums <= t_plus + 1e-9))


@settings(max_examples=100, deadline=None)
@given(st.lists(TIED, min_size=1, max_size=13))
def test_signed_rank_p_values_with_ties_and_zeros_count_every_sign_flip(ratios):
    # Zeros dropped, ties at their average rank, every sign flip counted (what scipy's
    # wilcoxon enumerates for ties up to 13 rounds; enumerated here directly, which is faster).
    nonzero = [r for r in ratios if r != 0]
    slower, faster = paired.signed_rank_p_values(ratios)
    if not nonzero:
        assert (slower, faster) == (1.0, 1.0)
        return
    assume(len({abs(r) for r in nonzero}) < len(nonzero))
    assert (slower, faster) == pytest.approx(_enumerated_p_values(nonzero), rel=1e-12)


def test_signed_rank_p_values_with_ties_are_scipys():
    ratios = [0.1, 0.1, 0.2, 0.2, 0.3, -0.1, 0.05, 0.05, 0.0]
    slower, faster = paired.signed_rank_p_values(ratios)
    assert slower == pytest.approx(wilcoxon(ratios, alternative="greater").pvalue, rel=1e-9)
    assert faster == pytest.approx(wilcoxon(ratios, alternative="less").pvalue, rel=1e-9)


@settings(max_examples=30, deadline=None)
@given(st.lists(TIED, min_size=paired.EXACT_SIGNED_RANK_UP_TO + 1, max_size=90))
def test_signed_rank_p_values_of_many_tied_rounds_are_scipys_normal_ones(ratios):
    # Above the exact counts: the tie-corrected normal approximation.
    assume(sum(r != 0 for r in ratios) > paired.EXACT_SIGNED_RANK_UP_TO)
    slower, faster = paired.signed_rank_p_values(ratios)
    for p, alternative in ((slower, "greater"), (faster, "less")):
        theirs = wilcoxon(ratios, alternative=alternative, method="approx",
                          zero_method="wilcox").pvalue
        if math.isfinite(theirs):
            assert p == pytest.approx(theirs, rel=1e-9, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=8, max_value=40), st.floats(min_value=1.2, max_value=3))
def test_a_consistent_slowdown_beyond_the_threshold_is_a_regression(rounds, factor):
    # Every round slower by the same factor, with a little round-to-round jitter.
    base = [1.0 + 0.01 * (i % 3) for i in range(rounds)]
    cand = [b * factor * (1 + 0.001 * (i % 2)) for i, b in enumerate(base)]
    v = paired.judge_paired(base, cand, threshold=0.10)
    assert v.kind == "regression"
    assert v.ratio_low > 1.10
    assert v.p_value < paired.DEFAULT_ALPHA


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=2, max_value=6))
def test_too_few_rounds_can_neither_flag_nor_gate(rounds):
    # 2^-n >= alpha: the signed-rank test cannot reach alpha, whatever the data.
    base = [1.0] * rounds
    cand = [2.0 + i * 0.01 for i in range(rounds)]
    v = paired.judge_paired(base, cand, threshold=0.10)
    assert v.kind == "inconclusive"  # a 2x change that cannot be shown: can't tell
    assert math.isinf(v.detectable) and not v.gateable


@settings(max_examples=60, deadline=None)
@given(st.floats(min_value=0, max_value=2), st.floats(min_value=0, max_value=2))
def test_detectable_grows_with_the_spread(a, b):
    low, high = sorted((a, b))
    assert paired.detectable_change(low) <= paired.detectable_change(high)
    assert paired.detectable_change(0.0) == 0.0


def test_detectable_arithmetic():
    # (z_0.99 + z_0.95) x se = (2.326 + 1.645) x 0.05 = 0.1986 in log: exp(.) - 1 = 21.97 %
    assert paired.detectable_change(0.05) == pytest.approx(math.expm1(3.9697 * 0.05), rel=1e-3)
    # Four times the rounds halve the standard error, hence the log of the detectable change.
    few = [0.1, -0.1, 0.05, -0.05, 0.0, 0.2, -0.2, 0.15, -0.15, 0.1]
    many = few * 4
    assert math.log1p(paired.paired_detectable(many)) == pytest.approx(
        math.log1p(paired.paired_detectable(few)) / 2, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=-5, max_value=5), min_size=1, max_size=30),
       st.floats(min_value=-5, max_value=5))
def test_robust_spread_ignores_location(values, shift):
    assert paired.robust_sd([v + shift for v in values]) == pytest.approx(
        paired.robust_sd(values), abs=1e-9)


def test_bad_rounds_are_refused():
    with pytest.raises(ValueError, match="unpaired"):
        paired.judge_paired([1.0, 2.0], [1.0], 0.1)
    with pytest.raises(ValueError, match="positive"):
        paired.judge_paired([1.0, 0.0], [1.0, 1.0], 0.1)
    with pytest.raises(ValueError, match="threshold"):
        paired.judge_paired([1.0, 2.0], [1.0, 2.0], -0.1)


@given(st.integers(min_value=2, max_value=60), st.integers(min_value=0, max_value=60),
       st.floats(min_value=1e-8, max_value=0.5))
def test_looks_come_every_rounds_rounds_up_to_the_extra_ones_where_the_last_can_reach(
        rounds, extra, level):
    plan = paired.look_rounds(rounds, extra, level)
    assert plan[0] == rounds
    if len(plan) == 1:
        # No extra rounds, or even all of them could not show a change at their share.
        assert extra == 0 or 0.5 ** (rounds + extra) >= level / len(
            range(rounds, rounds + extra + rounds, rounds))
        return
    # `rounds` more at a time, the last look at every allowed round, and it can reach its share
    # of the level (the exact test's smallest p is 2^-n).
    assert plan[-1] == rounds + extra
    assert all(0 < b - a <= rounds for a, b in itertools.pairwise(plan))
    assert all(b - a == rounds for a, b in itertools.pairwise(plan[:-1]))
    assert 0.5 ** plan[-1] < level / len(plan)


@settings(max_examples=60, deadline=None)
@given(round_pairs, thresholds)
def test_open_to_regression_is_what_more_rounds_could_still_make_a_regression(pairs, threshold):
    base, cand = split(pairs)
    verdict = paired.judge_paired(base, cand, threshold)
    is_open = paired.open_to_regression(verdict)
    # Decided: a regression, or an interval wholly within 1 + threshold (unchanged, faster,
    # improvement, or slower within the threshold): more rounds cannot make it a regression
    # without moving the estimate past the bound. Open: the rest.
    assert is_open == (verdict.kind != "regression" and verdict.ratio_high > 1 + threshold)
    if verdict.kind in ("unchanged", "improvement"):
        assert not is_open
    if verdict.kind == "inconclusive" and verdict.ratio_high > 1 + threshold:
        assert is_open


def test_a_slowdown_its_first_rounds_leave_open_is_decided_by_more():
    # 20 rounds of a 20 % slowdown with a noisy spread: slower, its interval reaching below
    # 1.10 (open); 40 rounds of the same spread narrow the interval past the bound.
    rng = np.random.default_rng(3)
    ratios = np.exp(np.log(1.2) + rng.normal(0, 0.15, 40))
    base = [1.0] * 40
    first = paired.judge_paired(base[:20], list(ratios[:20]), 0.1, alpha=0.005)
    both = paired.judge_paired(base, list(ratios), 0.1, alpha=0.005)
    assert paired.open_to_regression(first), first
    assert both.kind == "regression" and not paired.open_to_regression(both), both
