"""What a results document must be: every field the verdict, report and plot code reads.

A document that passes validate_document can be compared, gated, appended to and rendered
without further defensive code; each problem is one SchemaError naming the field. A record is
checked the same way when it is made (check_record), so a bad one fails its own test instead of
the end of the session. The schema is documented in docs/results-schema.md; bump SCHEMA_VERSION
only for changes an older reader would misread.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from .fields import (
    MAX_INT,
    NULLABLE,
    RECORD_FIELDS,
    SUMMARY_KEYS,
    SchemaError,
    at,
    is_int,
    is_number,
    is_time_list,
    json_type,
    short,
)
from .normalize import normalize_record
from .record import REQUIRED_KEYS, Record

SCHEMA_VERSION = 3

HISTORY_KEY = "history"

# Far deeper than anything we write, far shallower than what makes json/recursion blow up.
MAX_DEPTH = 64


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
        check_values(normal)
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
    if not is_int(version) or version < 1:
        raise SchemaError(
            "distbench.schema_version", f"expected an integer >= 1, got {short(version)}"
        )
    if version > SCHEMA_VERSION:
        raise SchemaError(
            "distbench.schema_version",
            f"schema version {version} is newer than this pytest-distbench reads "
            f"(up to {SCHEMA_VERSION}); upgrade pytest-distbench",
        )
    check_values(doc)
    _validate_meta(meta)
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
                f"duplicate id {short(record['id'])} (also benchmarks[{seen[record['id']]}])",
            )
        seen[record["id"]] = index


def _validate_meta(meta: dict[str, Any]) -> None:
    """The document's `distbench` section past its schema version."""
    environment = _expect(meta, "environment", dict, "distbench", "an object")
    _validate_environment(environment, "distbench.environment")
    _expect(meta, "created", str, "distbench", "a string")
    command_line = _expect(meta, "command_line", list, "distbench", "a list of strings")
    if not all(isinstance(arg, str) for arg in command_line):
        raise SchemaError("distbench.command_line", "expected a list of strings")
    if HISTORY_KEY in meta:
        _validate_history(meta[HISTORY_KEY], f"distbench.{HISTORY_KEY}")


def validate_record(record: Record, where: str) -> None:
    """One benchmark record; `where` is its path in the document ("" for a record alone).
    Each field is checked as fields.RECORD_FIELDS declares it; null only where the Record
    type allows it."""
    for key, field in RECORD_FIELDS.items():
        path = at(where, key)
        if key not in record:
            if key in REQUIRED_KEYS:
                raise SchemaError(path, f"missing (expected {field.expected})")
            continue
        value = record[key]
        if value is None and key in NULLABLE:
            continue
        if value is None or not field.accepts(value, record):
            null = " or null" if key in NULLABLE else ""
            got = json_type(value) if isinstance(value, (dict, list)) or value is None else short(
                value)
            raise SchemaError(path, f"expected {field.expected}{null}, got {got}")
        if field.parts is not None:
            field.parts(value, record, path)


def _validate_environment(environment: dict[str, Any], where: str) -> None:
    """Only what is read as more than text: plot captions and markdown list the GPUs, the
    comparisons take the machine-speed probe's median."""
    gpus = environment.get("gpus")
    if gpus is not None and not isinstance(gpus, list):
        raise SchemaError(at(where, "gpus"), f"expected a list or null, got {json_type(gpus)}")
    # The history keeps the torch version of each run: a baseline must hold one it can keep.
    _optional_string(environment, "torch", where)
    _probe_field(environment, where)


def _validate_history(history: Any, where: str) -> None:
    """A baseline's earlier runs (document/history.py), read by the gate, compare and append."""
    if not isinstance(history, list):
        raise SchemaError(where, f"expected a list of earlier runs, got {json_type(history)}")
    for i, run in enumerate(history):
        run_at = f"{where}[{i}]"
        if not isinstance(run, dict):
            raise SchemaError(run_at, f"expected an object (one earlier run), got {json_type(run)}")
        p50s = _expect(run, "p50_s", dict, run_at, "an object of benchmark id -> seconds")
        for bid, value in p50s.items():
            if not (is_number(value) and value >= 0):
                raise SchemaError(at(run_at, "p50_s"), f"{short(bid)}: expected seconds >= 0, "
                                  f"got {short(value)}")
        for key in ("created", "torch", "commit"):
            _optional_string(run, key, run_at)
        _probe_field(run, run_at)
        _optional(run, "dirty", bool, run_at, "true, false or null")
        # Its environment fingerprint (environment.FINGERPRINT_FIELDS): compared, field by
        # field, with the next run's; what an older run lacks is not compared.
        _optional(run, "environment", dict, run_at, "an object (the environment fingerprint)")


def _optional_string(obj: dict[str, Any], key: str, where: str) -> None:
    if obj.get(key) is not None and not isinstance(obj[key], str):
        raise SchemaError(at(where, key), f"expected a string or null, got "
                          f"{json_type(obj[key])}")


def _optional(obj: dict[str, Any], key: str, kind: type, where: str, what: str) -> None:
    if obj.get(key) is not None and not isinstance(obj[key], kind):
        raise SchemaError(at(where, key), f"expected {what}, got {json_type(obj[key])}")


def _probe_field(obj: dict[str, Any], where: str) -> None:
    probes = obj.get("cpu_probe_s")
    if probes is not None and not is_time_list(probes):
        raise SchemaError(at(where, "cpu_probe_s"),
                          "expected a list of seconds (numbers, finite, >= 0) or null")


def _expect(obj: dict[str, Any], key: str, kind: type, where: str, what: str) -> Any:
    field = at(where, key)
    if key not in obj:
        raise SchemaError(field, f"missing (expected {what})")
    value = obj[key]
    if not isinstance(value, kind):
        raise SchemaError(field, f"expected {what}, got {json_type(value)}")
    return value


def check_values(doc: dict[str, Any], what: str = _NOT_OURS) -> None:
    """Nesting depth and the size of every integer, anywhere: a huge integer in any field
    would make later float arithmetic (medians, ratios, captions) raise OverflowError. Any
    parsed JSON a reader turns into a document goes through here first (`what` is what a
    document nested too deeply is not).

    Iterative, so a hostile file cannot turn the check itself into a RecursionError, and
    depth first, one iterator per level open, so what it holds is bounded by the depth, not
    by the values (a stack of every container met held 1.8 GiB for a file of 11 million
    objects); a path is spelled out only for the value found wrong."""
    stack: list[tuple[Any, Any]] = [(_entries(doc, None), None)]
    while stack:
        entries, where = stack[-1]
        for key, item in entries:
            if isinstance(item, (dict, list)):
                inner = (where, key)
                if len(stack) > MAX_DEPTH:  # the child is at depth len(stack)
                    raise SchemaError("", f"{what} (nested more than {MAX_DEPTH} levels deep)")
                stack.append((_entries(item, inner), inner))
                break
            if is_int(item) and abs(item) > MAX_INT:
                raise SchemaError(_path((where, key)),
                                  f"integer {short(item)} is out of range (beyond 2**63 - 1)")
        else:
            stack.pop()


def _entries(value: dict[str, Any] | list[Any], where: Any) -> Iterator[tuple[Any, Any]]:
    """(key, item) of an object, (index, item) of a list; an object's keys must be strings."""
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            raise SchemaError(_path(where), "keys must be strings (JSON object keys)")
        return iter(value.items())
    return enumerate(value)


def _path(where: Any) -> str:
    parts: list[str] = []
    while where is not None:
        where, key = where
        # A hostile key must not break the one-line error it is named in.
        parts.append(f"[{key}]" if isinstance(key, int) else
                     f".{key}" if key.isprintable() else f".{key!r}")
    return "".join(reversed(parts)).lstrip(".")


__all__ = ["SUMMARY_KEYS", "SchemaError", "is_number", "json_type"]  # read from here elsewhere
