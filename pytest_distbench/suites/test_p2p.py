"""Built-in point-to-point benchmarks, OSU style: one test per benchmark, one row per size.

    pytest --distbench --world-size=2 --pyargs pytest_distbench.suites -k p2p
    pytest --distbench --world-size=4 ... -k message_rate_pairs --distbench-window=16,64

Sizes come from ``--tensor-size`` (exact bytes; sums like ``1MiB+1B`` allowed); the window of
the bandwidth tests from ``--distbench-window`` (default 64).  Every received payload is
checked; a wrong byte fails the test.  Without ``--tensor-size`` or ``--distbench-budget`` the
suite runs its own smaller sweep (1 B to 4 MiB, 0.25 s per point) so that the main job stays
short; any size or budget on the command line replaces it.
"""

import pytest

from pytest_distbench.families.p2p.members import P2P, run_p2p

pytestmark = pytest.mark.distbench(defaults={"tensor_size": "1B:4MiB:x16", "budget": "0.25s"})


def test_p2p_latency(distbench, nbytes):
    run_p2p(distbench, P2P["p2p_latency"], nbytes)


def test_p2p_bandwidth(distbench, nbytes, window):
    run_p2p(distbench, P2P["p2p_bandwidth"], nbytes, window)


def test_p2p_bibw(distbench, nbytes, window):
    run_p2p(distbench, P2P["p2p_bibw"], nbytes, window)


def test_p2p_message_rate_pairs(distbench, nbytes, window):
    run_p2p(distbench, P2P["p2p_message_rate_pairs"], nbytes, window)
