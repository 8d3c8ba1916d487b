"""Built-in RPC benchmarks (torch.distributed.rpc over TensorPipe) between two ranks.

Run them with::

    pytest --distbench --world-size=2 --pyargs pytest_distbench.suites -k "rpc_latency or rpc_throughput" --distbench-credits=1,16,256
    pytest --distbench --world-size=2 --pyargs pytest_distbench.suites -k transports --tensor-size=1.25KB,20KB,1.25MB,10MB,40MB

Rank 0 drives, rank 1 answers.  rpc_latency is a round trip (the payload goes and comes back);
rpc_throughput keeps ``credits`` requests in flight; test_transports moves the same payloads
over each transport this machine has (TensorPipe shm, TensorPipe uv, gloo send/recv; nccl and
TensorPipe's CUDA channels on a GPU machine) and lists the others as skipped with the reason.
"""  # noqa: E501

import pytest

from pytest_distbench.families.rpc.catalog import TRANSPORTS, unavailable
from pytest_distbench.families.rpc.latency import run_latency
from pytest_distbench.families.rpc.throughput import run_throughput
from pytest_distbench.families.rpc.transports import run_transport

pytestmark = [pytest.mark.distbench(world_size=2), pytest.mark.distbench_rpc]


def test_rpc_latency(distbench, rpc_agent, nbytes):
    run_latency(distbench, rpc_agent, nbytes)


def test_rpc_throughput(distbench, rpc_agent, nbytes, credits):
    run_throughput(distbench, rpc_agent, nbytes, credits)


def _transport_params():
    # A transport this machine lacks is skipped with its reason before any rank starts.
    for transport in TRANSPORTS:
        reason = unavailable(transport)
        marks = [pytest.mark.skip(reason=f"{transport.name}: {reason}")] if reason else []
        yield pytest.param(transport.name, id=transport.name, marks=marks)


@pytest.mark.parametrize("transport", list(_transport_params()))
def test_transports(distbench, tcp_store, process_group, rank, world_size, transport, nbytes):
    run_transport(distbench, tcp_store, process_group, rank, world_size, transport, nbytes)
