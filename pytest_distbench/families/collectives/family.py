"""The collectives family's registration: nccl-tests tables (the default style) and its plots."""

from __future__ import annotations

from ...registry import Family
from ...results.rendering.plot_spec import (
    NBYTES,
    P50,
    SIZE,
    TIME,
    TIME_US,
    Axis,
    Headline,
    Panel,
    PlotSpec,
    Record,
    Value,
)

SIZED = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all")


def busbw_gbps(record: Record, seconds: float) -> float | None:
    nbytes, factor = record.get("nbytes"), record.get("busbw_factor")
    if not nbytes or factor is None or record.get("moves_no_data"):
        return None  # a call that moves no data has no bandwidth (record["moves_no_data"])
    return nbytes * factor / seconds / 1e9


BUSBW = Value("busbw", of_time=busbw_gbps)

FAMILY = Family(
    name="collectives",
    records=(*SIZED, "barrier"),
    plots=(
        PlotSpec(
            name="collectives", families=SIZED, x=NBYTES, x_axis=SIZE,
            panels=(Panel("bus bandwidth", Axis("busbw", "GB/s"), (BUSBW,)),
                    Panel("time", TIME_US, (TIME,))),
            headline=(Headline("p50", TIME, "us"), Headline("busbw", BUSBW, "GB/s")),
            note=f"{P50}; busbw = bytes x nccl-tests factor / time, GB/s = 1e9 B/s",
        ),
        PlotSpec(
            name="barrier", families=("barrier",), x=Value("ranks", field="world_size"),
            x_axis=Axis("world size", "ranks"), series=("backend",),
            panels=(Panel("barrier time", TIME_US, (TIME,)),),
            headline=(Headline("p50", TIME, "us"),), note=P50,
        ),
    ),
)
