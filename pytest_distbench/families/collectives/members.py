"""The collectives by name: ``COLLECTIVES`` maps a family name to its
:class:`~.harness.Collective`, in the order the results tables list them.  Benchmark one inside
a distbench test with ``run_collective(distbench, COLLECTIVES["all_reduce"], nbytes)``.
"""

from __future__ import annotations

from .all_gather import ALL_GATHER
from .all_reduce import ALL_REDUCE
from .all_to_all import ALL_TO_ALL
from .barrier import BARRIER
from .broadcast import BROADCAST
from .common import Buffers, Collective, Layout, run_collective
from .reduce import REDUCE
from .reduce_scatter import REDUCE_SCATTER

COLLECTIVES: dict[str, Collective] = {
    c.name: c
    for c in (
        ALL_REDUCE,
        ALL_GATHER,
        REDUCE_SCATTER,
        BROADCAST,
        REDUCE,
        ALL_TO_ALL,
        BARRIER,
    )
}

__all__ = ["COLLECTIVES", "Buffers", "Collective", "Layout", "run_collective"]
