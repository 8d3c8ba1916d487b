"""Captured traces replayed as benchmarks (docs/replay.md).

    pytest --distbench --world-size=4 --pyargs pytest_distbench.suites -k replay
    pytest --distbench --world-size=4 --distbench-replay=trace/

Runs every trace of ``--distbench-replay=DIR[,DIR...]`` (the option alone collects this
suite), or without it the shipped trace (suites/traces/), each in the whole world (a trace of
N ranks replays on ranks 0..N-1; a smaller world skips).
"""

import pytest

from pytest_distbench.families.replay.step import replay, trace_params

pytestmark = pytest.mark.distbench


def pytest_generate_tests(metafunc):
    if "trace" in metafunc.fixturenames:
        metafunc.parametrize("trace", trace_params(metafunc.config))


def test_replay(distbench, trace):
    replay(distbench, trace)
