"""A point owns its runs (harness/controller/points.py): record_of builds the record, pure;
the median run leads; the store keeps points in order (issue 51)."""

from __future__ import annotations

import copy
import math

from hypothesis import given
from hypothesis import strategies as st
from results_data import benchmark_record

from pytest_distbench.harness.controller.points import Point, Points, Run, record_of
from pytest_distbench.results.document.session_intervals import SESSION, Evidence


def _run(p50: float, **facts) -> Run:
    record = benchmark_record(1024, [p50] * 10)
    return Run(record, **facts)


def test_record_of_places_the_points_facts_and_writes_into_no_run():
    first = _run(1e-3, invalid=("too fast",), of_peak=None)
    before = copy.deepcopy(first.record)
    point = Point(first.record["id"], first, live_reports=[{"elapsed_s": 1.0}],
                  requested_nbytes=[1000, 1024])
    record = record_of(point, Evidence(SESSION))
    assert record["invalid"] == ["too fast"] and record["of_peak"] is None
    assert record["live_reports"] == [{"elapsed_s": 1.0}]
    assert record["requested_nbytes"] == [1000, 1024] and "p50_ci" in record
    assert first.record == before and record_of(point) is not record_of(point)
    assert "of_peak" not in record_of(Point("x", _run(1e-3)))  # no peak judged: no key


@given(st.lists(st.floats(1e-6, 1.0), min_size=2, max_size=8))
def test_the_run_nearest_the_median_leads_the_earliest_of_a_tie(values):
    runs = [_run(v) for v in values]
    point = Point("p", runs[0], revisits=runs[1:])
    point.lead_with_median()
    centre = sorted(values)[(len(values) - 1) // 2]
    distance = [abs(math.log(v / centre)) for v in values]
    assert point.lead == distance.index(min(distance))
    assert record_of(point)["summary"]["p50"] == values[point.lead]
    assert sorted(point.other_figures()) == sorted(
        v for i, v in enumerate(values) if i != point.lead)


def test_the_store_keeps_the_order_of_positions_then_arrival():
    points = Points()
    a, b, c = (Point(name, _run(1e-3)) for name in "abc")
    points.add([a], 2)
    points.add([b], 1)
    points.add([c], 2)
    assert [p.id for p in points] == ["b", "a", "c"]
    sealed = points.seal(lambda p: Evidence(SESSION))
    assert len(sealed) == 3 and points.seal(lambda p: Evidence(SESSION)) == []
    assert all(r["p50_ci"]["basis"] == SESSION for r in points.records())
