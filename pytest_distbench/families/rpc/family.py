"""The RPC family's registration: agent/observer settings, its four tables and plots."""

from __future__ import annotations

from ...registry import Family
from ...results.rendering.plot_spec import (
    MSGS,
    NBYTES,
    P50,
    SIZE,
    Axis,
    Headline,
    Panel,
    PlotSpec,
    Value,
    time_us,
)
from .options import SETTINGS
from .tables import (
    render_agent_observer,
    render_latency,
    render_throughput,
    render_transports,
    seed_blocks,
    throughput_caveat,
)

ROUND_TRIP = Value("round trip p50", of_time=time_us)
PERCENTILES = ("p50", "p75", "p90", "p95")


def _percentiles(figure: str, scale: float = 1.0) -> tuple[Value, ...]:
    return tuple(Value(q, field=f"figures.metrics.{figure}.{q}", scale=scale)
                 for q in PERCENTILES)


FAMILY = Family(
    name="rpc",
    settings=SETTINGS,
    tables={"rpc_latency": render_latency, "rpc_throughput": render_throughput,
            "rpc_transports": render_transports, "agent_observer": render_agent_observer},
    details={"agent_observer": seed_blocks},
    no_interval=("agent_observer",),
    latencies=("rpc_latency", "rpc_transports"),
    caveats={"rpc_throughput": throughput_caveat},
    headlines={
        "rpc_latency": "round trip: p50 of the slowest rank per iteration ± 95 % CI",
        "rpc_throughput": "msgs/s: of the p50 iteration (slowest rank) ± 95 % CI",
        "rpc_transports": "round trip: p50 of the slowest rank per iteration ± 95 % CI",
        "agent_observer": "latency and throughput: percentiles of the per-request figures",
    },
    plots=(
        PlotSpec(
            name="rpc_latency", families=("rpc_latency",), x=NBYTES, x_axis=SIZE,
            series=("world_size",),
            panels=(Panel("round-trip latency", Axis("round trip", "us"), (ROUND_TRIP,)),),
            headline=(Headline("round trip", ROUND_TRIP, "us"),), note=P50,
        ),
        PlotSpec(
            name="rpc_throughput", families=("rpc_throughput",),
            x=Value("credits", field="params.credits"), x_axis=Axis("credits (calls in flight)"),
            series=("nbytes",),  # one plot, one line per payload size
            panels=(Panel("throughput", Axis("throughput", "calls/s"), (MSGS,)),),
            headline=(Headline("", MSGS, "calls/s"),), note=P50,
        ),
        PlotSpec(
            name="rpc_transports", families=("rpc_transports",), x=NBYTES, x_axis=SIZE,
            series=("params.transport",), split=("family", "world_size"),
            panels=(Panel("round-trip time", Axis("round trip", "us"), (ROUND_TRIP,)),),
            headline=(Headline("round trip", ROUND_TRIP, "us"),),
            title="{family} ({world_size} ranks)", note=f"{P50}; one line per transport",
        ),
        PlotSpec(
            name="agent_observer", families=("agent_observer",),
            x=Value("world size", field="world_size"), x_axis=Axis("world size", "ranks"),
            series=("backend",),
            panels=(
                Panel("agent latency", Axis("latency", "ms"),
                      _percentiles("agent_latency_s", 1e3)),
                Panel("agent throughput", Axis("throughput", "requests/s"),
                      _percentiles("agent_throughput")),
                Panel("observer latency", Axis("latency", "ms"),
                      _percentiles("observer_latency_s", 1e3)),
                Panel("observer throughput", Axis("throughput", "requests/s"),
                      _percentiles("observer_throughput")),
            ),
            headline=(
                Headline("agent p50", Value("a", field="figures.metrics.agent_latency_s.p50",
                                            scale=1e3), "ms"),
                Headline("observer p50",
                         Value("o", field="figures.metrics.observer_latency_s.p50", scale=1e3),
                         "ms"),
            ),
            note="percentiles of the per-request figures (docs/rpc.md, agent/observer)",
        ),
    ),
)
