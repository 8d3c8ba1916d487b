"""An in-memory record made into the JSON values a results file holds.

Ranks hand over numpy arrays and scalars, tuples and whatever a test parametrized with; the
file holds plain numbers, lists and strings. Normalising never refuses anything: what still
does not fit is left for validation (schema.py) to name with its field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, cast

from .record import Record

# Ints beyond this are certainly corrupt, and bounding them keeps later float arithmetic
# (sizes, ratios) from raising OverflowError on absurd values.
MAX_INT = 2**63 - 1
# Parametrize values nest inside benchmarks[i].distbench.params, well within schema.MAX_DEPTH.
_MAX_PARAM_DEPTH = 32

NULLABLE_RECORD_FIELDS = (
    "nbytes", "count", "dtype", "busbw_factor", "warmup", "iterations",
    "algbw_gbps", "busbw_gbps", "wrong", "skew", "stalls", "threshold",
    "duration_s", "peak_rss_bytes", "pressure", "p50_ci", "timing", "batch_iterations",
    "peak_gpu_allocated_bytes", "peak_gpu_reserved_bytes", "moves_no_data", "of_peak",
)  # fmt: skip


def normalize_record(record: Record) -> Record:
    """A copy of the record with every nullable field present and plain JSON values."""
    out: dict[str, Any] = dict(record)
    for key in NULLABLE_RECORD_FIELDS:
        out.setdefault(key, None)
    for key in ("params", "figures"):
        value = out.get(key) or {}
        out[key] = json_safe(dict(value)) if isinstance(value, Mapping) else value
    # Samples often arrive as numpy arrays or numpy scalars; the file holds plain floats.
    if "samples" in out:
        out["samples"] = _floats(out["samples"])
    ranks = out.get("rank_samples") or []
    out["rank_samples"] = [_floats(r) for r in ranks] if isinstance(ranks, (list, tuple)) else ranks
    if isinstance(out.get("summary"), dict):
        out["summary"] = {key: _plain_number(value) for key, value in out["summary"].items()}
    for key in ("busbw_factor", "algbw_gbps", "busbw_gbps", "skew", "threshold"):
        out[key] = _plain_number(out[key])
    for key in ("world_size", "nbytes", "count", "wrong", "stalls", "warmup", "iterations"):
        if key in out:
            out[key] = _plain_number(out[key])
    # Duration runs, live reports, pressure and memory (docs/duration-and-pressure.md).
    out["duration_s"] = _plain_number(out["duration_s"])
    for key in ("peak_rss_bytes", "peak_gpu_allocated_bytes", "peak_gpu_reserved_bytes"):
        if isinstance(out[key], (list, tuple)):
            out[key] = [_plain_number(v) for v in out[key]]
    out["batch_iterations"] = _plain_number(out["batch_iterations"])
    if isinstance(out["pressure"], dict):
        out["pressure"] = json_safe(out["pressure"])
    for key in ("p50_ci", "sampling_ci"):
        if isinstance(out.get(key), dict):
            out[key] = json_safe(out[key])
    if out.get("live_reports") is not None:
        out["live_reports"] = json_safe(out["live_reports"])
    return cast(Record, out)


def _floats(values: Any) -> Any:
    try:
        return [float(v) for v in values]
    except (TypeError, ValueError):
        return values  # left as is so validation reports it with its field path


def _plain_number(value: Any) -> Any:
    # numpy scalars -> Python numbers, without turning bools or strings into numbers
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    item = getattr(value, "item", None)
    if callable(item):
        try:
            plain = item()
        except (TypeError, ValueError):
            return value
        if isinstance(plain, (int, float)) and not isinstance(plain, bool):
            return plain
    return value


def json_safe(value: Any, depth: int = 0) -> Any:
    """Parametrize values can be anything; keep what JSON holds faithfully, repr the rest."""
    if depth > _MAX_PARAM_DEPTH:
        return repr(value)
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if abs(value) <= MAX_INT else repr(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (list, tuple)):
        return [json_safe(v, depth + 1) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: json_safe(v, depth + 1) for k, v in value.items()}
    return repr(value)
