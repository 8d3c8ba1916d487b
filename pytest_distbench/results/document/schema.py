"""What a results document must be: every field the verdict, report and plot code reads.

A document that passes validate_document can be compared, gated, appended to and rendered
without further defensive code; each problem is one SchemaError naming the field. A record is
checked the same way when it is made (check_record), so a bad one fails its own test instead of
the end of the session. The schema is documented in docs/results-schema.md; bump SCHEMA_VERSION
only for changes an older reader would misread.
"""

from __future__ import annotations

import json
import math
from typing import Any

from .normalize import MAX_INT, normalize_record
from .record import Record

SCHEMA_VERSION = 2

SUMMARY_KEYS = ("n", "min", "p50", "p75", "p90", "p95", "p99", "max", "mean", "stddev", "iqr")
HISTORY_KEY = "history"

# Far deeper than anything we write, far shallower than what makes json/recursion blow up.
MAX_DEPTH = 64


class SchemaError(Exception):
    """One field of a document that does not fit the schema ("" for the document itself)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


class RecordError(ValueError):
    """A benchmark record that does not fit the schema; str() names its test and the field."""

    def __init__(self, record_id: Any, field: str, message: str):
        named = f" {record_id}" if record_id else ""
        super().__init__(f"invalid benchmark record{named}: {field}: {message}")
        self.id = record_id
        self.field = field
        self.message = message


def is_figure(record: Record) -> bool:
    """Whether a record's samples are a figure: a record marked invalid (it broke a physical
    sanity rule) or incomplete (what it measured did not finish within its bound: its samples
    are only that bound) is kept in the file and never compared, gated or plotted."""
    return not record.get("invalid") and not record.get("incomplete")


def records(doc: dict[str, Any]) -> dict[str, Record]:
    """The benchmark records of a (validated) document that are figures (is_figure), keyed by
    id, in file order."""
    return {bench["distbench"]["id"]: bench["distbench"] for bench in doc["benchmarks"]
            if is_figure(bench["distbench"])}


def stored_record(record: Record) -> Record:
    """The record as a results file holds it (normalize_record), or RecordError naming the
    field that does not fit the schema or cannot be stored as JSON."""
    normal = normalize_record(record)
    try:
        _check_values(normal)
        validate_record(normal, "")
    except SchemaError as exc:
        raise RecordError(record.get("id"), exc.field or "record", exc.message) from None
    for key, value in normal.items():  # fields the schema does not know must still be JSON
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise RecordError(record.get("id"), key or repr(key),
                              f"cannot be stored as JSON: {exc}") from None
    return normal


def check_record(record: Record) -> None:
    """Raise RecordError naming the field if the record would not fit a results file."""
    stored_record(record)


_NOT_OURS = "not a pytest-distbench results file"


def validate_document(doc: Any) -> None:
    if not isinstance(doc, dict):
        raise SchemaError("", f"{_NOT_OURS} (top level is {json_type(doc)}, expected an object)")
    meta = doc.get("distbench")
    if meta is None:
        if "benchmarks" in doc and "machine_info" in doc:
            raise SchemaError(
                "", f'{_NOT_OURS} (a plain pytest-benchmark file: no "distbench" section)'
            )
        raise SchemaError("", f'{_NOT_OURS} (no "distbench" section)')
    if not isinstance(meta, dict):
        raise SchemaError("distbench", f"expected an object, got {json_type(meta)}")

    version = meta.get("schema_version")
    if not _is_int(version) or version < 1:
        raise SchemaError(
            "distbench.schema_version", f"expected an integer >= 1, got {_short(version)}"
        )
    if version > SCHEMA_VERSION:
        raise SchemaError(
            "distbench.schema_version",
            f"schema version {version} is newer than this pytest-distbench reads "
            f"(up to {SCHEMA_VERSION}); upgrade pytest-distbench",
        )
    _check_values(doc)
    environment = _expect(meta, "environment", dict, "distbench", "an object")
    _validate_environment(environment, "distbench.environment")
    _expect(meta, "created", str, "distbench", "a string")
    command_line = _expect(meta, "command_line", list, "distbench", "a list of strings")
    if not all(isinstance(arg, str) for arg in command_line):
        raise SchemaError("distbench.command_line", "expected a list of strings")
    if HISTORY_KEY in meta:
        _validate_history(meta[HISTORY_KEY], f"distbench.{HISTORY_KEY}")

    benchmarks = _expect(doc, "benchmarks", list, "", "a list")
    seen: dict[str, int] = {}
    for index, bench in enumerate(benchmarks):
        where = f"benchmarks[{index}]"
        if not isinstance(bench, dict):
            raise SchemaError(where, f"expected an object, got {json_type(bench)}")
        record = _expect(bench, "distbench", dict, where, "an object")
        validate_record(record, f"{where}.distbench")
        if record["id"] in seen:
            raise SchemaError(
                f"{where}.distbench.id",
                f"duplicate id {_short(record['id'])} (also benchmarks[{seen[record['id']]}])",
            )
        seen[record["id"]] = index


def validate_record(record: Record, where: str) -> None:
    """One benchmark record; `where` is its path in the document ("" for a record alone)."""
    for key in ("id", "name", "family", "backend", "device"):
        value = _expect(record, key, str, where, "a string")
        if not value:
            raise SchemaError(_at(where, key), "expected a non-empty string")
    _int_field(record, "world_size", where, minimum=1, nullable=False)
    for key in ("params", "figures"):
        if key in record and not isinstance(record[key], dict):
            raise SchemaError(_at(where, key),
                              f"expected an object, got {json_type(record[key])}")
    for key in ("nbytes", "count", "warmup", "iterations", "wrong", "stalls"):
        _int_field(record, key, where, minimum=0, nullable=True)
    for key in ("dtype", "placement", "moves_no_data"):  # placement keys tables: a string
        if record.get(key) is not None and not isinstance(record[key], str):
            raise SchemaError(_at(where, key), f"expected a string or null, got "
                              f"{json_type(record[key])}")
    for key in ("busbw_factor", "algbw_gbps", "busbw_gbps", "skew", "threshold"):
        value = record.get(key)
        if value is not None and not (is_number(value) and value >= 0):
            raise SchemaError(
                _at(where, key), f"expected a non-negative number or null, got {_short(value)}"
            )
    of_peak = record.get("of_peak")
    if of_peak is not None and not (
            isinstance(of_peak, dict) and all(is_number(of_peak.get(k)) and of_peak[k] >= 0
                                              for k in ("pct", "peak_gbps"))
            and of_peak.get("bandwidth") in ("algbw", "busbw")
            and isinstance(of_peak.get("source"), str)):
        raise SchemaError(_at(where, "of_peak"), "expected an object with pct and peak_gbps "
                          "(numbers >= 0), bandwidth (algbw or busbw) and source (a string), "
                          "or null")
    requested = record.get("requested_nbytes")
    if requested is not None and not (isinstance(requested, list) and all(
            _is_int(n) and n >= 0 for n in requested)):
        raise SchemaError(_at(where, "requested_nbytes"),
                          "expected a list of integers >= 0 (bytes) or null")

    samples = record.get("samples")
    if not _is_time_list(samples) or not samples:
        raise SchemaError(
            _at(where, "samples"), "expected a non-empty list of numbers (seconds, finite, >= 0)"
        )

    rank_samples = record.get("rank_samples", [])
    if not isinstance(rank_samples, list):
        raise SchemaError(_at(where, "rank_samples"),
                          "expected a list with one list of samples per rank")
    if len(rank_samples) > record["world_size"]:
        raise SchemaError(
            _at(where, "rank_samples"),
            f"{len(rank_samples)} ranks of samples for world_size {record['world_size']}",
        )
    invalid = record.get("invalid")
    if invalid is not None and not (isinstance(invalid, list) and all(
            isinstance(rule, str) for rule in invalid)):
        raise SchemaError(_at(where, "invalid"), "expected a list of broken rules (strings)")
    incomplete = record.get("incomplete")
    if incomplete is not None and not (
            isinstance(incomplete, dict) and is_number(incomplete.get("bound_s"))
            and incomplete["bound_s"] > 0 and isinstance(incomplete.get("reason"), str)):
        raise SchemaError(_at(where, "incomplete"),
                          "expected an object with bound_s (seconds > 0) and reason (a string)")
    elapsed = record.get("elapsed_s")
    if elapsed is not None and not (isinstance(elapsed, list) and all(
            e is None or (is_number(e) and e >= 0) for e in elapsed)):
        raise SchemaError(_at(where, "elapsed_s"),
                          "expected a list of seconds (or null) per rank")
    timed = record.get("timed_ranks")
    if timed is not None and not (isinstance(timed, list) and timed and all(
            _is_int(r) and 0 <= r < record["world_size"] for r in timed)):
        raise SchemaError(_at(where, "timed_ranks"),
                          "expected a non-empty list of ranks of the world, or null")
    for rank, values in enumerate(rank_samples):
        field = f"{_at(where, 'rank_samples')}[{rank}]"
        if not _is_time_list(values):
            raise SchemaError(field, "expected a list of numbers (seconds, finite, >= 0)")
        if timed is not None and rank not in timed:
            if values:
                raise SchemaError(field, f"rank {rank} is not in timed_ranks and has samples")
            continue
        if len(values) != len(samples):
            raise SchemaError(
                field, f"has {len(values)} samples, samples has {len(samples)} (ragged "
                "rank_samples)")

    _validate_run_extras(record, where)

    summary = _expect(record, "summary", dict, where, "an object")
    for key in SUMMARY_KEYS:
        if key not in summary:
            raise SchemaError(_at(where, "summary"), f"missing {key!r}")
        if not (is_number(summary[key]) and summary[key] >= 0):
            raise SchemaError(
                _at(where, f"summary.{key}"),
                f"expected a non-negative finite number, got {_short(summary[key])}",
            )
    if summary["n"] != len(samples):
        raise SchemaError(
            _at(where, "summary.n"),
            f"{_short(summary['n'])} does not match the {len(samples)} samples",
        )
    _validate_p50_ci(record.get("p50_ci"), _at(where, "p50_ci"))
    _validate_p50_ci(record.get("sampling_ci"), _at(where, "sampling_ci"))
    revisits = record.get("revisits")
    if revisits is not None and not (isinstance(revisits, list) and all(
            is_number(v) and v > 0 for v in revisits)):
        raise SchemaError(_at(where, "revisits"),
                          f"expected a list of positive numbers or null, got {_short(revisits)}")


def _validate_p50_ci(ci: Any, where: str) -> None:
    """The p50's interval (optional: files written before it lack it, readers compute it)."""
    if ci is None:
        return
    if not isinstance(ci, dict):
        raise SchemaError(where, f"expected an object or null, got {json_type(ci)}")
    for key in ("low", "high", "half_width_pct"):
        value = ci.get(key)
        if value is not None and not (is_number(value) and value >= 0):
            raise SchemaError(_at(where, key),
                              f"expected a non-negative number or null, got {_short(value)}")
    if (ci.get("low") is None) != (ci.get("high") is None):
        raise SchemaError(where, "expected both low and high, or neither")
    if ci.get("low") is not None and ci["low"] > ci["high"]:
        raise SchemaError(where, f"low {_short(ci['low'])} above high {_short(ci['high'])}")
    for key, kind, expected in (("run_noise", dict, "an object"), ("why", str, "a string")):
        if ci.get(key) is not None and not isinstance(ci[key], kind):
            raise SchemaError(_at(where, key),
                              f"expected {expected} or null, got {json_type(ci[key])}")


def _validate_run_extras(record: Record, where: str) -> None:
    """duration_s, the memory peaks, timing, pressure, live_reports (all optional)."""
    duration = record.get("duration_s")
    if duration is not None and not (is_number(duration) and duration > 0):
        raise SchemaError(_at(where, "duration_s"), "expected a positive number of seconds or "
                          f"null, got {_short(duration)}")
    for key in ("peak_rss_bytes", "peak_gpu_allocated_bytes", "peak_gpu_reserved_bytes"):
        _per_rank_bytes(record, key, where)
    timing = record.get("timing")
    if timing is not None and not (isinstance(timing, str) and timing):
        raise SchemaError(_at(where, "timing"), f"expected a non-empty string or null, got "
                          f"{_short(timing)}")
    batch = record.get("batch_iterations")
    if batch is not None and not (_is_int(batch) and 1 <= batch <= MAX_INT):
        raise SchemaError(_at(where, "batch_iterations"), f"expected an integer >= 1 or null, "
                          f"got {_short(batch)}")
    pressure = record.get("pressure")
    if pressure is not None and not isinstance(pressure, dict):
        raise SchemaError(_at(where, "pressure"),
                          f"expected an object or null, got {json_type(pressure)}")
    reports = record.get("live_reports")
    if reports is None:
        return
    if not isinstance(reports, list):
        raise SchemaError(_at(where, "live_reports"),
                          f"expected a list, got {json_type(reports)}")
    for i, report in enumerate(reports):
        ok = isinstance(report, dict) and all(
            is_number(report.get(key)) and report[key] >= 0 for key in ("time_s", "iterations"))
        if not ok:
            raise SchemaError(f"{_at(where, 'live_reports')}[{i}]",
                              "expected an object with time_s and iterations (numbers >= 0)")


def _per_rank_bytes(record: Record, key: str, where: str) -> None:
    peaks = record.get(key)
    if peaks is None:
        return
    if not isinstance(peaks, list) or len(peaks) != record["world_size"]:
        raise SchemaError(_at(where, key),
                          f"expected a list of {record['world_size']} byte counts (one per "
                          f"rank) or null, got {_short(peaks)}")
    for rank, value in enumerate(peaks):
        if not (_is_int(value) and 0 <= value <= MAX_INT):
            raise SchemaError(f"{_at(where, key)}[{rank}]",
                              f"expected an integer >= 0, got {_short(value)}")


def _validate_environment(environment: dict[str, Any], where: str) -> None:
    """Only what is read as more than text: plot captions and markdown list the GPUs, the
    comparisons take the machine-speed probe's median."""
    gpus = environment.get("gpus")
    if gpus is not None and not isinstance(gpus, list):
        raise SchemaError(_at(where, "gpus"), f"expected a list or null, got {json_type(gpus)}")
    # The history keeps the torch version of each run: a baseline must hold one it can keep.
    _optional_string(environment, "torch", where)
    _probe_field(environment, where)


def _validate_history(history: Any, where: str) -> None:
    """A baseline's earlier runs (document/history.py), read by the gate, compare and append."""
    if not isinstance(history, list):
        raise SchemaError(where, f"expected a list of earlier runs, got {json_type(history)}")
    for i, run in enumerate(history):
        at = f"{where}[{i}]"
        if not isinstance(run, dict):
            raise SchemaError(at, f"expected an object (one earlier run), got {json_type(run)}")
        p50s = _expect(run, "p50_s", dict, at, "an object of benchmark id -> seconds")
        for bid, value in p50s.items():
            if not (is_number(value) and value >= 0):
                raise SchemaError(_at(at, "p50_s"), f"{_short(bid)}: expected seconds >= 0, "
                                  f"got {_short(value)}")
        for key in ("created", "torch"):
            _optional_string(run, key, at)
        _probe_field(run, at)


def _optional_string(obj: dict[str, Any], key: str, where: str) -> None:
    if obj.get(key) is not None and not isinstance(obj[key], str):
        raise SchemaError(_at(where, key), f"expected a string or null, got "
                          f"{json_type(obj[key])}")


def _probe_field(obj: dict[str, Any], where: str) -> None:
    probes = obj.get("cpu_probe_s")
    if probes is not None and not _is_time_list(probes):
        raise SchemaError(_at(where, "cpu_probe_s"),
                          "expected a list of seconds (numbers, finite, >= 0) or null")


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _expect(obj: dict[str, Any], key: str, kind: type, where: str, what: str) -> Any:
    field = _at(where, key)
    if key not in obj:
        raise SchemaError(field, f"missing (expected {what})")
    value = obj[key]
    if not isinstance(value, kind):
        raise SchemaError(field, f"expected {what}, got {json_type(value)}")
    return value


def _int_field(record: dict[str, Any], key: str, where: str, *, minimum: int, nullable: bool):
    value = record.get(key)
    if value is None and nullable:
        return
    if not _is_int(value) or not minimum <= value <= MAX_INT:
        null = " or null" if nullable else ""
        raise SchemaError(
            _at(where, key), f"expected an integer >= {minimum}{null}, got {_short(value)}"
        )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, int):
        return abs(value) <= MAX_INT
    return math.isfinite(value)


def _is_time_list(values: Any) -> bool:
    return isinstance(values, list) and all(is_number(v) and v >= 0 for v in values)


def _check_values(doc: dict[str, Any]) -> None:
    """Nesting depth and the size of every integer, anywhere: a huge integer in any field
    would make later float arithmetic (medians, ratios, captions) raise OverflowError.

    Iterative, so a hostile file cannot turn the check itself into a RecursionError; a path is
    spelled out only for the value found wrong."""
    stack: list[tuple[Any, int, Any]] = [(doc, 0, None)]
    while stack:
        value, depth, where = stack.pop()
        if depth > MAX_DEPTH:
            raise SchemaError("", f"{_NOT_OURS} (nested more than {MAX_DEPTH} levels deep)")
        if isinstance(value, dict) and not all(isinstance(key, str) for key in value):
            raise SchemaError(_path(where), "keys must be strings (JSON object keys)")
        for key, item in value.items() if isinstance(value, dict) else enumerate(value):
            if isinstance(item, (dict, list)):
                stack.append((item, depth + 1, (where, key)))
            elif _is_int(item) and abs(item) > MAX_INT:
                raise SchemaError(_path((where, key)),
                                  f"integer {_short(item)} is out of range (beyond 2**63 - 1)")


def _path(where: Any) -> str:
    parts: list[str] = []
    while where is not None:
        where, key = where
        # A hostile key must not break the one-line error it is named in.
        parts.append(f"[{key}]" if isinstance(key, int) else
                     f".{key}" if key.isprintable() else f".{key!r}")
    return "".join(reversed(parts)).lstrip(".")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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
