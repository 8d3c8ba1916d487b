"""Verdicts: noise alone never fails the gate, a real slowdown always does."""

from __future__ import annotations

import json
import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_distbench.results.comparison.verdict import (
    Comparison,
    compare_documents,
    fingerprint_differences,
    judge_records,
    speed_difference,
)
from pytest_distbench.results.document import make_document
from pytest_distbench.results.statistics.unpaired import batch_medians, judge

ENVIRONMENT = {
    "torch": "2.13.0+cpu",
    "hostname": "a",
    "cpu_model": "Test CPU",
    "cpu_count": 2,
    "gpus": [],
    "cuda": None,
    "nccl": None,
    "world_sizes": [2],
}

_settings = settings(max_examples=60, deadline=None)

times = st.floats(min_value=1e-7, max_value=10.0, allow_nan=False)
sample_sets = st.lists(times, min_size=1, max_size=60)


def heavy_tailed(n: int, median: float, seed: int, stall_rate: float = 0.1) -> list[float]:
    """About one sample in ten stalls at ~15x the median, as small collectives do here."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        x = median * (1 + rng.uniform(-0.03, 0.03))
        if rng.random() < stall_rate:
            x *= rng.uniform(10, 20)
        out.append(x)
    return out


# ------------------------------------------------------------------------------------ properties


@_settings
@given(samples=sample_sets, threshold=st.floats(min_value=0, max_value=1))
def test_identical_sample_sets_are_never_a_regression(samples, threshold):
    kind, change, p_value = judge(samples, list(samples), threshold)
    assert kind == "unchanged"
    assert change == 0
    assert 0 <= p_value <= 1


@_settings
@given(
    n=st.integers(min_value=30, max_value=120),
    median=st.floats(min_value=1e-6, max_value=1.0),
    noise=st.floats(min_value=0, max_value=0.05),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_30_percent_slowdown_is_a_regression(n, median, noise, seed):
    rng = random.Random(seed)
    base = [median * (1 + noise * rng.random()) for _ in range(n)]
    kind, change, p_value = judge(base, [x * 1.3 for x in base], 0.10)
    assert kind == "regression"
    assert change == pytest.approx(0.3)
    assert p_value < 0.01


@_settings
@given(samples=sample_sets, factor=st.floats(min_value=1.0, max_value=1.05))
def test_a_shift_below_the_threshold_is_never_a_regression(samples, factor):
    kind, _, _ = judge(samples, [x * factor for x in samples], 0.10)
    # Every sample moved alike is shown slower (not beyond the threshold: no regression).
    assert kind in ("unchanged", "slower")


@_settings
@given(samples=sample_sets, factor=st.floats(min_value=0.01, max_value=1.0))
def test_a_speedup_is_never_a_regression(samples, factor):
    kind, change, _ = judge(samples, [x * factor for x in samples], 0.10)
    assert kind != "regression"
    assert change <= 0


@_settings
@given(
    base=sample_sets,
    cur=sample_sets,
    threshold=st.floats(min_value=0, max_value=0.5),
)
def test_verdicts_are_symmetric(base, cur, threshold):
    kind, change, p_value = judge(base, cur, threshold)
    mirror_kind, mirror_change, mirror_p = judge(cur, base, threshold)
    mirror = {"regression": "improvement", "improvement": "regression", "slower": "faster",
              "faster": "slower", "unchanged": "unchanged", "inconclusive": "inconclusive"}
    assert mirror_kind == mirror[kind]
    assert mirror_p == p_value
    # only a change that clears the threshold can be a finding, whichever way it points
    if kind == "regression":
        assert change > threshold
    if kind == "improvement":
        assert change < 0 and (1 + change) * (1 + threshold) < 1 + 1e-12


def test_heavy_tailed_noise_alone_never_fails():
    # Same distribution twice, 20 fixed seeds: deterministic, so it cannot flake.
    for seed in range(20):
        base = heavy_tailed(60, 50e-6, seed)
        cur = heavy_tailed(60, 50e-6, seed + 1000)
        kind, change, _ = judge(base, cur, 0.10)
        assert kind == "unchanged", (seed, change)


def test_heavy_tailed_real_slowdown_always_fails():
    for seed in range(20):
        base = heavy_tailed(60, 50e-6, seed)
        cur = heavy_tailed(60, 65e-6, seed + 1000)  # 1.3x slower
        kind, change, p_value = judge(base, cur, 0.10)
        assert kind == "regression", (seed, change, p_value)
        # ...and is mirrored as an improvement
        assert judge(cur, base, 0.10)[0] == "improvement"


def test_significant_but_small_shift_is_not_a_regression():
    base = [1e-4 * (1 + i * 1e-4) for i in range(200)]
    kind, change, p_value = judge(base, [x * 1.04 for x in base], 0.10)
    assert p_value < 1e-4  # the test sees it (ten batch medians each side: p >= 5.4e-6)...
    assert kind == "slower"  # ...but 4 % is under the threshold: shown, not beyond it


def test_drift_inside_a_run_is_not_significant():
    # Both runs drift between a fast and a slow state that each last many iterations; the
    # current run happens to spend a little longer in the slow one. Raw samples would call that
    # significant; the batches do not, and the p50 barely moves.
    fast, slow = [1e-4] * 20, [1.5e-4] * 20
    base = (fast + slow) * 5
    cur = (slow + fast) * 4 + slow + slow
    kind, change, p_value = judge(base, cur, 0.0)
    assert kind == "inconclusive", (change, p_value)  # not shown, beyond a threshold of 0


def test_batch_medians_keep_time_order():
    samples = [1.0] * 10 + [2.0] * 10
    assert batch_medians(samples, batches=2) == [1.0, 2.0]
    assert batch_medians([3.0, 1.0], batches=10) == [3.0, 1.0]  # too few: raw samples


def test_large_but_insignificant_shift_is_not_a_regression():
    # Three samples each cannot reach p < 0.01 with a rank test, however large the shift.
    kind, change, p_value = judge([1.0, 1.1, 1.2], [2.0, 2.1, 2.2], 0.10)
    assert change > 0.5
    assert p_value > 0.01
    assert kind == "inconclusive"  # far apart, not shown: can't tell


def test_lopsided_sample_sizes_stay_fast():
    # scipy's exact distribution takes minutes for 5 vs 100000 samples; judge must not use it.
    base = heavy_tailed(5, 1e-4, 1)
    cur = heavy_tailed(100_000, 1e-4, 2)
    kind, _, _ = judge(base, cur, 0.10)
    assert kind == "unchanged"


def test_judge_rejects_bad_input():
    with pytest.raises(ValueError):
        judge([], [1.0], 0.1)
    with pytest.raises(ValueError):
        judge([1.0], [1.0], -0.1)
    with pytest.raises(ValueError):
        judge([1.0], [float("nan")], 0.1)


# --------------------------------------------------------------------------- comparing documents


def record(name: str, samples: list[float], threshold: float | None = None) -> dict:
    return {
        "id": f"suite.py::{name}",
        "name": name,
        "family": "all_reduce",
        "backend": "gloo",
        "world_size": 2,
        "device": "cpu",
        "params": {},
        "nbytes": 1024,
        "samples": samples,
        "rank_samples": [],
        "summary": {
            "n": len(samples),
            "min": min(samples),
            "p50": statistics.median(samples),
            "p75": statistics.median(samples),
            "p90": max(samples),
            "p95": max(samples),
            "p99": max(samples),
            "max": max(samples),
            "mean": statistics.fmean(samples),
            "stddev": statistics.pstdev(samples),
            "iqr": 0.0,
        },
        "threshold": threshold,
    }


def document(*records: dict, **env) -> dict:
    return make_document(list(records), {**ENVIRONMENT, **env}, ["pytest"], commit_info={})


BASE = heavy_tailed(60, 50e-6, 1)
SLOW = [x * 1.3 for x in BASE]


def test_compare_documents_reports_every_id():
    baseline = document(record("same", BASE), record("slow", BASE), record("gone", BASE))
    current = document(record("same", BASE), record("slow", SLOW), record("added", BASE))
    comparison = compare_documents(baseline, current, threshold=0.1)
    assert isinstance(comparison, Comparison)
    kinds = {v.name: v.kind for v in comparison.verdicts}
    # One stored run cannot gate: the slowdown is seen ("slower"), never a "regression".
    assert kinds == {"same": "unchanged", "slow": "slower", "gone": "missing", "added": "new"}
    assert comparison.counts() == {
        "regression": 0,
        "improvement": 0,
        "slower": 1,
        "inconclusive": 0,
        "faster": 0,
        "unchanged": 1,
        "new": 1,
        "missing": 1,
    }
    slow = comparison.get("suite.py::slow")
    assert slow.change == pytest.approx(0.3)
    assert slow.baseline_p50 == pytest.approx(statistics.median(BASE))
    assert slow.p_value < 0.01
    for kind in ("new", "missing"):
        (v,) = comparison.of_kind(kind)
        assert v.p_value is None and v.change is None


def test_per_benchmark_threshold_wins():
    baseline = document(record("slow", BASE))
    lenient = document(record("slow", SLOW, threshold=0.5))
    lenient_verdict = compare_documents(baseline, lenient, threshold=0.1).verdicts[0]
    assert lenient_verdict.kind == "slower"  # shown, within its own 50 %
    assert compare_documents(baseline, lenient, threshold=0.1).verdicts[0].threshold == 0.5
    strict = document(record("slow", [x * 1.05 for x in BASE], threshold=0.01))
    assert compare_documents(baseline, strict, threshold=0.5).verdicts[0].kind == "slower"


def test_metric_changes_what_is_shown_not_the_verdict():
    baseline = document(record("x", BASE))
    # p50 unchanged, only the tail grew: shown as a big p99 change, still not a regression
    tail = sorted(BASE)
    tail[-1] *= 3
    current = document(record("x", tail))
    v = compare_documents(baseline, current, threshold=0.1, metric="p99").verdicts[0]
    assert v.kind == "unchanged"
    assert v.metric == "p99"
    assert v.metric_change == pytest.approx(2.0)
    assert v.change == pytest.approx(0.0)


def test_unknown_metric_is_refused():
    doc = document(record("x", BASE))
    with pytest.raises(ValueError, match="metric"):
        compare_documents(doc, doc, threshold=0.1, metric="p42")


def test_fingerprint_differences():
    base = dict(ENVIRONMENT, torch="2.12.0")
    cur = dict(ENVIRONMENT, torch="2.13.0", hostname="elsewhere", world_sizes=[2, 4])
    assert fingerprint_differences(base, cur) == [
        "torch: 2.12.0 (baseline) vs 2.13.0 (current)",
        "world_sizes: [2] (baseline) vs [2, 4] (current)",
    ]
    assert fingerprint_differences(ENVIRONMENT, dict(ENVIRONMENT, hostname="b")) == []
    assert (
        fingerprint_differences(
            dict(ENVIRONMENT, world_sizes=[4, 2]), {**ENVIRONMENT, "world_sizes": [2, 4]}
        )
        == []
    )
    lines = fingerprint_differences(ENVIRONMENT, dict(ENVIRONMENT, gpus=["H100"], cuda="12.4"))
    assert lines == [
        "gpus: none (baseline) vs [H100] (current)",
        "cuda: none (baseline) vs 12.4 (current)",
    ]


def test_compare_documents_carries_fingerprint():
    baseline = document(record("x", BASE), torch="2.12.0")
    current = document(record("x", BASE))
    comparison = compare_documents(baseline, current, threshold=0.1)
    assert comparison.fingerprint_differences == (
        "torch: 2.12.0 (baseline) vs 2.13.0+cpu (current)",
    )


def test_speed_difference_reports_a_machine_that_slowed_down():
    slow = speed_difference({"cpu_probe_s": [0.005, 0.006]}, {"cpu_probe_s": [0.011, 0.012]})
    assert slow is not None and "2.09x" in slow and "slowed down" in slow
    assert "sped up" in speed_difference({"cpu_probe_s": [0.01]}, {"cpu_probe_s": [0.005]})
    assert speed_difference({"cpu_probe_s": [0.005]}, {"cpu_probe_s": [0.0052]}) is None
    # Files from before the probe, or with junk in it, give no line rather than an error.
    assert speed_difference({}, {"cpu_probe_s": [0.005]}) is None
    assert speed_difference({"cpu_probe_s": ["x", -1]}, {"cpu_probe_s": [0.005]}) is None


def placed(rec: dict, placement: str | None) -> dict:
    return dict(rec, placement=placement) if placement else rec


def test_a_comparison_across_placements_says_so():
    # An A/B run's records (packed on one CPU) against a stored spread run: a warning naming
    # the two placements and how many benchmarks; unknown (older) placements are not flagged.
    baseline = document(placed(record("a", BASE), "core"), placed(record("b", BASE), "core"),
                        record("c", BASE))
    current = document(placed(record("a", BASE), "pack"), placed(record("b", BASE), "pack"),
                       placed(record("c", BASE), "pack"))
    comparison = compare_documents(baseline, current, threshold=0.1)
    assert [line for line in comparison.fingerprint_differences if "placement" in line] == [
        "placement: core (baseline) vs pack (current) for 2 benchmark(s); absolute times "
        "depend on where the ranks ran (docs/gating.md)"]
    same = compare_documents(current, current, threshold=0.1)
    assert not [line for line in same.fingerprint_differences if "placement" in line]


def _record_with(samples: list[float], ci: tuple[float, float] | None) -> dict:
    from pytest_distbench.results.statistics import stats

    return {"id": "t", "name": "t", "family": "t", "nbytes": None, "samples": samples,
            "summary": stats.summarize(samples).as_dict(),
            "p50_ci": None if ci is None else {"low": ci[0], "high": ci[1]}}


def test_a_change_within_overlapping_intervals_is_not_a_regression():
    from pytest_distbench.results.comparison.verdict import judge_records

    base = [1.0 + 0.001 * (i % 7) for i in range(200)]
    slower = [x * 1.5 for x in base]
    clear = judge_records(_record_with(base, (1.0, 1.006)), _record_with(slower, (1.5, 1.51)),
                          0.10)
    assert clear.kind == "slower"
    # The same samples, but intervals that say the p50s are not known apart: unchanged.
    overlapping = judge_records(_record_with(base, (0.5, 1.6)),
                                _record_with(slower, (1.4, 2.0)), 0.10)
    assert overlapping.kind == "inconclusive"


@_settings
@given(samples=st.lists(times, min_size=10, max_size=60), factor=st.floats(0.2, 5.0),
       threshold=st.floats(min_value=0, max_value=1))
def test_a_comparison_with_one_stored_run_never_reads_regression(samples, factor, threshold):
    """Issue 30: two runs of the same code 10 s apart read "+27.6 % regression" because the
    machine drifted; one stored run cannot tell drift from code, so whatever moved, no verdict,
    count or rendered form of the comparison says "regression" (or "improvement")."""
    from pytest_distbench.results.rendering.report import FORMATS, render

    baseline = document(record("x", samples))
    current = document(record("x", [s * factor for s in samples]))
    comparison = compare_documents(baseline, current, threshold=threshold)
    (v,) = comparison.verdicts
    assert v.kind in ("slower", "faster", "inconclusive", "unchanged") and not v.gateable
    assert not v.fails_session
    assert comparison.counts()["regression"] == comparison.counts()["improvement"] == 0
    data = json.loads(render(comparison, "json"))
    assert [b["verdict"] for b in data["benchmarks"]] == [v.kind]
    assert data["counts"]["regression"] == 0
    for fmt in set(FORMATS) - {"json"}:
        rows = [line for line in render(comparison, fmt).splitlines()
                if line.lstrip("| ").startswith(("x ", "x,"))]
        assert len(rows) == 1 and "regression" not in rows[0] and "improvement" not in rows[0]


def test_far_apart_but_not_shown_to_differ_is_inconclusive_never_unchanged():
    # Two runs 2x apart whose wide intervals overlap (issue 38, item 9).
    base = record("wide", BASE)
    cur = record("wide", [x * 2 for x in BASE])
    for r, (low, high) in ((base, (10e-6, 500e-6)), (cur, (20e-6, 900e-6))):
        r["p50_ci"] = {"level": 0.95, "low": low, "high": high, "half_width_pct": 200.0}
    verdict = judge_records(base, cur, 0.1)
    assert verdict.kind == "inconclusive"
    same = judge_records(base, record("wide", BASE), 0.1)
    assert same.kind == "unchanged"
