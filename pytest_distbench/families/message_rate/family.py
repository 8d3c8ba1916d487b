"""The message-rate family's registration: the arras table and the rates it shares with p2p."""

from __future__ import annotations

from ...registry import Family
from ...results.rendering.plot_spec import (
    MBPS_TOTAL,
    MSGS_TOTAL,
    TOTALS,
    Axis,
    Headline,
    Panel,
    PlotSpec,
    Value,
)
from ..p2p.rates import record_rates
from ..p2p.tables import render_arras

FAMILY = Family(
    name="message_rate",
    tables={"message_rate": render_arras},
    figures={"message_rate": record_rates},
    headlines={"message_rate": "msgs/s: total messages / total time ± 95 % CI "
                               "(block bootstrap)"},
    plots=(
        PlotSpec(
            name="message_rate", families=("message_rate",),
            x=Value("credits", field="params.credits"),
            x_axis=Axis("credits (messages in flight)"), series=("params.path",),
            split=("family", "backend", "world_size", "figures.transport"),
            panels=(Panel("message rate", Axis("message rate", "msgs/s"), (MSGS_TOTAL,)),
                    Panel("bandwidth", Axis("bandwidth", "MB/s"), (MBPS_TOTAL,))),
            headline=(Headline("", MSGS_TOTAL, "msgs/s"), Headline("", MBPS_TOTAL, "MB/s")),
            title="{family} ({backend}, {world_size} ranks)",
            note=f"{TOTALS}; one line per path",
        ),
    ),
)
