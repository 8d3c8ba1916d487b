"""Built-in collective benchmarks, nccl-tests style: one test per collective, one row per size.

Run them with::

    pytest --distbench --world-size=8
    pytest --distbench --world-size=2,4,8 --backend=gloo,nccl --tensor-size=1KiB,1MiB,64MiB

Every sized test is parametrized by the plugin over ``nbytes`` (``--tensor-size``, default a
sweep from 4 B to 64 MiB) and runs with ``--distbench-dtype`` (default float32).  Reported sizes
follow nccl-tests: all_gather reports its output, reduce_scatter its input, all_to_all the
per-rank buffer; counts that must split evenly across ranks are rounded down to a multiple of
the world size and the size actually moved is what is reported.  Every result is checked.
"""

import pytest
import torch

from pytest_distbench.families.collectives.members import COLLECTIVES, run_collective

pytestmark = pytest.mark.distbench


def distbench_effective_nbytes(test_name, nbytes, world_size, dtype):
    """The bytes a test really moves for a requested size: the plugin runs equal ones once."""
    collective = COLLECTIVES.get(test_name.removeprefix("test_"))
    if collective is None or not collective.sized:
        return None
    elem_size = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    try:
        return collective.sizes(nbytes, world_size, elem_size).nbytes
    except ValueError:
        return None  # the test itself reports a size it cannot run


def test_all_reduce(distbench, nbytes):
    run_collective(distbench, COLLECTIVES["all_reduce"], nbytes)


def test_all_gather(distbench, nbytes):
    run_collective(distbench, COLLECTIVES["all_gather"], nbytes)


def test_reduce_scatter(distbench, nbytes):
    run_collective(distbench, COLLECTIVES["reduce_scatter"], nbytes)


def test_broadcast(distbench, nbytes):
    run_collective(distbench, COLLECTIVES["broadcast"], nbytes)


def test_reduce(distbench, nbytes):
    run_collective(distbench, COLLECTIVES["reduce"], nbytes)


def test_all_to_all(distbench, nbytes):
    run_collective(distbench, COLLECTIVES["all_to_all"], nbytes)


def test_barrier(distbench):
    # No nbytes: a barrier moves no payload, so it runs once per world, not once per size.
    run_collective(distbench, COLLECTIVES["barrier"])
