"""benchmarks/bench_coverage.py: the candidate constructions of an honest ± (issue 34), on
synthetic runs whose values are known."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from scripts import loaded

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_coverage.py"


@pytest.fixture(scope="module")
def bc():
    with loaded(SCRIPT) as module:
        yield module


def _runs(bc, offsets: dict[int, list[float]], jitter: float = 0.01) -> list[dict]:
    """Records as a session of the script leaves them: per point, a long run, targeted runs
    whose samples sit at exp(offset) around 1 ms, and another long run."""
    rng = random.Random(4)
    records = []
    for index, runs in offsets.items():
        names = ["long-0"] + [f"targeted-{k}" for k in range(len(runs))] + ["long-1"]
        for name, offset in zip(names, [0.0, *runs, 0.0], strict=True):
            samples = [1e-3 * math.exp(offset) * (1 + rng.uniform(-jitter, jitter))
                       for _ in range(200)]
            records.append({"name": f"test_point_{index}[gloo-ws2-{name}]", "samples": samples,
                            "figures": {"messages_per_iteration": 1}})
    return records


def test_the_pooled_pairs_estimate_the_run_to_run_spread_leaving_the_judged_run_out(bc):
    # Every point's runs alternate +s and -s: a pair's (log a - log b)^2 / 2 is 2 s^2.
    s = 0.1
    records = _runs(bc, {i: [s, -s, s, -s] for i, p in enumerate(bc.POINTS)
                         if p[2] == "p50"})
    assert bc.pooled_between(records, (0, 0)) == pytest.approx(math.sqrt(2) * s, rel=0.05)
    # The judged run is not one of the pair: leaving out run 1 pairs runs 0 and 2 of point 0
    # (equal: no spread), while the other points still pair their first two.
    points = sum(1 for p in bc.POINTS if p[2] == "p50")
    expected = math.sqrt((points - 1) * 2 * s * s / points)
    assert bc.pooled_between(records, (0, 1)) == pytest.approx(expected, rel=0.05)


def test_batches_bracket_the_run_and_widen_with_its_spread(bc):
    narrow = _runs(bc, {0: [0.0]}, jitter=0.01)[1]
    wide = _runs(bc, {0: [0.0]}, jitter=0.2)[1]
    low, high = bc.batch_interval(narrow, "p50")
    assert low <= 1e-3 <= high
    wide_low, wide_high = bc.batch_interval(wide, "p50")
    assert wide_high - wide_low > 5 * (high - low)
    assert bc.batch_interval({"samples": [1e-3] * 5, "figures": {}}, "p50") is None
