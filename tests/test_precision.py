"""Precision-targeted sampling (--distbench-precision): a budget-bound point stops once the 95 %
interval of its record's p50 (slowest rank per iteration) is within the target, every rank
after the same iteration; a point whose budget runs out first is marked in the table."""

from __future__ import annotations

import json
import statistics

from hypothesis import given
from hypothesis import strategies as st

from pytest_distbench.harness.measure import _precise
from pytest_distbench.results.statistics.interval import median_interval


@given(st.lists(st.floats(1e-6, 1.0), min_size=1, max_size=300), st.floats(0.001, 0.5))
def test_precise_means_the_median_interval_is_within_the_target(samples, target):
    bounds = median_interval(samples)
    expected = bounds is not None and (bounds[1] - bounds[0]) / 2 / statistics.median(
        samples) <= target
    assert _precise(samples, target) == expected


BENCH = """
import os, random, time, pytest

@pytest.mark.distbench
def test_steady(distbench):
    distbench.measure(lambda: time.sleep(0.001))

@pytest.mark.distbench
def test_noisy(distbench):
    rng = random.Random(distbench.rank)
    distbench.measure(lambda: time.sleep(10 ** rng.uniform(-4, -2)))
"""


def _records(path):
    return {b["distbench"]["name"].split("[")[0]: b["distbench"]
            for b in json.loads(path.read_text())["benchmarks"]}


def test_a_steady_point_stops_early_and_a_noisy_one_is_marked(pytester, distbench_run):
    pytester.makepyfile(BENCH)
    out = pytester.path / "p.json"
    result = distbench_run("--distbench", "--world-size=3", "--distbench-budget=1s",
                           "--distbench-precision=10%", f"--distbench-json={out}")
    result.assert_outcomes(passed=2)
    records = _records(out)
    steady, noisy = records["test_steady"], records["test_noisy"]
    assert steady["precision"]["stopped_by"] == "precision" and steady["precision"]["met"]
    assert steady["precision"]["achieved"] <= 0.10
    # 1 ms a call: a whole budget would be ~800 iterations; the target needs far fewer.
    assert 30 <= steady["iterations"] < 400
    # Calls from 0.1 to 10 ms, log-uniform at random in each rank: in one second the
    # interval of the median stays about 14 % wide.
    assert noisy["precision"] == {**noisy["precision"], "stopped_by": "budget", "met": False}
    result.stdout.fnmatch_lines(["*± *%[*]*", "# [*] = the budget ran out before the interval "
                                 "reached the --distbench-precision target"])


def test_precision_off_spends_the_budget(pytester, distbench_run):
    pytester.makepyfile(BENCH)
    out = pytester.path / "p.json"
    result = distbench_run("--distbench", "--world-size=2", "--distbench-budget=0.3s",
                           "--distbench-precision=off", "-k", "steady",
                           f"--distbench-json={out}")
    result.assert_outcomes(passed=1)
    steady = _records(out)["test_steady"]
    assert "precision" not in steady and steady["iterations"] > 150
