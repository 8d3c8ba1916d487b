"""The physical sanity rules: pure logic with hypothesis, then real sessions whose records break
one rule each (the test fails naming the rule, the results file keeps the record marked
invalid, no table shows it), and real message-rate runs at odd world sizes that keep them all."""

from __future__ import annotations

import json
import textwrap

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_distbench.families.p2p.rates import record_rates
from pytest_distbench.harness.environment.physical import copy_gbps, shortest_round_trip_s
from pytest_distbench.results.sanity import (
    DURATION_FLOOR_S,
    DURATION_TOLERANCE,
    MachineBounds,
    violations,
)

times = st.lists(st.floats(min_value=1e-7, max_value=10.0), min_size=1, max_size=50)


def _record(samples: list[float], **extra: object) -> dict:
    record = {"samples": samples, "iterations": len(samples), "rank_samples": [samples],
              "device": "cpu", "figures": {}}
    record.update(extra)
    return record


@given(times)
def test_positive_finite_times_break_no_rule(samples):
    assert violations(_record(samples)) == []


@given(times, st.sampled_from([0.0, -1e-6, float("nan"), float("inf")]))
def test_a_time_that_is_not_positive_and_finite_breaks_the_first_rule(samples, bad):
    found = violations(_record([*samples, bad]))
    assert len(found) == 1 and found[0].startswith("times positive and finite: 1 of")


@given(times, st.integers(1, 64))
def test_message_rates_the_families_derive_are_consistent(samples, per_iteration):
    record = _record(samples, nbytes=8, figures={"messages_per_iteration": per_iteration})
    record["figures"] = {**record["figures"], **record_rates(record)}
    assert violations(record) == []


@given(times, st.integers(1, 64), st.floats(1.01, 100))
def test_a_rate_that_does_not_follow_from_count_and_time_is_caught(samples, k, factor):
    record = _record(samples, nbytes=8, figures={"messages_per_iteration": k})
    figures = {**record["figures"], **record_rates(record)}
    figures["msgs_per_s"] *= factor
    record["figures"] = figures
    assert any(v.startswith("rate consistent") for v in violations(record))


@given(times, st.floats(1.02, 10))
def test_iterations_longer_than_their_timed_region_are_caught(samples, factor):
    record = _record(samples, elapsed_s=[sum(samples) / factor])
    assert any("longer than its whole timed region" in v for v in violations(record))
    record["elapsed_s"] = [sum(samples) * 1.5]
    assert violations(record) == []


@given(st.floats(0.1, 60), st.floats(0.0, 3.0), st.floats(1e-5, 1.0))
def test_a_duration_run_neither_stops_early_nor_overruns_more_than_stopping_costs(
        duration, ratio, slowest):
    record = _record([slowest], duration_s=duration, elapsed_s=[duration * ratio, None])
    broken = [v for v in violations(record) if v.startswith("duration kept")]
    late = max(DURATION_TOLERANCE * duration, DURATION_FLOOR_S, 2 * slowest)
    early = duration * ratio < duration * (1 - DURATION_TOLERANCE)
    assert bool(broken) == (early or duration * ratio > duration + late)


@given(st.floats(0.1, 60), st.lists(st.floats(0.0, 1.0), min_size=1, max_size=7))
def test_a_rank_that_started_late_times_a_shorter_region_of_a_run_that_kept_its_duration(
        duration, shares):
    # The ranks stop together; one that left the start barrier later times less of the run
    # (CI: rank 0 ran 0.2 s, ranks 1 and 2 timed 0.178 s and 0.17 s of it).
    elapsed = [duration] + [duration * share for share in shares]
    record = _record([1e-4], duration_s=duration, elapsed_s=elapsed)
    assert not [v for v in violations(record) if v.startswith("duration kept")]
    record["elapsed_s"] = [duration * 0.5] + [duration * share * 0.5 for share in shares]
    assert [v for v in violations(record) if v.startswith("duration kept")]


def test_a_duration_run_stopped_at_its_sample_cap_is_not_held_to_it():
    record = _record([0.001], duration_s=10.0, elapsed_s=[1.0], stopped_at_sample_cap=True)
    assert violations(record) == []


@given(st.floats(0.01, 100), st.floats(0.01, 100))
def test_bus_bandwidth_above_the_memory_copy_is_caught_on_cpu_only(busbw, copy):
    bounds = MachineBounds(copy_gbps=copy)
    broken = violations(_record([1.0], busbw_gbps=busbw), bounds)
    assert bool(broken) == (busbw > copy)
    assert violations(_record([1.0], busbw_gbps=busbw, device="cuda"), bounds) == []


@given(st.floats(0.01, 1e7), st.floats(0.01, 1e7), st.floats(1, 1e4))
def test_a_gpu_bandwidth_above_twice_its_copy_rate_is_caught(algbw, busbw, copy):
    """A CUDA record is held to its GPU's measured copy rate, not the host's: its memory moves
    twice the copy rate (read and write), and no bandwidth delivered into it can be more."""
    record = _record([1.0], algbw_gbps=algbw, busbw_gbps=busbw, device="cuda")
    broken = violations(record, MachineBounds(copy_gbps=0.001, device_copy_gbps=copy))
    assert len(broken) == (algbw > 2 * copy) + (busbw > 2 * copy)
    assert all("twice this GPU's measured copy rate" in line for line in broken)
    assert violations(record, MachineBounds(copy_gbps=0.001)) == []  # no probe: no GPU rule


def test_the_h200s_printed_figure_of_no_data_is_impossible_beside_its_copy_rate():
    # issue 41: one rank's in-place all_reduce of 1 GiB, 39,856 GB/s, on a GPU whose 1 GiB
    # all_gather (a copy) ran at 2,095 GB/s.
    record = _record([1.0], algbw_gbps=39_856.0, busbw_gbps=0.0, device="cuda")
    [line] = violations(record, MachineBounds(device_copy_gbps=2_095.0))
    assert line.startswith("bandwidth within the GPU's memory: algorithm bandwidth 3.986e+04 "
                           "GB/s is above twice")


@given(st.floats(1, 1e7), st.floats(1e-7, 1e-3), st.integers(1, 100))
def test_a_credit_one_rate_faster_than_the_round_trip_is_caught(rate, round_trip, credits):
    bounds = MachineBounds(round_trip_s=round_trip)
    record = _record([1.0], figures={"credits": credits, "msgs_per_s": rate})
    broken = violations(record, bounds)
    assert bool(broken) == (credits == 1 and rate > 1 / round_trip)


def test_the_machine_bounds_are_measured_and_plausible():
    assert 0.05 < copy_gbps() < 10_000  # GB/s: from a slow VM to a server's caches
    round_trip = shortest_round_trip_s()
    assert round_trip is not None and 1e-7 < round_trip < 0.05


IMPOSSIBLE = """
import pytest

@pytest.mark.distbench
def test_impossible(distbench):
    # 1 GiB in a nanosecond per iteration: no machine moves bytes that fast.
    distbench.record([1e-9] * 5, nbytes=1 << 30, family="hand_timed")

@pytest.mark.distbench
def test_possible(distbench):
    distbench.record([0.5] * 5, nbytes=1 << 10, family="hand_timed")
"""


def test_an_impossible_record_fails_its_test_and_is_kept_marked_invalid(
        pytester, distbench_run):
    pytester.makepyfile(IMPOSSIBLE)
    result = distbench_run("--distbench", "--world-size=2", "--distbench-json=run.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*a figure that is physically impossible is not printed*",
        "*test_impossible*: bandwidth below memory copy: bus bandwidth * GB/s is above this "
        "machine's fastest memory copy*",
    ])
    document = json.loads((pytester.path / "run.json").read_text())
    by_name = {b["distbench"]["name"]: b["distbench"] for b in document["benchmarks"]}
    assert by_name["test_impossible[gloo-ws2]"]["invalid"]
    assert "invalid" not in by_name["test_possible[gloo-ws2]"]
    bounds = document["distbench"]["environment"]["machine_bounds"]
    assert bounds["copy_gbps"] > 0 and bounds["round_trip_s"] > 0
    table = result.stdout.str().split("distbench results")[-1]
    assert " 1 KiB " in table and " 1 GiB " not in table  # the possible row only


@pytest.mark.parametrize("world_size", [3, pytest.param(5, marks=pytest.mark.extended)])
def test_message_rate_off_path_ranks_are_not_timed_and_the_duration_is_kept(
        pytester, distbench_run, world_size):
    """Defect 1: at 3+ ranks the rank off the path timed its idle loop; with a duration the
    ranks then disagreed on when to stop. Every rank on the path now lasts the duration."""
    pytester.makepyfile(textwrap.dedent("""
        import pytest
        from pytest_distbench.families.message_rate.loop import run_message_rate

        @pytest.mark.distbench
        def test_rate(distbench):
            run_message_rate(distbench, "computation_to_computation", credits=1, nbytes=1)
    """))
    result = distbench_run("--distbench", f"--world-size={world_size}",
                           "--distbench-duration=2s", "--distbench-timeout=90",
                           "--distbench-json=run.json")
    result.assert_outcomes(passed=1)
    record = json.loads((pytester.path / "run.json").read_text())["benchmarks"][0]["distbench"]
    sender, receiver = record["figures"]["sender"], record["figures"]["receiver"]
    assert record["timed_ranks"] == sorted({sender, receiver})
    for rank, samples in enumerate(record["rank_samples"]):
        assert bool(samples) == (rank in record["timed_ranks"])
    for rank in record["timed_ranks"]:  # the sanity rule held them to the duration
        assert record["elapsed_s"][rank] >= 1.8
    bound = 1 / document_round_trip(pytester)
    assert 0 < record["figures"]["msgs_per_s"] <= bound


def document_round_trip(pytester) -> float:
    document = json.loads((pytester.path / "run.json").read_text())
    return document["distbench"]["environment"]["machine_bounds"]["round_trip_s"]
