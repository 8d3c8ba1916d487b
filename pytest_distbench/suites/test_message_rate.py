"""Message rate with credits over three paths (rank 0 = client, ranks 1.. = computations).

    pytest --distbench --world-size=3 --pyargs pytest_distbench.suites -k message_rate \
        --tensor-size=1B --distbench-credits=1,5,10,100

A path that needs more ranks than the world has (computation_to_computation needs 3) skips
with the reason.  Credits come from ``--distbench-credits``, sizes from ``--tensor-size``.
Without ``--tensor-size`` or ``--distbench-budget`` the suite runs its own smaller sweep (1 B,
1 KiB, 64 KiB, 1 MiB at 0.25 s per point) so that the main job stays short.
"""

import pytest

from pytest_distbench.families.message_rate.loop import PATHS, run_message_rate

pytestmark = pytest.mark.distbench(
    defaults={"tensor_size": "1B,1KiB,64KiB,1MiB", "budget": "0.25s"})


@pytest.mark.parametrize("path", list(PATHS))
def test_message_rate(distbench, path, credits, nbytes):
    run_message_rate(distbench, path, credits, nbytes)


# Every RPC test starts its own agents (about 9 s per test at 8 ranks here): a shorter default.
@pytest.mark.distbench(defaults={"tensor_size": "1B,64KiB", "budget": "0.25s"})
@pytest.mark.parametrize("path", list(PATHS))
def test_message_rate_rpc(distbench, rpc_agent, path, credits, nbytes):
    # The same paths and credits with every message an RPC (torch.distributed.rpc, TensorPipe).
    run_message_rate(distbench, path, credits, nbytes, transport="rpc")
