"""The printed ± is the interval of the point's value in the session: points run again later
(controller/revisits.py), the run-to-run noise of each stratum pooled from those runs
(statistics/noise.py) and every record's interval widened by it, written once at the end of
the test loop (results/document/session_intervals.py). Real sessions with real ranks, at odd
world sizes, in budget, count and duration modes."""

from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from results_data import benchmark_record
from tables import unwrapped

from pytest_distbench.results.document.session_intervals import (
    REVISITS_OFF,
    SESSION,
    SO_FAR,
    UNDER_LAUNCHER,
    Evidence,
    with_interval,
)
from pytest_distbench.results.rendering.noise import noise_line, regime_lines
from pytest_distbench.results.statistics.noise import RunNoise

# Sessions that run revisits, as the product does by default: this module is about the
# interval they measure (tests/conftest.py turns them off elsewhere).
pytestmark = pytest.mark.with_revisits

# Each run of a point draws an offset of its own (the same in every rank: seeded from the
# point's size and a per-run counter kept in the rank's module), then sleeps about that long:
# samples steady within a run, runs apart.
BENCH = """
import itertools, random, time, pytest

RUNS = itertools.count()

@pytest.mark.parametrize("ms", [1, 2, 3])
def test_offsets(distbench, ms):
    offset = random.Random(ms * 1000 + next(RUNS)).uniform(0.85, 1.15)
    distbench.measure(lambda: time.sleep(ms * offset / 1000))
"""


def _session(pytester, distbench_run, source, passed, *args):
    """A real session of `source` with `args`: its result and its records."""
    pytester.makepyfile(source)
    out = pytester.path / "r.json"
    result = distbench_run("--distbench", *args, f"--distbench-json={out}")
    result.assert_outcomes(passed=passed)
    return result, [b["distbench"] for b in json.loads(out.read_text())["benchmarks"]]


def _check_session_intervals(records, group):
    assert len(records) == 3
    revisited = [r for r in records if r.get("revisits")]
    assert revisited, "no point of the group was run again"
    for r in records:
        ci, own = r["p50_ci"], r["sampling_ci"]
        assert ci["run_noise"]["group"] == group and ci["noise_missing"] is None
        assert ci["basis"] == SESSION
        # --distbench-revisits: 5 runs more, less a point whose runs are its own story
        assert 1 <= ci["run_noise"]["dof"] <= 5
        # Never narrower than the run's own interval, and at least the noise wide.
        assert ci["low"] <= own["low"] <= r["summary"]["p50"] <= own["high"] <= ci["high"]
        noise = math.log(1 + ci["run_noise"]["half_width_pct"] / 100)
        assert math.log(ci["high"] / r["summary"]["p50"]) >= noise * (1 - 1e-9)
        # The headline is the run nearest the median of the point's runs.
        runs = sorted([r["summary"]["p50"], *(r.get("revisits") or [])])
        assert r["summary"]["p50"] == runs[(len(runs) - 1) // 2]


@pytest.mark.parametrize("world_size,mode,group", [
    (3, ["--distbench-budget=0.2s"], "test_offsets gloo ws3 0.2 s budget, 100 us-10 ms"),
    (5, ["--distbench-iterations=20"], "test_offsets gloo ws5 20 iterations, 100 us-10 ms"),
    (3, ["--distbench-duration=0.15s"], "test_offsets gloo ws3 0.15 s duration, 100 us-10 ms"),
])
def test_every_figure_carries_the_noise_its_session_measured(pytester, distbench_run,
                                                             world_size, mode, group):
    result, records = _session(pytester, distbench_run, BENCH, 3, f"--world-size={world_size}",
                               *mode)
    _check_session_intervals(records, group)
    out = unwrapped(result.stdout.str())  # the line wraps at 120 columns, never inside `± x %`
    assert ("each ± is the run's own sampling interval combined with the run-to-run noise of "
            "its stratum") in out, out
    assert f"{group} ± " in out, out
    assert "distbench: 5 revisit(s) (earlier points run again to measure the " in out, out


CONFTEST_NO_GAP = """
import pytest_distbench.harness.controller.revisits as revisits

revisits.REVISIT_GAP_S = 0.0  # revisit as soon as a group has a point to revisit
"""

# Offsets 1x-3x per run: the noise is far past a 2 % target.
NOISY_RUNS = """
import itertools, random, time, pytest

RUNS = itertools.count()

@pytest.mark.parametrize("point", range(8))
def test_runs_apart(distbench, point):
    offset = random.Random(point * 1000 + next(RUNS)).uniform(1, 3)
    distbench.measure(lambda: time.sleep(offset / 1000))
"""


def test_a_point_stops_once_the_noise_dominates_its_target(pytester, distbench_run):
    pytester.makeconftest(CONFTEST_NO_GAP)
    result, records = _session(pytester, distbench_run, NOISY_RUNS, 8, "--world-size=3",
                               "--distbench-budget=1s", "--distbench-precision=2%")
    stopped = [r for r in records if r["precision"]["stopped_by"] == "noise"]
    # The first points run before the group's noise is known (2 degrees of freedom): they
    # spend the budget; once known, the noise (runs 1x-3x apart) is far past 2 %.
    assert stopped, [r["precision"] for r in records]
    for r in stopped:
        assert r["precision"]["target"] == 0.02 and not r["precision"]["met"]
        assert math.fsum(r["samples"]) < 0.5  # well inside the 1 s budget
    assert all(r["precision"]["achieved"] >= r["precision"]["sampling_achieved"]
               for r in records)
    # A point that could not meet the target says so, with its achieved ± (or `unstable`
    # where that reaches 100 %).
    assert re.search(r"(± [\d.]+ %|\(unstable\))\*", result.stdout.str()), result.stdout.str()


# -- the record's intervals, pure --------------------------------------------------------------

def _record(p50: float = 1e-3) -> dict:
    record = benchmark_record(64, [p50 * 0.99, p50, p50 * 1.01] * 4)
    low, high = p50 * 0.99, p50 * 1.01
    record.pop("p50_ci", None)
    record["sampling_ci"] = {"level": 0.95, "method": "order statistics", "low": low,
                             "high": high, "half_width_pct": 1.0}
    return record


@given(st.floats(0.001, 0.5), st.integers(1, 60), st.floats(0.001, 0.5))
def test_the_interval_is_a_pure_function_of_the_record_and_what_the_session_knows(sd1, dof,
                                                                                   sd2):
    record = _record()
    before = json.dumps(record, sort_keys=True)
    first = with_interval(record, Evidence(SO_FAR, RunNoise(sd1, dof, dof + 2, 2), "g"))
    final = with_interval(first, Evidence(SESSION, RunNoise(sd2, dof, dof + 2, 2), "g"))
    assert json.dumps(record, sort_keys=True) == before  # the record itself is left alone
    assert final == with_interval(record, Evidence(SESSION, RunNoise(sd2, dof, dof + 2, 2),
                                                   "g"))
    assert first["p50_ci"]["basis"] == SO_FAR and final["p50_ci"]["basis"] == SESSION
    assert final["sampling_ci"]["half_width_pct"] == 1.0


@pytest.mark.parametrize("missing", [UNDER_LAUNCHER, REVISITS_OFF])
def test_no_noise_the_runs_own_interval_and_the_reason(missing):
    record = with_interval(_record(), Evidence(SESSION, noise_missing=missing))
    assert (record["p50_ci"]["low"], record["p50_ci"]["high"]) == (
        record["sampling_ci"]["low"], record["sampling_ci"]["high"])
    assert record["p50_ci"]["noise_missing"] == missing
    assert noise_line([record]).startswith("each ± is the run's own sampling interval: "
                                           "run-to-run noise not measured")


def test_a_rate_record_widens_its_rate_interval_and_keeps_its_own():
    record = _record()
    own = {"msgs_per_s": 1000.0, "msgs_per_s_ci_low": 990.0, "msgs_per_s_ci_high": 1010.0,
           "rate_ci_pct": 1.0}
    record.update(figures=dict(own), headline_statistic="mean", nbytes=1000)
    record = with_interval(record, Evidence(SESSION, RunNoise(0.1, 10, 20, 10), "p2p"))
    assert record["figures"] == own  # the family's own, as the run made it
    rate = record["rate_ci"]
    assert rate["low"] < 990 and rate["high"] > 1010
    assert rate["mbps_low"] == pytest.approx(rate["low"] / 1000)
    assert rate["half_width_pct"] > 20  # t(10) x 10 % on each side


def test_runs_in_different_regimes_are_named_and_spanned():
    record = with_interval(_record(0.2e-3), Evidence(SESSION, RunNoise(0.01, 30, 60, 30),
                                                     "collectives", (4e-3,)))
    ci = record["p50_ci"]
    assert ci["regimes"] == [[0.2e-3, 1], [4e-3, 1]] and record["revisits"] == [4e-3]
    assert ci["low"] <= 0.2e-3 and ci["high"] >= 4e-3
    [line] = regime_lines([record])
    assert line.endswith("runs at 200 us (1 run) and 4000 us (1 run)")


def test_a_latency_with_rate_figures_is_judged_on_its_p50():
    # p2p_latency records carry the rate figures too; their printed figure is the p50.
    record = _record(0.2e-3)
    record["figures"] = {"msgs_per_s": 5000.0, "msgs_per_s_ci_low": 4900.0,
                         "msgs_per_s_ci_high": 5100.0, "rate_ci_pct": 2.0}
    record["precision"] = {"target": 0.02, "stopped_by": "precision", "statistic": "p50",
                           "sampling_achieved": 0.01}
    record = with_interval(record, Evidence(SESSION, RunNoise(0.02, 4, 12, 8), "p2p",
                                            (4e-3,)))
    ci = record["p50_ci"]
    assert ci["regimes"] == [[0.2e-3, 1], [4e-3, 1]] and ci["high"] >= 4e-3
    assert record["precision"]["achieved"] == ci["half_width_pct"] / 100
    # Missed by its own runs' disagreement: the tables' `*`.
    assert record["precision"]["met"] is False and record["precision"]["own_short"] is True
    assert "rate_ci" not in record


def test_a_target_missed_only_by_the_strata_noise_is_not_the_points_own():
    record = _record()
    record["precision"] = {"target": 0.02, "stopped_by": "noise", "statistic": "p50",
                           "sampling_achieved": 0.01}
    record = with_interval(record, Evidence(SESSION, RunNoise(0.05, 6, 12, 6), "g"))
    assert record["precision"]["met"] is False and record["precision"]["own_short"] is False


def test_no_revisits_the_runs_own_interval_and_the_session_says_so(pytester, distbench_run):
    result, records = _session(pytester, distbench_run, BENCH, 3, "--world-size=3",
                               "--distbench-iterations=10", "--distbench-revisits=0")
    assert all(r["p50_ci"]["low"] == r["sampling_ci"]["low"] is not None
               and r["p50_ci"]["noise_missing"] == REVISITS_OFF
               and not r.get("revisits") for r in records)
    result.stdout.fnmatch_lines(["each ± is the run's own sampling interval: run-to-run noise "
                                 "not measured (--distbench-revisits=0)"])
    # No precision target with a fixed count: nothing is marked short of one.
    assert "*" not in result.stdout.str().split("# test_offsets")[1].split("\n# ")[0]


# Every other run of the point is ten times slower: two regimes, each far wider apart than a
# loaded machine stretches a sleep (a 1 ms sleep read 1.6 ms beside another session: a third).
REGIMES = """
import itertools, time, pytest

RUNS = itertools.count()

@pytest.mark.distbench
def test_flips(distbench):
    pause = 0.04 if next(RUNS) % 2 else 0.004
    distbench.measure(lambda: time.sleep(pause))
"""


def test_a_point_whose_runs_flip_between_regimes_is_named_and_its_interval_spans_them(
        pytester, distbench_run):
    result, [record] = _session(pytester, distbench_run, REGIMES, 1, "--world-size=3",
                                "--distbench-iterations=10")
    assert len(record["revisits"]) == 5
    [fast, slow] = record["p50_ci"]["regimes"]
    assert fast[1] == 3 and slow[1] == 3 and 6 < slow[0] / fast[0] < 12
    assert record["p50_ci"]["low"] <= fast[0] and record["p50_ci"]["high"] >= slow[0]
    result.stdout.fnmatch_lines([
        "points whose runs in this session fell into different regimes (their ± spans them):",
        "  test_flips ws3 (test_flips[[]gloo-ws3[]]): runs at * us (3 runs) and * us (3 runs)"])


def test_a_rate_is_a_stratum_apart_from_the_p50_times_of_its_family():
    """p2p bandwidth's rate over the timed region spread 5.7 % between runs where p2p
    latency's p50 spread 29 % (benchmarks/bench_coverage.py): one pooled noise gave the rate
    3.4x the ± it needed and the latency 0.66x."""
    from types import SimpleNamespace

    from pytest_distbench import registry
    from pytest_distbench.results.document.session_intervals import stratum_of

    settings = SimpleNamespace(iterations=None, duration=None, budget=0.5)
    latency = {**_record(2e-4), "family": "p2p_latency", "backend": "gloo", "world_size": 2}
    bandwidth = {**latency, "family": "p2p_bandwidth",
                 "headline_statistic": "mean",
                 "figures": {"msgs_per_s": 8000.0, "rate_ci_pct": 3.0}}
    family = registry.family_of("p2p_latency")  # what records.py names it: "p2p"
    assert stratum_of(latency, settings, family) == "p2p gloo ws2 0.5 s budget, 100 us-10 ms"
    assert stratum_of(bandwidth, settings, family) == (
        "p2p gloo ws2 0.5 s budget, 100 us-10 ms, rates")
