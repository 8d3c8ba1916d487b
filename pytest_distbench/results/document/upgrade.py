"""Files of an older schema read as the current one: each reader then knows one layout.

Schema 3 took what the harness wrote into a family's `figures` out of them: the headline's
statistic and a duration run's stop at the sample cap became fields of their own, and a
rate's printed interval (schema 2: written over the family's own interval in `figures`, which
moved aside to `figures.sampling_rate_ci`) became `rate_ci`, beside `p50_ci`.
"""

from __future__ import annotations

from typing import Any

from ..statistics.interval import LEVEL
from .record import Record

MOVED_OUT_OF_FIGURES = ("headline_statistic", "stopped_at_sample_cap")


def upgraded(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` (validated) with every record in the current schema's layout."""
    if doc["distbench"]["schema_version"] >= 3:
        return doc
    benchmarks = [{**bench, "distbench": record_of_schema_2(bench["distbench"])}
                  for bench in doc["benchmarks"]]
    return {**doc, "benchmarks": benchmarks}


def record_of_schema_2(record: Record) -> Record:
    """A record of schema 1 or 2 in schema 3's layout."""
    figures = dict(record.get("figures") or {})
    moved = {key: figures.pop(key) for key in MOVED_OUT_OF_FIGURES if key in figures}
    own = figures.pop("sampling_rate_ci", None)
    if isinstance(own, dict):  # a sealed rate: the printed interval was in figures
        moved["rate_ci"] = {"level": LEVEL, "low": figures.get("msgs_per_s_ci_low"),
                            "high": figures.get("msgs_per_s_ci_high"),
                            "half_width_pct": figures.get("rate_ci_pct"),
                            "mbps_low": figures.get("mbps_ci_low"),
                            "mbps_high": figures.get("mbps_ci_high")}
        nbytes = record.get("nbytes") or 0
        low, high = own.get("low"), own.get("high")
        figures.update(msgs_per_s_ci_low=low, msgs_per_s_ci_high=high,
                       mbps_ci_low=None if low is None else low * nbytes / 1e6,
                       mbps_ci_high=None if high is None else high * nbytes / 1e6,
                       rate_ci_pct=own.get("pct"))
    return {**record, "figures": figures, **moved}  # type: ignore[typeddict-item]
