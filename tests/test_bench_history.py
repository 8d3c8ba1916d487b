"""benchmarks/bench_history.py: its synthetic histories, its counts of steps found and of false
change points, on a few series (the figures in docs/gating.md are the script's to print)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scripts import loaded

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_history.py"


@pytest.fixture(scope="module")
def bh():
    with loaded(SCRIPT) as module:
        yield module


def test_a_large_step_is_found_where_it_started_as_soon_as_a_segment_holds(bh):
    draw = bh.lognormal([0.001])
    delays, exact = bh.detection(draw, 0.30, 10, np.random.default_rng(0))
    assert len(delays) == exact == 10
    assert set(delays) == {bh.changepoints.MIN_SIZE}


def test_noise_as_loud_as_the_step_hides_it(bh):
    delays, _ = bh.detection(bh.lognormal([0.5]), 0.05, 10, np.random.default_rng(0))
    assert len(delays) < 5


def test_every_distinct_false_change_point_counts_once(bh, monkeypatch):
    monkeypatch.setattr(bh, "SERIES", 30)
    calls = []

    def judged(series, end, **kwargs):
        calls.append(end)
        return [3, 7] if end > 20 else [3]

    monkeypatch.setattr(bh, "judged", judged)
    assert bh.false_points(bh.lognormal([0.02]), 60, np.random.default_rng(0)) == 4
    assert calls == [*range(2, 31)] * 2


def test_the_kept_h200_sessions_give_each_point_its_spread(bh):
    quiet, loud, note = bh.h200_sds()
    points = json.loads(bh.H200.read_text())["p50_us"]
    assert len(quiet) + len(loud) == len(points) == 8
    runs = points["all_gather 64 MiB"]
    assert min(quiet) == pytest.approx(np.std(np.log(runs), ddof=1))
    assert all(sd <= bh.QUIET_CV < other for sd in quiet for other in loud)
    assert "all_gather 64 MiB 0.2 %" in note


def test_a_windowed_judgement_names_runs_of_the_whole_series(bh, monkeypatch):
    monkeypatch.setattr(bh, "WINDOW", 40)
    series = np.ones(100)
    series[70:] = 2.0
    series *= np.exp(np.random.default_rng(0).normal(0, 0.01, 100))
    assert bh.judged(series, 100) == [70]
    assert bh.judged(series, 60) == []
    assert math.isclose(bh.sd_of_cv(0.02), 0.019998, rel_tol=1e-4)


def test_a_test_alone_decides_where_the_rule_needs_both(bh, monkeypatch):
    # two outliers among the four newest runs, the other two in the older runs' lower half: the
    # t test alone keeps the split, the rank test alone and the rule (both) do not
    values = list(np.exp(np.random.default_rng(3).normal(0, 0.01, 34)))
    values[30] *= 3
    values[32] *= 3
    low = sorted(values[:30])
    values[31], values[33] = low[7], low[10]
    cp = bh.changepoints
    assert cp.change_points(values) == []
    for test, runs in (("t", [30]), ("rank", [])):
        monkeypatch.setattr(cp, "_split_p", bh.alone(test, 0.2))
        assert [p.run for p in cp.change_points(values)] == runs, test
        monkeypatch.undo()
