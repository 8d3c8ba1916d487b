"""store_init: the study's TCPStore initialization time, plus every client's connect time.

The sample is the time on the server (rank 0) from the start of the server's constructor
until it returns, i.e. until all N store users are connected: the study's definition.
The figures add the distribution of the N - 1 simulated clients' connect times (each timed
around its own client constructor), so a few stalled connects are seen, not averaged away.
"""

from __future__ import annotations

from typing import Any

from . import plan
from .common import DidNotComplete, StoreConfig, record_facts, record_incomplete, simulated_store

FAMILY = "store_init"


def run_init(distbench: Any, tcp_store: Any, clients: int, backend: str,
             config: StoreConfig) -> None:
    try:
        with simulated_store(distbench, tcp_store, clients, backend, config) as sim:
            figures = record_facts(sim)
            if sim.connect_s:
                figures.update(plan.connect_summary(sim.connect_s))
                figures["init_without_stalls_s"] = plan.init_without_stalls(sim.init_s,
                                                                            sim.connect_s)
            figures["slow_connect_threshold_s"] = plan.SLOW_CONNECT_S
            figures["connect_s"] = sim.connect_s
            init_s = sim.init_s
    except DidNotComplete as exc:
        record_incomplete(distbench, FAMILY, exc)
        return
    distbench.record([init_s], family=FAMILY, figures=figures)
