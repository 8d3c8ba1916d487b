"""The plots of every family: each states only its axes (see plot_spec.py for the fields).

A new family adds its spec here with one `register(PlotSpec(...))`. Records are matched by
their `family`; the keys read below are the ones in docs/results-schema.md (params and figures).
Times are stored in seconds; a value derived from the times is drawn at the p50 with a p5-p95
band, a value read from `figures` as it is.
"""

from __future__ import annotations

from .plot_spec import Axis, Headline, Panel, PlotSpec, Record, Value, lookup, register, time_us

SIZE = Axis("message size", "bytes", size=True)
TIME_US = Axis("time per iteration", "us")
P50 = "p50, band p5-p95 of the iterations"


def _factor(record: Record, key: str, default: float) -> float:
    value = lookup(record, key)
    return float(value) if isinstance(value, (int, float)) and value > 0 else default


def _messages(record: Record) -> float:
    """Messages one timed iteration moves (contract: figures.messages_per_iteration)."""
    return _factor(record, "figures.messages_per_iteration", 1.0)


def busbw_gbps(record: Record, seconds: float) -> float | None:
    nbytes, factor = record.get("nbytes"), record.get("busbw_factor")
    if not nbytes or factor is None:
        return None
    return nbytes * factor / seconds / 1e9


def msgs_per_s(record: Record, seconds: float) -> float:
    return _messages(record) / seconds


def mbps(record: Record, seconds: float) -> float | None:
    nbytes = record.get("nbytes")
    return None if not nbytes else _messages(record) * nbytes / seconds / 1e6


def one_way_us(record: Record, seconds: float) -> float:
    # A ping-pong iteration is a round trip of two messages: one-way = time / 2, as OSU does.
    return seconds / _factor(record, "figures.messages_per_iteration", 2.0) * 1e6


def time_ms(record: Record, seconds: float) -> float:
    return seconds * 1e3


NBYTES = Value("message size", field="nbytes")
TIME = Value("p50", of_time=time_us)
BUSBW = Value("busbw", of_time=busbw_gbps)
MSGS = Value("messages/s", of_time=msgs_per_s)
MBPS = Value("MB/s", of_time=mbps)

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all")

register(PlotSpec(
    name="collectives", families=COLLECTIVES, x=NBYTES, x_axis=SIZE,
    panels=(Panel("bus bandwidth", Axis("busbw", "GB/s"), (BUSBW,)),
            Panel("time", TIME_US, (TIME,))),
    headline=(Headline("p50", TIME, "us"), Headline("busbw", BUSBW, "GB/s")),
    note=f"{P50}; busbw = bytes x nccl-tests factor / time, GB/s = 1e9 B/s",
))
register(PlotSpec(
    name="barrier", families=("barrier",), x=Value("ranks", field="world_size"),
    x_axis=Axis("world size", "ranks"), series=("backend",),
    panels=(Panel("barrier time", TIME_US, (TIME,)),),
    headline=(Headline("p50", TIME, "us"),), note=P50,
))

# -- point to point (OSU) and message rate -----------------------------------------------------
ONE_WAY = Value("one-way p50", of_time=one_way_us)
register(PlotSpec(
    name="p2p_latency", families=("p2p_latency",), x=NBYTES, x_axis=SIZE,
    panels=(Panel("one-way latency", Axis("one-way latency", "us"), (ONE_WAY,)),),
    headline=(Headline("one-way", ONE_WAY, "us"),),
    note=f"{P50}; one-way = ping-pong round trip / 2",
))
register(PlotSpec(
    name="p2p_bandwidth", families=("p2p_bandwidth", "p2p_bibw"), x=NBYTES, x_axis=SIZE,
    panels=(Panel("bandwidth", Axis("bandwidth", "MB/s"), (MBPS,)),),
    headline=(Headline("", MBPS, "MB/s"),),
    note=f"{P50}; MB/s = messages x bytes / time, 1 MB = 1e6 B",
))
register(PlotSpec(
    name="p2p_message_rate", families=("p2p_message_rate_pairs",), x=NBYTES, x_axis=SIZE,
    panels=(Panel("message rate", Axis("message rate", "msgs/s"), (MSGS,)),
            Panel("bandwidth", Axis("bandwidth", "MB/s"), (MBPS,))),
    headline=(Headline("", MSGS, "msgs/s"), Headline("", MBPS, "MB/s")), note=P50,
))
register(PlotSpec(
    name="message_rate", families=("message_rate",), x=Value("credits", field="params.credits"),
    x_axis=Axis("credits (messages in flight)"), series=("params.path",),
    split=("family", "backend", "world_size", "figures.transport"),
    panels=(Panel("message rate", Axis("message rate", "msgs/s"), (MSGS,)),
            Panel("bandwidth", Axis("bandwidth", "MB/s"), (MBPS,))),
    headline=(Headline("", MSGS, "msgs/s"), Headline("", MBPS, "MB/s")),
    title="{family} ({backend}, {world_size} ranks)",
    note=f"{P50}; one line per path",
))

# -- RPC -----------------------------------------------------------------------------------------
ROUND_TRIP = Value("round trip p50", of_time=time_us)
register(PlotSpec(
    name="rpc_latency", families=("rpc_latency",), x=NBYTES, x_axis=SIZE, series=("world_size",),
    panels=(Panel("round-trip latency", Axis("round trip", "us"), (ROUND_TRIP,)),),
    headline=(Headline("round trip", ROUND_TRIP, "us"),), note=P50,
))
register(PlotSpec(
    name="rpc_throughput", families=("rpc_throughput",),
    x=Value("credits", field="params.credits"), x_axis=Axis("credits (calls in flight)"),
    series=("world_size",),
    panels=(Panel("throughput", Axis("throughput", "calls/s"), (MSGS,)),),
    headline=(Headline("", MSGS, "calls/s"),), note=P50,
))
register(PlotSpec(
    name="rpc_transports", families=("rpc_transports",), x=NBYTES, x_axis=SIZE,
    series=("params.transport",), split=("family", "world_size"),
    panels=(Panel("round-trip time", Axis("round trip", "us"), (ROUND_TRIP,)),),
    headline=(Headline("round trip", ROUND_TRIP, "us"),),
    title="{family} ({world_size} ranks)", note=f"{P50}; one line per transport",
))

PERCENTILES = ("p50", "p75", "p90", "p95")


def _percentiles(figure: str, scale: float = 1.0) -> tuple[Value, ...]:
    return tuple(Value(q, field=f"figures.metrics.{figure}.{q}", scale=scale)
                 for q in PERCENTILES)


register(PlotSpec(
    name="agent_observer", families=("agent_observer",),
    x=Value("world size", field="world_size"), x_axis=Axis("world size", "ranks"),
    series=("backend",),
    panels=(
        Panel("agent latency", Axis("latency", "ms"), _percentiles("agent_latency_s", 1e3)),
        Panel("agent throughput", Axis("throughput", "requests/s"),
              _percentiles("agent_throughput")),
        Panel("observer latency", Axis("latency", "ms"), _percentiles("observer_latency_s", 1e3)),
        Panel("observer throughput", Axis("throughput", "requests/s"),
              _percentiles("observer_throughput")),
    ),
    headline=(
        Headline("agent p50", Value("a", field="figures.metrics.agent_latency_s.p50", scale=1e3),
                 "ms"),
        Headline("observer p50",
                 Value("o", field="figures.metrics.observer_latency_s.p50", scale=1e3), "ms"),
    ),
    note="percentiles of the per-request figures (rpc-agent-observer-benchmark.md)",
))

# -- TCPStore (tcpstore-libuv-backend.rst figures 1 and 2) --------------------------------------
INIT_MS = Value("p50", of_time=time_ms)
CLIENTS = Value("clients", field="params.clients")
register(PlotSpec(
    name="store_init", families=("store_init",), x=CLIENTS, x_axis=Axis("clients", "connections"),
    series=("params.store_backend",), split=("family", "world_size"),
    panels=(Panel("TCPStore init time", Axis("init time", "ms"), (INIT_MS,)),),
    headline=(Headline("init p50", INIT_MS, "ms"),),
    title="{family} ({world_size} ranks)",
    note=f"{P50}; time on the server until every client connected; libuv vs legacy",
))
register(PlotSpec(
    name="store_barrier", families=("store_barrier",), x=CLIENTS,
    x_axis=Axis("clients", "connections"), series=("params.store_backend",),
    split=("family", "world_size"),
    panels=(Panel("store-based barrier time", Axis("barrier time", "ms"), (INIT_MS,)),),
    headline=(Headline("barrier p50", INIT_MS, "ms"),),
    title="{family} ({world_size} ranks)", note=f"{P50}; one store-based barrier; libuv vs legacy",
))
register(PlotSpec(
    name="store_ops", families=("store_ops",), x=CLIENTS, x_axis=Axis("clients", "connections"),
    # One file per operation: fourteen lines (7 operations x 2 backends) in one panel hide
    # each other; set and multi_set only send, the rest are round trips.
    series=("params.store_backend",), split=("family", "world_size", "figures.op"),
    panels=(Panel("store operation latency", Axis("latency per operation", "us"), (TIME,)),),
    headline=(Headline("p50", TIME, "us"),), title="{family} ({world_size} ranks)", note=P50,
))
