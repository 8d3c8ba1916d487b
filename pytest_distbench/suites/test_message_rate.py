"""Message rate with credits over three paths (rank 0 = client, ranks 1.. = computations).

    pytest --distbench --world-size=3 --pyargs pytest_distbench.suites -k message_rate \
        --tensor-size=1B --distbench-credits=1,5,10,100

A path that needs more ranks than the world has (computation_to_computation needs 3) skips
with the reason.  Credits come from ``--distbench-credits``, sizes from ``--tensor-size``.
"""

import pytest

from pytest_distbench.families.message_rate.harness import PATHS, run_message_rate

pytestmark = pytest.mark.distbench


@pytest.mark.parametrize("path", list(PATHS))
def test_message_rate(distbench, path, credits, nbytes):
    run_message_rate(distbench, path, credits, nbytes)
