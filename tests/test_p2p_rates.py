"""Pure logic of the message families: size sums, byte/rate arithmetic, windows, tables,
and the promise that the timed message loop allocates nothing per message."""

from __future__ import annotations

import math
import random
import re
import statistics
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tables import read_table

from pytest_distbench.families.p2p import rates, tables
from pytest_distbench.families.p2p.rates import (
    effective_window,
    message_rates,
    one_way_latency,
    rounds_per_iteration,
    slot_count,
)
from pytest_distbench.results.statistics.stats import summarize
from pytest_distbench.units import parse_size, parse_size_list, size_id

FAST = settings(max_examples=60, deadline=None)
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "KB": 1000, "MB": 10**6}

term = st.tuples(st.integers(1, 5000), st.sampled_from(sorted(UNITS)))


# --- size sums ---------------------------------------------------------------


@FAST
@given(st.lists(term, min_size=2, max_size=5), st.sampled_from(["", " "]))
def test_a_sum_of_sizes_is_the_exact_total(terms, space):
    text = "+".join(f"{space}{n}{space}{unit}" for n, unit in terms)
    assert parse_size(text) == sum(n * UNITS[unit] for n, unit in terms)


@FAST
@given(st.integers(1, 1 << 40), st.integers(1, 1 << 20))
def test_size_ids_add_up(a, b):
    assert parse_size(f"{size_id(a)}+{size_id(b)}") == a + b
    assert parse_size_list(f"{size_id(a)}+{size_id(b)},{size_id(a)}") == list(
        dict.fromkeys([a + b, a]))


def test_the_seed_size_mb_plus_bytes():
    assert parse_size("1MiB+1B") == 1048577
    assert parse_size("+4") == 4  # a leading "+" is still a sign
    assert parse_size("+1MiB+1") == 1048577
    assert parse_size_list("1MiB+1B:4MiB+4B:x2") == [1048577, 2097154, 4194308]


@pytest.mark.parametrize("text", ["1MiB+", "+", "1MiB++1B", "1MiB+-1B", "1MiB+0B", "1+x"])
def test_bad_sums_are_refused_with_the_whole_text(text):
    with pytest.raises(ValueError, match=r"invalid size '" + __import__("re").escape(text)):
        parse_size(text)


# --- rates -------------------------------------------------------------------

samples_st = st.lists(st.floats(1e-7, 10.0, allow_nan=False), min_size=1, max_size=50)


@FAST
@given(samples_st, st.integers(1, 10_000), st.integers(1, 1 << 30))
def test_rates_are_consistent(samples, k, nbytes):
    r = message_rates(samples, k, nbytes)
    total = sum(samples)
    assert r["total_messages"] == k * len(samples)
    assert r["total_bytes"] == k * len(samples) * nbytes
    assert math.isclose(r["msgs_per_s"], k * len(samples) / total)
    assert math.isclose(r["msgs_per_s"] * r["us_per_msg"], 1e6)
    assert math.isclose(r["mbps"], r["msgs_per_s"] * nbytes / 1e6)  # decimal MB/s
    # The 95th-percentile iteration is never faster than the median one.
    assert r["msgs_per_s_p95"] <= r["msgs_per_s_p50"] * (1 + 1e-12)
    assert math.isclose(r["mbps_p50"], r["msgs_per_s_p50"] * nbytes / 1e6)
    # The mean rate lies between the slowest and the fastest iteration's rate.
    assert k / max(samples) * (1 - 1e-9) <= r["msgs_per_s"] <= k / min(samples) * (1 + 1e-9)


@FAST
@given(st.lists(st.lists(st.floats(1e-7, 10.0), min_size=3, max_size=3), min_size=1,
                max_size=4), st.integers(1, 100))
def test_totals_take_the_slowest_ranks_timed_region(rank_samples, k):
    merged = [max(column) for column in zip(*rank_samples, strict=True)]
    r = message_rates(merged, k, 1, rank_samples)
    assert math.isclose(r["total_s"], max(sum(s) for s in rank_samples))
    # Never slower than summing the per-iteration maxima (which counts stalls twice).
    assert r["msgs_per_s"] >= message_rates(merged, k, 1)["msgs_per_s"] * (1 - 1e-12)


@FAST
@given(samples_st, st.floats(0.1, 10.0), st.integers(1, 100))
def test_slower_by_a_factor_means_rates_lower_by_it(samples, factor, k):
    base, slow = message_rates(samples, k, 8), message_rates([s * factor for s in samples], k, 8)
    assert math.isclose(base["msgs_per_s"], slow["msgs_per_s"] * factor)
    assert math.isclose(base["mbps_p50"], slow["mbps_p50"] * factor)


@FAST
@given(samples_st)
def test_one_way_is_half_the_round_trip(samples):
    r = one_way_latency(samples)
    assert math.isclose(r["one_way_us"] * 2, r["round_trip_us"])
    assert math.isclose(r["one_way_mean_us"], 1e6 * sum(samples) / len(samples) / 2)
    assert r["one_way_p95_us"] >= r["one_way_us"]


def test_no_samples_or_no_messages_is_an_error():
    with pytest.raises(ValueError):
        message_rates([], 1, 1)
    with pytest.raises(ValueError, match="messages_per_iteration"):
        message_rates([1.0], 0, 1)


# --- windows, buffers, batches -------------------------------------------------


@FAST
@given(st.integers(1, 100_000), st.integers(1, 1 << 34))
def test_window_is_capped_in_bytes_but_never_empty(window, nbytes):
    w = effective_window(window, nbytes)
    assert 1 <= w <= window
    assert w == 1 or w * nbytes <= rates.WINDOW_BYTES_CAP
    if window * nbytes <= rates.WINDOW_BYTES_CAP:
        assert w == window  # small windows are exactly what was asked for
    assert 1 <= slot_count(window, nbytes) <= w


@FAST
@given(st.integers(1, 100_000), st.integers(1, 1 << 34))
def test_an_iteration_is_whole_rounds_of_credits(credits, nbytes):
    rounds = rounds_per_iteration(credits, nbytes)
    target = max(1, min(rates.BATCH_MESSAGES, rates.BATCH_BYTES // nbytes))
    assert rounds >= 1
    assert rounds * credits >= target
    assert rounds == 1 or (rounds - 1) * credits < target


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_bad_window_or_size_is_refused(bad):
    with pytest.raises(ValueError):
        effective_window(bad, 1)
    with pytest.raises(ValueError):
        rounds_per_iteration(1, bad)


# --- tables ------------------------------------------------------------------


def _record(family, nbytes, samples, figures, wrong=0):
    record = {"id": f"t[{nbytes}]", "family": family, "nbytes": nbytes, "samples": samples,
              "iterations": len(samples), "wrong": wrong, "figures": figures}
    record["figures"] = {**figures, **rates.record_rates(record)}
    return record


def test_osu_latency_table_is_one_way_with_exact_bytes():
    text = tables.render_osu([_record("p2p_latency", 1048577, [100e-6, 120e-6],
                                      {"messages_per_iteration": 2, "round_trip": True})])
    header, _, row, legend = text.splitlines()
    assert "one-way p50 (us)" in header and "one-way p95 (us)" in header and "#wrong" in header
    assert row.split()[:2] == ["1048577", "55.0"]  # p50 of 100 and 120 us, halved
    assert "round trip / 2" in legend


def test_osu_rate_and_arras_tables():
    bw = _record("p2p_bandwidth", 1000, [1e-3], {"messages_per_iteration": 64, "window": 64,
                                                  "pairs": 1})
    row = read_table(tables.render_osu([bw]).splitlines())[1][0]
    # 64 x 1000 B in 1 ms = 64 MB/s, 4 digits
    assert row[:4] == ["1000", "64", "1", "64.00 (no CI: n too small)"]
    mr = _record("message_rate", 1, [0.5, 0.5], {"messages_per_iteration": 100, "credits": 10,
                                                 "path": "computation_to_client",
                                                 "transport": "rpc"}, wrong=3)
    text = tables.render_arras([mr])
    assert text.startswith("# transport: rpc\n")  # one table per transport
    row = read_table(text.splitlines()[1:])[1][0]
    # Two iterations are too few blocks for the rate's interval: the table says so. Every
    # figure in one format: four significant digits, thousands separators; the bandwidth in
    # the unit it reads at least 0.1 in.
    assert row == ["computation_to_client", "1", "10", "200.0 (no CI: n too small)",
                   "5,000", "0.200 KB/s", "200", "1.000", "3"]


def test_a_whole_region_rate_carries_its_block_bootstrap_interval():
    rng = random.Random(3)
    samples = [1e-3 * (1 + rng.expovariate(4)) for _ in range(300)]
    mr = _record("message_rate", 100, samples, {"messages_per_iteration": 64, "credits": 8,
                                                "path": "client_to_computation"})
    f = mr["figures"]
    assert f["msgs_per_s_ci_low"] < f["msgs_per_s"] < f["msgs_per_s_ci_high"]
    assert f["mbps_ci_low"] == pytest.approx(f["msgs_per_s_ci_low"] * 100 / 1e6)
    half = (f["msgs_per_s_ci_high"] - f["msgs_per_s_ci_low"]) / 2
    assert f["rate_ci_pct"] == pytest.approx(100 * half / f["msgs_per_s"], rel=0.05)
    assert 0 < f["rate_ci_pct"] < 10
    row = "  ".join(read_table(tables.render_arras([mr]).splitlines())[1][0])
    assert re.search(r"[\d,.]+ ± [\d.]+ %", row)
    # Fifteen iterations are too few blocks (7 of 2) for the bootstrap: the t interval of the
    # mean time per iteration, t(14) = 2.1448 standard errors each side.
    few = rates.record_rates({**mr, "samples": samples[:15], "rank_samples": None})
    mean, sd = statistics.fmean(samples[:15]), statistics.stdev(samples[:15])
    half = 2.144787 * sd / math.sqrt(15)
    assert few["msgs_per_s_ci_low"] == pytest.approx(64 / (mean + half))
    assert few["msgs_per_s_ci_high"] == pytest.approx(64 / (mean - half))
    two = rates.record_rates({**mr, "samples": samples[:2], "rank_samples": None})
    assert two["rate_ci_pct"] is None and two["msgs_per_s_ci_low"] is None


@given(st.lists(st.floats(1e-6, 1.0), min_size=3, max_size=19))
def test_a_short_runs_rate_interval_is_the_t_interval_of_its_mean(times):
    bounds = rates.mean_t_interval(times)
    mean = statistics.fmean(times)
    assert bounds is not None
    assert bounds[0] <= mean * (1 + 1e-12) and bounds[1] >= mean * (1 - 1e-12)
    if max(times) > min(times) * 1.01:  # iterations that differ widen it
        assert bounds[1] - bounds[0] > 0
    assert rates.mean_t_interval(times[:2]) is None


# --- the timed loop keeps nothing per message --------------------------------


def _blocks_during(fn, calls):
    fn()  # first call outside: lazy imports, caches
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(calls):
            fn()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    return sum(stat.count_diff for stat in after.compare_to(before, "filename")
               if stat.count_diff > 0)


@pytest.mark.parametrize("leader", [True, False])
def test_message_loop_keeps_nothing_per_message(leader):
    import torch

    from pytest_distbench.families.message_rate.loop import message_loop
    from pytest_distbench.families.p2p.common import make_endpoint
    from pytest_distbench.families.transports.null import NullTransport

    endpoint = make_endpoint(NullTransport(), 0, 1, leader, 10, 1, torch.device("cpu"))
    small = _blocks_during(message_loop(endpoint, 10, 10), 200)  # 20 000 messages
    large = _blocks_during(message_loop(endpoint, 10, 1000), 200)  # 2 000 000 messages
    # Nothing accumulates, and 100 x the messages does not add allocations.
    assert small < 50 and large < 50


# --- names -----------------------------------------------------------------------


def test_unknown_transport_or_path_is_named():
    from types import SimpleNamespace

    from pytest_distbench.families.message_rate.loop import run_message_rate
    from pytest_distbench.families.transports import make_transport

    with pytest.raises(ValueError, match="unknown transport 'carrier pigeon'.*process_group"):
        make_transport("carrier pigeon", None)
    with pytest.raises(ValueError, match="unknown path 'sideways'.*client_to_computation"):
        run_message_rate(SimpleNamespace(world_size=3, rank=0), "sideways", 1, 1)


def test_paths_say_how_many_ranks_they_need():
    from pytest_distbench.families.message_rate.paths import PATHS

    assert {n: p.min_ranks for n, p in PATHS.items()} == {
        "client_to_computation": 2, "computation_to_client": 2, "computation_to_computation": 3}
    assert PATHS["computation_to_computation"].skip_reason(3) is None
    assert "this world has 2" in PATHS["computation_to_computation"].skip_reason(2)


# --- payload patterns and the wrong-byte count -------------------------------------


@FAST
@given(st.integers(0, 300), st.integers(0, 70), st.integers(2, 5000))
def test_patterns_are_never_zero_and_tell_senders_slots_and_shifts_apart(source, slot, nbytes):
    import torch

    from pytest_distbench.families.p2p.common import pattern

    p = pattern(source, slot, nbytes)
    assert p.dtype == torch.uint8 and p.numel() == nbytes and bool((p != 0).all())
    assert not torch.equal(p[1:], p[:-1])  # a message shifted by one byte is wrong
    assert not torch.equal(p, pattern(source + 1, slot, nbytes))
    assert not torch.equal(p, pattern(source, slot + 1, nbytes))


def test_wrong_bytes_counts_exactly_what_differs():
    import torch

    from pytest_distbench.families.p2p.common import make_endpoint, pattern
    from pytest_distbench.families.transports.null import NullTransport

    e = make_endpoint(NullTransport(), 0, 1, False, 3, 100, torch.device("cpu"))
    assert e.wrong_bytes() == 300  # nothing arrived yet: every byte of 3 slots
    for slot, buffer in enumerate(e.recv_slots):
        buffer.copy_(pattern(1, slot, 100))
    assert e.wrong_bytes() == 0
    e.recv_slots[2][7] ^= 1
    e.recv_slots[0][:5] = pattern(0, 0, 5)  # bytes from the wrong sender
    assert e.wrong_bytes() == 1 + int((pattern(0, 0, 5) != pattern(1, 0, 5)).sum())
    e.clear()
    assert e.wrong_bytes() == 300


def test_every_p2p_table_marks_a_point_short_of_its_precision_target():
    short = {"target": 0.02, "achieved": 0.18, "met": False, "stopped_by": "budget",
             "statistic": "p50"}
    latency = _record("p2p_latency", 64, [1e-4 * (1 + i % 5) for i in range(40)],
                      {"messages_per_iteration": 2, "round_trip": True})
    bandwidth = _record("p2p_bandwidth", 64, [1e-3 * (1 + i % 5) for i in range(40)],
                        {"messages_per_iteration": 64, "window": 64, "pairs": 1})
    for record in (latency, bandwidth):
        record["summary"] = summarize(record["samples"]).as_dict()
        assert "*" not in tables.render_osu([record]).splitlines()[2]
        record["precision"] = short
        text = tables.render_osu([record])
        assert re.search(r"± [\d.]+ %\*", text.splitlines()[2]), text
