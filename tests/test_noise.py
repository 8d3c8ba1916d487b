"""The session interval (results/statistics/noise.py): the t quantile, the pooled run-to-run
noise, the interval a figure gets from it, the sampling target a precision stop uses, the
regimes of a point's runs, and the interval's coverage of a point's long-run value in
simulated sessions of correlated runs (issue 34, item 8)."""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq
from scipy.stats import norm
from scipy.stats import t as student_t

from pytest_distbench.harness.controller.revisits import PER_GROUP
from pytest_distbench.results.document.session_intervals import SESSION, Evidence, with_interval
from pytest_distbench.results.statistics.interval import (
    NORMAL_975,
    half_width_pct,
    median_interval,
)
from pytest_distbench.results.statistics.noise import (
    NOISE_FLOOR_SHARE,
    RunNoise,
    pooled_run_noise,
    regimes,
    sampling_target,
    session_interval,
    stratum_noise,
    t_975,
)

# -- the t quantile ----------------------------------------------------------------------------


def test_the_t_quantile_is_students_for_every_degree_of_freedom():
    for dof in range(1, 201):
        exact = float(student_t.ppf(0.975, dof))
        assert abs(t_975(dof) / exact - 1) < 1e-3, dof
    with pytest.raises(ValueError, match="degree of freedom"):
        t_975(0)


# -- the pooled run-to-run noise ---------------------------------------------------------------


def test_the_noise_pools_the_log_spread_of_the_points_with_two_runs_or_more():
    noise = pooled_run_noise({
        "a": [1.0, math.exp(0.2)],  # logs 0, 0.2: squares 0.02, 1 dof
        "b": [2.0, 2 * math.exp(-0.1), 2 * math.exp(0.1)],  # squares 0.02, 2 dof
        "c": [5.0],  # one run: nothing to pool
        "d": [3.0, -1.0, 0.0, math.nan],  # one usable run: nothing to pool
    })
    assert noise is not None
    assert noise.sd_log == pytest.approx(math.sqrt(0.04 / 3))
    assert (noise.dof, noise.runs, noise.points) == (3, 5, 2)
    assert noise.half_log() == pytest.approx(t_975(3) * math.sqrt(0.04 / 3))
    assert noise.pct() == pytest.approx(100 * math.expm1(noise.half_log()))
    assert noise.as_dict()["half_width_pct"] == pytest.approx(noise.pct())


def test_no_noise_without_a_point_run_twice():
    assert pooled_run_noise({}) is None
    assert pooled_run_noise({"a": [1.0], "b": [2.0, 0.0], "c": [-1.0, 3.0]}) is None


@given(st.dictionaries(st.integers(0, 20),
                       st.lists(st.floats(1e-6, 1e3), min_size=2, max_size=6),
                       min_size=1, max_size=6),
       st.floats(1e-3, 1e3))
def test_the_noise_is_a_spread_of_each_point_around_its_own_centre(runs, scale):
    # Each point has a value of its own: scaling one point's runs changes nothing.
    noise = pooled_run_noise(runs)
    scaled = pooled_run_noise({k: [v * scale for v in vs] if k == min(runs) else vs
                               for k, vs in runs.items()})
    assert noise is not None and scaled is not None
    assert scaled.sd_log == pytest.approx(noise.sd_log, rel=1e-6, abs=1e-9)
    assert noise.dof == sum(len(v) for v in runs.values()) - len(runs)


# -- the session interval ----------------------------------------------------------------------

noises = st.builds(RunNoise, st.floats(0.0, 1.0), st.integers(1, 300), st.just(2),
                   st.just(1))


@given(st.floats(1e-7, 1e4), st.floats(0.0, 0.9), st.floats(0.0, 2.0), noises)
def test_the_session_interval_holds_the_sampling_interval_and_the_noise_alone(
        figure, below, above, noise):
    sampling = (figure * (1 - below), figure * (1 + above))
    low, high = session_interval(figure, sampling, noise)
    assert low <= sampling[0] * (1 + 1e-12) and high >= sampling[1] * (1 - 1e-12)
    spread = math.exp(noise.half_log())
    assert low <= figure / spread * (1 + 1e-12) and high >= figure * spread * (1 - 1e-12)


@given(st.floats(1e-7, 1e4), noises)
def test_without_a_sampling_interval_the_noise_alone_makes_it(figure, noise):
    half = t_975(noise.dof) * noise.sd_log
    for sampling in (None, (0.0, figure * 2), (-1.0, figure)):
        low, high = session_interval(figure, sampling, noise)
        assert low == pytest.approx(figure * math.exp(-half))
        assert high == pytest.approx(figure * math.exp(half))


def test_a_figure_that_is_not_positive_gets_no_interval():
    noise = RunNoise(0.1, 4, 12, 8)
    for figure in (0.0, -1.0, math.inf, math.nan):
        assert session_interval(figure, (1.0, 2.0), noise) is None


# -- the sampling target -----------------------------------------------------------------------


@given(st.floats(1e-3, 0.5))
def test_without_noise_the_sampling_target_is_the_users(target):
    assert sampling_target(target, None) == target


@given(st.floats(1e-3, 0.5), noises)
def test_the_sampling_target_never_asks_for_precision_the_noise_swamps(target, noise):
    between = math.expm1(noise.half_log())
    assert sampling_target(target, noise) >= NOISE_FLOOR_SHARE * between * (1 - 1e-12)


@given(st.floats(1e-3, 0.5), st.floats(0.0, 1.0), st.integers(1, 300))
def test_a_run_stopped_at_the_sampling_target_prints_the_users_target(target, share, dof):
    # A noise below the target (share of it): a run whose symmetric sampling interval just
    # met the sampling target prints a combined interval within the user's target.
    noise = RunNoise(math.log1p(share * target) / t_975(dof), dof, dof + 1, 1)
    reach = sampling_target(target, noise)
    low, high = session_interval(1.0, (1 - reach, 1 + reach), noise)
    between = math.expm1(noise.half_log())
    if reach > NOISE_FLOOR_SHARE * between:  # else the floor, not the target, stopped it
        assert half_width_pct(low, high, 1.0) / 100 <= target * (1 + 1e-3)


# -- regimes -----------------------------------------------------------------------------------


@given(st.integers(1, 10), st.integers(1, 10), st.randoms(use_true_random=False))
def test_runs_far_apart_are_regimes_and_runs_that_agree_are_one(fast, slow, rng):
    values = ([0.2e-3 * rng.uniform(0.9, 1.1) for _ in range(fast)]
              + [4e-3 * rng.uniform(0.9, 1.1) for _ in range(slow)])
    rng.shuffle(values)
    found = regimes(values)
    assert [count for _, count in found] == [fast, slow]
    assert 0.17e-3 < found[0][0] < 0.23e-3 and 3.5e-3 < found[1][0] < 4.5e-3
    agreeing = [v for v in values if v < 1e-3]
    assert regimes(agreeing) == [(found[0][0], fast)]


def test_no_regimes_without_a_positive_run():
    assert regimes([]) == [] and regimes([0.0, -1.0, math.nan]) == []


# -- coverage in simulated sessions ------------------------------------------------------------

SESSIONS = 240  # per example: coverage is counted over all their judged runs


def revisits_per_point(points: int) -> list[int]:
    """The harness's plan for one group: PER_GROUP revisits spread over the points in their
    order (round robin where the group has fewer points)."""
    wanted = PER_GROUP
    return [wanted // points + (k < wanted % points) for k in range(points)]


def simulate(seed: int, points: int, sd_offset: float, sd_sample: float, phi: float, n: int,
             slow_share: float = 0.0, slow_ratio: float = 20.0) -> tuple[int, int]:
    """SESSIONS simulated sessions of one group of `points` points; (covered, judged).

    A point's true value v is known; each run of it draws an offset of its own (normal on the
    log scale, sd `sd_offset`; with `slow_share`, a slow regime `slow_ratio` times v instead
    of v with that probability) and n samples exp(log v + offset + e_t) around it, e an
    AR(1) series (stationary, normal, sd `sd_sample`, lag-1 correlation `phi`). Every point
    runs once, then the harness's revisits; each point's first run is judged as the record
    prints it: its median, the order-statistics interval of its samples, widened by the noise
    pooled over the group's runs."""
    rng = np.random.default_rng(seed)
    runs_of = [1 + r for r in revisits_per_point(points)]
    total = sum(runs_of) * SESSIONS
    true = np.exp(rng.uniform(math.log(1e-5), math.log(1e-2), SESSIONS * points))
    centre = np.log(np.repeat(true, np.tile(runs_of, SESSIONS)))
    centre += rng.normal(0.0, sd_offset, total)
    centre += np.where(rng.random(total) < slow_share, math.log(slow_ratio), 0.0)
    e = rng.normal(0.0, sd_sample, total)
    innovation = math.sqrt(1 - phi * phi) * sd_sample
    logs = np.empty((total, n))
    for i in range(n):
        if i:
            e = phi * e + rng.normal(0.0, innovation, total)
        logs[:, i] = e
    samples = np.exp(logs + centre[:, None])
    medians = np.median(samples, axis=1)
    long_run = true * long_run_factor(slow_share, slow_ratio, math.hypot(sd_offset, sd_sample))
    covered = judged = row = 0
    for session in range(SESSIONS):
        figures: dict[int, list[float]] = {}
        first: dict[int, tuple[float, tuple[float, float] | None]] = {}
        for point in range(points):
            figures[point] = [float(m) for m in medians[row:row + runs_of[point]]]
            first[point] = (figures[point][0], median_interval(samples[row].tolist()))
            row += runs_of[point]
        noise = pooled_run_noise(figures)
        assert noise is not None
        for point, (figure, sampling) in first.items():
            bounds = session_interval(figure, sampling, noise)
            assert bounds is not None
            covered += bounds[0] <= long_run[session * points + point] <= bounds[1]
            judged += 1
    return covered, judged


@cache
def long_run_factor(slow_share: float, slow_ratio: float, sd_log: float) -> float:
    """The long-run value over v: the median of every sample the point gives over many runs
    (what bench_coverage.py's long runs estimate, every sample pooled). A sample's log is
    normal around log v (sd `sd_log`: offset and AR(1) together) or, in the slow regime,
    around log v + log slow_ratio; without regimes, symmetric around log v, so exactly v."""
    if not slow_share:
        return 1.0
    shift = math.log(slow_ratio)

    def below(x: float) -> float:
        return ((1 - slow_share) * norm.cdf(x / sd_log)
                + slow_share * norm.cdf((x - shift) / sd_log) - 0.5)

    return math.exp(brentq(below, -10 * sd_log, shift + 10 * sd_log))


@settings(max_examples=12, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2 ** 32 - 1), points=st.integers(1, 12),
       sd_offset=st.floats(0.05, 0.20), sd_sample=st.floats(0.02, 0.30),
       phi=st.floats(0.5, 0.95), n=st.integers(30, 300))
def test_the_interval_covers_the_long_run_value_of_correlated_runs(
        seed, points, sd_offset, sd_sample, phi, n):
    # Simulated 2026-11-27 over a grid of these parameters: 95-98 %, lowest with many
    # points and few revisits (12 points: 95.2 %), where a judged run's noise estimate is
    # independent of it and the t quantile is exact.
    covered, judged = simulate(seed, points, sd_offset, sd_sample, phi, n)
    assert covered / judged >= 0.93, f"{covered}/{judged}"


@settings(max_examples=6, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2 ** 32 - 1), slow_share=st.floats(0.05, 0.5))
def test_the_interval_of_a_point_with_regimes_covers_the_long_run_value_nine_times_in_ten(
        seed, slow_share):
    """Each run lands in a fast regime (v, e.g. 0.2 ms) or, with probability `slow_share`, a
    slow one (20 v, 4 ms); the long-run value is what bench_coverage.py takes as it: the
    median of every sample of the point's long runs pooled, which a long run spanning many
    regimes gives (long_run_factor: within the fast regime for slow_share < 0.5, the
    geometric midpoint at 0.5).

    At the 93 % line, not safely above it: with 4 revisits per group of 8 points (this
    simulate, 1500 sessions each, 2026-11-27): slow_share 0.05: 94.3 %, 0.1: 93.0 %, 0.2:
    93.0 %, 0.3: 93.4 %, 0.5: 93.2 % (an earlier 600-session run: 92.3-94.3 %), so 240
    sessions cannot assert 93 % without flaking; asserted here: 90 %. The misses are the runs
    of the minority regime, covered only when some revisit of the group landed in another
    regime than its point's first run (at 0.1, 48 % of them; the majority's runs 98 %): the
    noise is learned from 4 pairs, and when all 4 agree the interval is one regime's."""
    covered, judged = simulate(seed, 8, 0.1, 0.1, 0.9, 100, slow_share=slow_share)
    assert covered / judged >= 0.90, f"{covered}/{judged}"


# -- one flipping point among quiet ones (issue 38, items 3 and 6) -----------------------------

QUIET_POINTS = 29
FLIP_RATIO = 1.7


def flip_session(rng: np.random.Generator, quiet_sd: float, sampling_sd: float,
                 flip_revisited: bool) -> list[tuple[bool, dict, float, float]]:
    """One simulated session of one stratum as the harness sees it: 29 quiet points whose
    runs agree within about 1 % (run offset `quiet_sd` on the log scale, each run's median
    off by `sampling_sd` more, which its sampling interval knows) and one point whose runs
    land in one of two regimes FLIP_RATIO apart, half the time each. PER_GROUP points are
    run again (the flipping one among them when `flip_revisited`); each record is made as
    the harness makes it (the run nearest the median of its runs, with_interval from the
    stratum's noise). Per point: (flips, its sealed record, its long-run value, the 90th
    percentile of |run / median - 1| over ten runs of it: the half-width it needed)."""
    values = np.exp(rng.uniform(math.log(1e-4), math.log(1e-2), QUIET_POINTS + 1))
    flip = QUIET_POINTS

    def run(point: int) -> float:
        shift = math.log(FLIP_RATIO) * (rng.random() < 0.5) if point == flip else 0.0
        return float(values[point] * math.exp(shift + rng.normal(0, quiet_sd)
                                              + rng.normal(0, sampling_sd)))

    revisited = list(rng.choice(QUIET_POINTS, PER_GROUP - flip_revisited, replace=False))
    revisited += [flip] * flip_revisited
    runs = {p: [run(p)] for p in range(QUIET_POINTS + 1)}
    for p in revisited:
        runs[p].append(run(p))
    noise = stratum_noise(runs)
    out = []
    for p, figures in runs.items():
        centre = sorted(figures)[(len(figures) - 1) // 2]
        own = list(figures)
        own.remove(centre)
        sampling = (centre * math.exp(-NORMAL_975 * sampling_sd),
                    centre * math.exp(NORMAL_975 * sampling_sd))
        record = {"id": str(p), "summary": {"p50": centre}, "figures": {},
                  "sampling_ci": {"low": sampling[0], "high": sampling[1]}}
        sealed = with_interval(record, Evidence(SESSION, noise, "s", tuple(own)))
        # The long-run value: every sample of many runs pooled (a flip's: the geometric
        # midpoint of its two regimes, half the runs in each).
        long_run = float(values[p] * (math.sqrt(FLIP_RATIO) if p == flip else 1.0))
        repeats = [run(p) for _ in range(10)]
        middle = float(np.median(repeats))
        needed = float(np.quantile([abs(r / middle - 1) for r in repeats], 0.9,
                                   method="inverted_cdf"))
        out.append((p == flip, sealed, long_run, needed))
    return out


@settings(max_examples=8, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2 ** 32 - 1), quiet_sd=st.floats(0.001, 0.004),
       sampling_sd=st.floats(0.0005, 0.003), flip_revisited=st.booleans())
def test_a_flipping_point_widens_its_own_interval_never_its_quiet_neighbours(
        seed, quiet_sd, sampling_sd, flip_revisited):
    rng = np.random.default_rng(seed)
    covered = judged = 0
    ratios = []
    for _ in range(60):
        for flips, record, long_run, needed in flip_session(rng, quiet_sd, sampling_sd,
                                                            flip_revisited):
            ci = record["p50_ci"]
            hit = ci["low"] <= long_run <= ci["high"]
            covered += hit
            judged += 1
            if flips and ci.get("regimes"):  # its runs landed in both: it spans them
                assert hit and len(ci["regimes"]) == 2, ci
            if not flips:
                ratios.append(ci["half_width_pct"] / 100 / max(needed, 1e-9))
    # Honest for every point: at least 90 % covered (the flipping one is missed only where
    # its runs all landed in one regime).
    assert covered / judged >= 0.90, f"{covered}/{judged}"
    # Tight for the quiet ones: their median ± at most twice what they needed, whether or not
    # the flip was among the points run again (its noise is its own).
    assert float(np.median(ratios)) <= 2.0, float(np.median(ratios))
