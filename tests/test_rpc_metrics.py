"""The arithmetic of the RPC family's figures and its option parsers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_distbench.families.rpc import metrics, options, throughput

latencies = st.lists(st.floats(min_value=1e-7, max_value=10.0), min_size=1, max_size=200)


@given(latencies, st.integers(min_value=1, max_value=200))
def test_agent_throughput_is_batch_size_over_latency_per_sample(values, batch_size):
    out = metrics.throughputs(values, batch_size)
    assert out == [batch_size / v for v in values]


@given(latencies)
def test_percentiles_match_numpy_linear(values):
    got = metrics.at_percentiles(values)
    for p in metrics.PERCENTILES:
        assert math.isclose(got[f"p{p}"], float(np.percentile(values, p)), rel_tol=1e-12,
                            abs_tol=1e-15)
    assert got["p50"] <= got["p75"] <= got["p90"] <= got["p95"]


@given(st.lists(st.floats(min_value=1e-6, max_value=10.0), min_size=1, max_size=99)
       .filter(lambda v: len(v) % 2 == 1), st.integers(min_value=1, max_value=100))
def test_median_throughput_is_batch_over_median_latency_for_odd_counts(values, batch_size):
    # With an odd count the median is a sample, and 1/x reverses the order of the samples.
    m = metrics.agent_observer_metrics(values, values, batch_size)
    assert math.isclose(m["agent_throughput"]["p50"],
                        batch_size / m["agent_latency_s"]["p50"], rel_tol=1e-12)
    assert math.isclose(m["observer_throughput"]["p50"], 1 / m["observer_latency_s"]["p50"],
                        rel_tol=1e-12)
    assert set(m) == set(metrics.METRICS)


@given(st.integers(min_value=1, max_value=10**6), st.integers(min_value=0, max_value=2**30),
       st.floats(min_value=1e-7, max_value=100.0))
def test_rates_are_decimal_and_per_iteration(messages, nbytes, seconds):
    assert math.isclose(metrics.messages_per_s(messages, seconds), messages / seconds)
    assert math.isclose(metrics.megabytes_per_s(messages * nbytes, seconds),
                        messages * nbytes / seconds / 1e6)


@given(st.integers(min_value=1, max_value=10**5))
def test_a_throughput_iteration_holds_at_least_four_windows(credits):
    n = throughput.messages_per_iteration(credits)
    assert n >= 4 * credits and n >= throughput.MIN_MESSAGES


@given(st.integers(min_value=1, max_value=4096), st.integers(min_value=1, max_value=1 << 31))
def test_a_throughput_iteration_carries_at_most_its_byte_cap(credits, nbytes):
    n = throughput.messages_per_iteration(credits, nbytes)
    assert n >= 1
    assert n * nbytes <= throughput.ITERATION_BYTES_CAP or n == 1
    if nbytes * max(throughput.MIN_MESSAGES, 4 * credits) <= throughput.ITERATION_BYTES_CAP:
        assert n == throughput.messages_per_iteration(credits)  # small payloads: unchanged


def test_bad_values_raise():
    with pytest.raises(ValueError):
        metrics.throughputs([0.0], 1)
    with pytest.raises(ValueError):
        metrics.throughputs([1.0], 0)
    with pytest.raises(ValueError):
        metrics.messages_per_s(1, 0.0)


def test_option_parsers():
    assert options.parse_bool_list("true,false,yes") == [True, False]
    assert options.parse_shape_list("10-20-10, 15-20-25") == [(10, 20, 10), (15, 20, 25)]
    for bad in ("10-x-10", "10--10", "0-1"):
        with pytest.raises(ValueError, match="state size"):
            options.parse_shape_list(bad)
    with pytest.raises(ValueError, match="batch mode"):
        options.parse_bool_list("maybe")
