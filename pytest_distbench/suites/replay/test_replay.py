"""Captured traces replayed as benchmarks (docs/replay.md).

    pytest --distbench --world-size=4 --pyargs pytest_distbench.suites -k replay
    pytest --distbench --world-size=4 --distbench-replay=trace/

Runs every trace of ``--distbench-replay=DIR[,DIR...]`` (the option alone collects this
suite), or without it the shipped trace (suites/traces/), each in the whole world (a trace of
N ranks replays on ranks 0..N-1; a smaller world skips), with the gaps between the calls
that ``--distbench-replay-gaps`` asks for (default busy).
"""

import pytest

from pytest_distbench.families.replay.step import gaps_setting, replay, trace_params

pytestmark = pytest.mark.distbench


def pytest_generate_tests(metafunc):
    if "trace" in metafunc.fixturenames:
        metafunc.parametrize("trace", trace_params(metafunc.config))


@pytest.fixture
def replay_gaps(request):
    return gaps_setting(request.config, request.node)


def test_replay(distbench, trace, replay_gaps):
    replay(distbench, trace, gaps=replay_gaps)
