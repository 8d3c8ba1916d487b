"""The TCPStore family's registration: its settings, tables and plots (libuv vs legacy)."""

from __future__ import annotations

from ...registry import Family
from ...results.rendering.plot_spec import (
    P50,
    TIME,
    Axis,
    Headline,
    Panel,
    PlotSpec,
    Record,
    Value,
)
from .options import SETTINGS
from .table import init_caveat, render_barrier, render_init, render_ops, render_routes


def time_ms(record: Record, seconds: float) -> float:
    return seconds * 1e3


CLIENTS = Value("clients", field="params.clients")
CONNECTIONS = Axis("clients", "connections")
MS = Value("p50", of_time=time_ms)

FAMILY = Family(
    name="store",
    settings=SETTINGS,
    tables={"store_init": render_init, "store_barrier": render_barrier, "store_ops": render_ops,
            "store_routes": render_routes},
    no_interval=("store_init", "store_routes"),
    caveats={"store_init": init_caveat},
    headlines={
        "store_init": "init: one timed constructor per test (no CI from one sample)",
        "store_barrier": "barrier: p50 of the rounds ± 95 % CI",
        "store_ops": "latency: p50 of every client's operations ± 95 % CI",
    },
    # tcpstore-libuv-backend.rst figures 1 and 2, and the operations.
    plots=(
        PlotSpec(
            name="store_init", families=("store_init",), x=CLIENTS, x_axis=CONNECTIONS,
            series=("params.store_backend",), split=("family", "world_size"),
            panels=(Panel("TCPStore init time", Axis("init time", "ms"), (MS,)),),
            headline=(Headline("init p50", MS, "ms"),), title="{family} ({world_size} ranks)",
            note=f"{P50}; time on the server until every client connected; libuv vs legacy",
        ),
        PlotSpec(
            name="store_barrier", families=("store_barrier",), x=CLIENTS, x_axis=CONNECTIONS,
            series=("params.store_backend",), split=("family", "world_size"),
            panels=(Panel("store-based barrier time", Axis("barrier time", "ms"), (MS,)),),
            headline=(Headline("barrier p50", MS, "ms"),), title="{family} ({world_size} ranks)",
            note=f"{P50}; one store-based barrier; libuv vs legacy",
        ),
        PlotSpec(
            name="store_ops", families=("store_ops",), x=CLIENTS, x_axis=CONNECTIONS,
            # One file per operation: fourteen lines (7 operations x 2 backends) in one panel
            # hide each other; set and multi_set only send, the rest are round trips.
            series=("params.store_backend",), split=("family", "world_size", "figures.op"),
            panels=(Panel("store operation latency", Axis("latency per operation", "us"),
                          (TIME,)),),
            headline=(Headline("p50", TIME, "us"),), title="{family} ({world_size} ranks)",
            note=P50,
        ),
    ),
)
