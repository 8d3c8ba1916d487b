"""The point-to-point family's registration (OSU style): settings, table, rates, plots."""

from __future__ import annotations

from ...registry import Family
from ...results.rendering.plot_spec import (
    MBPS_TOTAL,
    MSGS_TOTAL,
    NBYTES,
    P50,
    SIZE,
    TOTALS,
    Axis,
    Headline,
    Panel,
    PlotSpec,
    Record,
    Value,
    positive,
)
from .options import SETTINGS
from .rates import record_rates
from .tables import render_osu

MEMBERS = ("p2p_latency", "p2p_bandwidth", "p2p_bibw", "p2p_message_rate_pairs")


def one_way_us(record: Record, seconds: float) -> float:
    # A ping-pong iteration is a round trip of two messages: one-way = time / 2, as OSU does.
    return seconds / positive(record, "figures.messages_per_iteration", 2.0) * 1e6


ONE_WAY = Value("one-way p50", of_time=one_way_us)

FAMILY = Family(
    name="p2p",
    settings=SETTINGS,
    tables=dict.fromkeys(MEMBERS, render_osu),
    figures=dict.fromkeys(MEMBERS, record_rates),
    latencies=("p2p_latency",),
    headlines={
        "p2p_latency": "one-way latency: p50 of the ping-pong round trips / 2 ± 95 % CI",
        **dict.fromkeys(MEMBERS[1:], "MB/s: total messages / total time ± 95 % CI "
                        "(block bootstrap)"),
    },
    plots=(
        PlotSpec(
            name="p2p_latency", families=("p2p_latency",), x=NBYTES, x_axis=SIZE,
            panels=(Panel("one-way latency", Axis("one-way latency", "us"), (ONE_WAY,)),),
            headline=(Headline("one-way", ONE_WAY, "us"),),
            note=f"{P50}; one-way = ping-pong round trip / 2",
        ),
        PlotSpec(
            name="p2p_bandwidth", families=("p2p_bandwidth", "p2p_bibw"), x=NBYTES, x_axis=SIZE,
            panels=(Panel("bandwidth", Axis("bandwidth", "MB/s"), (MBPS_TOTAL,)),),
            headline=(Headline("", MBPS_TOTAL, "MB/s"),),
            note=f"{TOTALS}; MB/s = messages x bytes / time, 1 MB = 1e6 B",
        ),
        PlotSpec(
            name="p2p_message_rate", families=("p2p_message_rate_pairs",), x=NBYTES, x_axis=SIZE,
            panels=(Panel("message rate", Axis("message rate", "msgs/s"), (MSGS_TOTAL,)),
                    Panel("bandwidth", Axis("bandwidth", "MB/s"), (MBPS_TOTAL,))),
            headline=(Headline("", MSGS_TOTAL, "msgs/s"), Headline("", MBPS_TOTAL, "MB/s")),
            note=TOTALS,
        ),
    ),
)
