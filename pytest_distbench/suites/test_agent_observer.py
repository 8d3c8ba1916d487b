"""PyTorch's RPC agent/observer (RL) benchmark through the plugin.

Run it with::

    pytest --distbench --world-size=10,20,40,80 --pyargs pytest_distbench.suites -k agent_observer --distbench-batch=true,false
    pytest --distbench --world-size=10 --pyargs pytest_distbench.suites -k agent_observer --distbench-state-size=15-20-25 --distbench-nlayers=10 --distbench-out-features=20

Rank 0 coordinates, rank 1 is the agent, the other ranks are observers.  World size is the x
axis; --distbench-batch, --distbench-state-size, --distbench-nlayers, --distbench-out-features,
--distbench-episodes and --distbench-steps each take a list, and a list is a sweep.  The report
gives agent latency, agent throughput, observer latency and observer throughput at p50, p75,
p90 and p95, as the seed does.  Its world is unpinned by default (``--distbench-bind=none``,
as upstream's spawned processes are; a --distbench-bind on the command line replaces it):
pinned, the batch agent's latency at 10 ranks was 0.58x of upstream's, unpinned 0.92-1.07x
(docs/rpc.md).
"""  # noqa: E501

import pytest

from pytest_distbench.families.rpc.agent_observer import run_agent_observer

pytestmark = pytest.mark.distbench(defaults={"bind": "none"})


def test_agent_observer(distbench, rpc_agent, batch, state_size, nlayers, out_features,
                        episodes, steps):
    run_agent_observer(distbench, rpc_agent, batch=batch, state_size=state_size,
                       nlayers=nlayers, out_features=out_features, episodes=episodes,
                       steps=steps)
