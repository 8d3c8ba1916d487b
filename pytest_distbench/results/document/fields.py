"""The benchmark record's fields, each declared once: the value it accepts (schema.py checks a
record against this table), how an in-memory value is made plain for the file and whether it
is written as null when unknown (normalize.py applies this table). Whether a field is
required and whether it may be null is the Record type's (record.py): one declaration each.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from .record import REQUIRED_KEYS, Record

# Ints beyond this are certainly corrupt, and bounding them keeps later float arithmetic
# (sizes, ratios) from raising OverflowError on absurd values.
MAX_INT = 2**63 - 1
# Parametrize values nest inside benchmarks[i].distbench.params, well within schema.MAX_DEPTH.
_MAX_PARAM_DEPTH = 32


class SchemaError(Exception):
    """One field of a document that does not fit the schema ("" for the document itself)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


# --- what a JSON value is -------------------------------------------------------------------

def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, int):
        return abs(value) <= MAX_INT
    return math.isfinite(value)


def is_time_list(values: Any) -> bool:
    return isinstance(values, list) and all(is_number(v) and v >= 0 for v in values)


def json_type(value: Any) -> str:
    """What a JSON value is, without what it holds (a refusal's most of a file's content)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


# --- made plain for the file (never refuses: what does not fit is left for the check) ------

def plain_number(value: Any) -> Any:
    """numpy scalars -> Python numbers, without turning bools or strings into numbers."""
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
    if isinstance(value, (int, float)):  # beyond 2**63 or not finite: no JSON number
        return value if is_number(value) else repr(value)
    if isinstance(value, (list, tuple)):
        return [json_safe(v, depth + 1) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: json_safe(v, depth + 1) for k, v in value.items()}
    return repr(value)


def _floats(values: Any) -> Any:
    try:
        return [float(v) for v in values]
    except (TypeError, ValueError):
        return values


def _each(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda v: [convert(x) for x in v] if isinstance(v, (list, tuple)) else v


def _json_object(value: Any) -> Any:
    return json_safe(dict(value)) if isinstance(value, Mapping) else value


def _if_dict(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda v: convert(v) if isinstance(v, dict) else v


_summary = _if_dict(lambda value: {k: plain_number(v) for k, v in value.items()})


# --- the checks -----------------------------------------------------------------------------

Accepts = Callable[[Any, Mapping[str, Any]], bool]  # (value, record); never given None
Parts = Callable[[Any, Mapping[str, Any], str], None]  # raises SchemaError naming the part


class Field(NamedTuple):
    expected: str  # what the one-line error says the value should be
    accepts: Accepts
    parts: Parts | None = None  # checks of the value's parts, each naming its own path
    plain: Callable[[Any], Any] | None = None  # how the file holds an in-memory value
    fill: Callable[[], Any] | None = None  # written with this when absent or null


def _text(v: Any, _: Mapping[str, Any]) -> bool:
    return isinstance(v, str) and bool(v)


def _kind(kind: type) -> Accepts:
    return lambda v, _: isinstance(v, kind)


def _int_from(minimum: int) -> Accepts:
    return lambda v, _: is_int(v) and minimum <= v <= MAX_INT


def _non_negative(v: Any, _: Mapping[str, Any]) -> bool:
    return is_number(v) and v >= 0


def _positive(v: Any, _: Mapping[str, Any]) -> bool:
    return is_number(v) and v > 0


def _list_of(item: Callable[[Any], bool]) -> Accepts:
    return lambda v, _: isinstance(v, list) and all(map(item, v))


def _of_peak(v: Any, _: Mapping[str, Any]) -> bool:
    return (isinstance(v, dict) and all(is_number(v.get(k)) and v[k] >= 0
                                        for k in ("pct", "peak_gbps"))
            and v.get("bandwidth") in ("algbw", "busbw") and isinstance(v.get("source"), str))


def _incomplete(v: Any, _: Mapping[str, Any]) -> bool:
    return (isinstance(v, dict) and is_number(v.get("bound_s")) and v["bound_s"] > 0
            and isinstance(v.get("reason"), str))


def _timed_ranks(v: Any, record: Mapping[str, Any]) -> bool:
    return isinstance(v, list) and bool(v) and all(
        is_int(r) and 0 <= r < record["world_size"] for r in v)


def _per_rank(v: Any, record: Mapping[str, Any]) -> bool:
    return isinstance(v, list) and len(v) == record["world_size"]


def _rank_bytes(peaks: list[Any], _: Mapping[str, Any], where: str) -> None:
    for rank, value in enumerate(peaks):
        if not (is_int(value) and 0 <= value <= MAX_INT):
            raise SchemaError(f"{where}[{rank}]", f"expected an integer >= 0, got {short(value)}")


def _rank_samples(ranks: list[Any], record: Mapping[str, Any], where: str) -> None:
    if len(ranks) > record["world_size"]:
        raise SchemaError(where, f"{len(ranks)} ranks of samples for world_size "
                          f"{record['world_size']}")
    timed, samples = record.get("timed_ranks"), record["samples"]
    for rank, values in enumerate(ranks):
        field = f"{where}[{rank}]"
        if not is_time_list(values):
            raise SchemaError(field, "expected a list of numbers (seconds, finite, >= 0)")
        if timed is not None and rank not in timed:
            if values:
                raise SchemaError(field, f"rank {rank} is not in timed_ranks and has samples")
        elif len(values) != len(samples):
            raise SchemaError(field, f"has {len(values)} samples, samples has {len(samples)} "
                              "(ragged rank_samples)")


SUMMARY_KEYS = ("n", "min", "p50", "p75", "p90", "p95", "p99", "max", "mean", "stddev", "iqr")


def _summary_parts(summary: dict[str, Any], record: Mapping[str, Any], where: str) -> None:
    for key in SUMMARY_KEYS:
        if key not in summary:
            raise SchemaError(where, f"missing {key!r}")
        if not (is_number(summary[key]) and summary[key] >= 0):
            raise SchemaError(at(where, key), f"expected a non-negative finite number, got "
                              f"{short(summary[key])}")
    if summary["n"] != len(record["samples"]):
        raise SchemaError(at(where, "n"), f"{short(summary['n'])} does not match the "
                          f"{len(record['samples'])} samples")


def _interval_parts(ci: dict[str, Any], _: Mapping[str, Any], where: str) -> None:
    """The p50's interval (optional: files written before it lack it, readers compute it)."""
    for key in ("low", "high", "half_width_pct"):
        value = ci.get(key)
        if value is not None and not (is_number(value) and value >= 0):
            raise SchemaError(at(where, key),
                              f"expected a non-negative number or null, got {short(value)}")
    if (ci.get("low") is None) != (ci.get("high") is None):
        raise SchemaError(where, "expected both low and high, or neither")
    if ci.get("low") is not None and ci["low"] > ci["high"]:
        raise SchemaError(where, f"low {short(ci['low'])} above high {short(ci['high'])}")
    for key, kind, expected in (("run_noise", dict, "an object"), ("why", str, "a string")):
        if ci.get(key) is not None and not isinstance(ci[key], kind):
            raise SchemaError(at(where, key),
                              f"expected {expected} or null, got {json_type(ci[key])}")


def _live_reports(reports: list[Any], _: Mapping[str, Any], where: str) -> None:
    for i, report in enumerate(reports):
        if not (isinstance(report, dict) and all(is_number(report.get(key)) and report[key] >= 0
                                                 for key in ("time_s", "iterations"))):
            raise SchemaError(f"{where}[{i}]",
                              "expected an object with time_s and iterations (numbers >= 0)")


def _null() -> None:
    return None


_NAME = Field("a non-empty string", _text)
_COUNT = Field("an integer >= 0", _int_from(0), plain=plain_number, fill=_null)
_STRING = Field("a string", _kind(str), fill=_null)
_RATE = Field("a non-negative number", _non_negative, plain=plain_number, fill=_null)
_RANK_BYTES = Field("one byte count per rank (a list)", _per_rank, _rank_bytes,
                    plain=_each(plain_number), fill=_null)
_INTERVAL = Field("an object", _kind(dict), _interval_parts, plain=_if_dict(json_safe))
_OBJECT = Field("an object", _kind(dict), plain=_json_object, fill=dict)

# In the order they are checked: a field's check may read one checked above it.
RECORD_FIELDS: dict[str, Field] = {
    "id": _NAME, "name": _NAME, "family": _NAME, "backend": _NAME, "device": _NAME,
    "world_size": Field("an integer >= 1", _int_from(1), plain=plain_number),
    "params": _OBJECT, "figures": _OBJECT,
    "nbytes": _COUNT, "count": _COUNT, "warmup": _COUNT, "iterations": _COUNT, "wrong": _COUNT,
    "stalls": _COUNT,
    "dtype": _STRING, "placement": Field("a string", _kind(str)), "moves_no_data": _STRING,
    "busbw_factor": _RATE, "algbw_gbps": _RATE, "busbw_gbps": _RATE, "skew": _RATE,
    "threshold": _RATE,
    "of_peak": Field("an object with pct and peak_gbps (numbers >= 0), bandwidth (algbw or "
                     "busbw) and source (a string)", _of_peak, fill=_null),
    "requested_nbytes": Field("a list of integers >= 0 (bytes)",
                              _list_of(lambda n: is_int(n) and n >= 0)),
    "samples": Field("a non-empty list of numbers (seconds, finite, >= 0)",
                     lambda v, _: is_time_list(v) and bool(v), plain=_floats),
    "invalid": Field("a list of broken rules (strings)", _list_of(lambda r: isinstance(r, str))),
    "incomplete": Field("an object with bound_s (seconds > 0) and reason (a string)",
                        _incomplete),
    "elapsed_s": Field("a list of seconds (or null) per rank",
                       _list_of(lambda e: e is None or (is_number(e) and e >= 0))),
    "timed_ranks": Field("a non-empty list of ranks of the world", _timed_ranks),
    "rank_samples": Field("a list with one list of samples per rank", _kind(list),
                          _rank_samples, plain=_each(_floats), fill=list),
    "duration_s": Field("a positive number of seconds", _positive, plain=plain_number,
                        fill=_null),
    "peak_rss_bytes": _RANK_BYTES, "peak_gpu_allocated_bytes": _RANK_BYTES,
    "peak_gpu_reserved_bytes": _RANK_BYTES,
    "timing": Field("a non-empty string", _text, fill=_null),
    "headline_statistic": Field("p50 or mean", lambda v, _: v in ("p50", "mean")),
    "stopped_at_sample_cap": Field("a boolean", _kind(bool)),
    "batch_iterations": Field("an integer >= 1", _int_from(1), plain=plain_number, fill=_null),
    "pressure": Field("an object", _kind(dict), plain=_if_dict(json_safe), fill=_null),
    "live_reports": Field("a list", _kind(list), _live_reports, plain=json_safe),
    "summary": Field("an object", _kind(dict), _summary_parts, plain=_summary),
    "p50_ci": _INTERVAL._replace(fill=_null), "sampling_ci": _INTERVAL, "rate_ci": _INTERVAL,
    "revisits": Field("a list of positive numbers", _list_of(lambda v: is_number(v) and v > 0)),
}  # fmt: skip

# Where the Record type allows null (`X | None`): the one declaration of it.
NULLABLE: frozenset[str] = frozenset(
    key for key, hint in typing.get_type_hints(Record).items()
    if type(None) in typing.get_args(hint))
assert REQUIRED_KEYS <= RECORD_FIELDS.keys()
