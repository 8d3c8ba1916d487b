"""The arithmetic of the simulated store: placement, limits, summaries (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_distbench.families.store import plan
from pytest_distbench.results.statistics.stats import percentile

clients = st.integers(min_value=1, max_value=200_000)
world_sizes = st.integers(min_value=1, max_value=64)


@settings(deadline=None)  # a shared 2-core machine: timing is not the point
@given(clients, world_sizes)
def test_every_simulated_client_is_placed_exactly_once_in_balanced_blocks(n, ws):
    places = [plan.placement(n, ws, r) for r in range(ws)]
    ids = [i for p in places for i in p.ids]
    assert ids == list(range(1, n))  # contiguous, in rank order; 0 is the server's own
    hosts = [p.count for p in places if p.rank in plan.client_ranks(ws)]
    assert max(hosts) - min(hosts) <= 1
    if ws > 1:
        assert places[plan.SERVER_RANK].count == 0


@settings(deadline=None)  # a shared 2-core machine: timing is not the point
@given(clients, world_sizes)
def test_server_rank_needs_a_descriptor_per_client(n, ws):
    server = plan.fds_needed(n, ws, plan.SERVER_RANK)
    assert server >= n + 2
    total_client_side = sum(plan.placement(n, ws, r).count for r in range(ws))
    assert total_client_side == n - 1


@settings(deadline=None)  # a shared 2-core machine: timing is not the point
@given(clients, world_sizes, st.integers(0, 5000), st.integers(64, 1 << 20))
def test_limit_problem_iff_descriptors_do_not_fit(n, ws, open_fds, soft):
    for r in range(ws):
        fits = open_fds + plan.fds_needed(n, ws, r) + plan.FD_MARGIN <= soft
        problem = plan.limit_problem(n, ws, r, open_fds, soft, None)
        assert (problem is None) == fits
        if problem:
            assert "RLIMIT_NOFILE" in problem and str(soft) in problem


@settings(deadline=None)  # a shared 2-core machine: timing is not the point
@given(st.integers(2, 10_000), st.integers(2, 8))
def test_memory_problem_names_memory(n, ws):
    rank = plan.client_ranks(ws)[0]
    hosted = plan.placement(n, ws, rank).count
    problem = plan.limit_problem(n, ws, rank, 0, 10**9, hosted * plan.BYTES_PER_CLIENT - 1)
    assert (problem is not None) == (hosted > 0)
    if problem:
        assert "MemAvailable" in problem


@settings(deadline=None)  # a shared 2-core machine: timing is not the point
@given(st.lists(st.floats(0, 20, allow_nan=False), min_size=1, max_size=500))
def test_connect_summary_counts_every_slow_connect(times):
    s = plan.connect_summary(times)
    assert s["connect_p50_s"] <= s["connect_p95_s"] <= s["connect_max_s"] == max(times)
    assert s["slow_connects"] == len([t for t in times if t > plan.SLOW_CONNECT_S])
    assert s["connect_p95_s"] == percentile(sorted(times), 95)


@settings(deadline=None)  # a shared 2-core machine: timing is not the point
@given(st.lists(st.floats(1e-6, 1, allow_nan=False), min_size=1, max_size=500),
       st.floats(1e-3, 100))
def test_latency_summary_rate_is_count_over_wall(latencies, wall):
    s = plan.latency_summary(latencies, wall)
    assert s["ops_total"] == len(latencies)
    assert s["ops_per_s"] == pytest.approx(len(latencies) / wall)
    assert s["latency_p50_s"] <= s["latency_p95_s"] <= s["latency_max_s"]


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError):
        plan.placement(0, 2, 0)
    with pytest.raises(ValueError):
        plan.client_ranks(0)
    with pytest.raises(ValueError):
        plan.connect_summary([])
    with pytest.raises(ValueError):
        plan.latency_summary([1.0], 0)


@given(st.floats(0.001, 20), st.lists(st.floats(0.0001, 12), min_size=1, max_size=100))
def test_init_without_stalls_takes_out_exactly_the_slow_connects_delay(init, times):
    without = plan.init_without_stalls(init, times)
    assert 0 <= without <= init
    if max(times) <= plan.SLOW_CONNECT_S:
        assert without == init  # nothing stalled: nothing taken out
    else:
        fast = [t for t in times if t <= plan.SLOW_CONNECT_S]
        assert without == pytest.approx(max(0.0, init - max(times) + max(fast or [0.0])))
