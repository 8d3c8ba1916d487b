"""The results document of a run, built from its records and environment.

A results file is also a valid pytest-benchmark JSON file, so `pytest-benchmark compare FILE`
can list our benchmarks; everything pytest-distbench itself relies on lives under the
``"distbench"`` keys (schema.py).
"""

from __future__ import annotations

import platform
import warnings
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from typing import Any

from .fields import is_int
from .normalize import json_safe
from .record import Record
from .schema import (
    SCHEMA_VERSION,
    RecordError,
    SchemaError,
    is_number,
    stored_record,
    validate_document,
)


class DroppedRecordWarning(UserWarning):
    """A record left out of a results document: it does not fit the schema (RecordError)."""


def make_document(
    records: Iterable[Record],
    environment: dict[str, Any],
    command_line: Sequence[str],
    *,
    commit_info: dict[str, Any] | None = None,
    left_out: Callable[[RecordError], None] | None = None,
) -> dict[str, Any]:
    """Build the results document for a run.

    ``commit_info`` defaults to what pytest-benchmark itself records (git commit, branch,
    dirty flag). A record that does not fit the schema, or repeats an id, is left out and
    given to ``left_out`` (by default a DroppedRecordWarning naming its test and field): one
    bad record must not cost the run every other result (check_record, where records are
    made, normally fails its test long before; a session fails for one, outputs.py).
    """
    created = datetime.now(timezone.utc).isoformat()
    kept: dict[str, dict[str, Any]] = {}
    for record in records:
        try:
            stored = stored_record(record)
            if stored["id"] in kept:
                raise RecordError(stored["id"], "id", "duplicate id (measured twice in one run)")
        except RecordError as exc:
            if left_out is not None:
                left_out(exc)
            else:
                warnings.warn(f"distbench: left out of the results: {exc}",
                              DroppedRecordWarning, stacklevel=2)
            continue
        kept[stored["id"]] = stored
    doc: dict[str, Any] = {
        "machine_info": _machine_info(environment),
        "commit_info": commit_info if commit_info is not None else _default_commit_info(),
        "benchmarks": [_benchmark_entry(record) for record in kept.values()],
        "datetime": created,
        "version": _pytest_benchmark_version(),
        "distbench": {
            "schema_version": SCHEMA_VERSION,
            "created": created,
            "environment": json_safe(dict(environment)),
            "command_line": [str(arg) for arg in command_line],
        },
    }
    try:
        validate_document(doc)
    except SchemaError as exc:  # every record passed: only a bug gets here
        raise ValueError(f"invalid results document: {exc.field}: {exc.message}") from None
    return doc


def _benchmark_entry(record: Record) -> dict[str, Any]:
    """One pytest-benchmark benchmark entry, carrying the full record under "distbench".

    What outside tools read from it: pytest-benchmark's compare groups by `params` (so they
    name the backend and world size), github-action-benchmark and Bencher chart `fullname`
    (so a record that is no measurement, invalid or incomplete, is named apart: its chart
    starts a series of its own instead of joining the figures')."""
    name = record.get("name")
    param = None
    if isinstance(name, str) and name.endswith("]") and "[" in name:
        param = name[name.index("[") + 1 : -1]
    marks = [mark for mark in ("invalid", "incomplete") if record.get(mark)]
    marked = f" ({', '.join(marks)})" if marks else ""
    params = {"backend": record.get("backend"), "world_size": record.get("world_size"),
              **(record.get("params") or {})}
    return {
        "group": f"{record.get('family')} {record.get('backend')} ws{record.get('world_size')}",
        "name": f"{name}{marked}",
        "fullname": f"{record.get('id')}{marked}",
        "params": params,
        "param": param,
        "extra_info": {
            key: record.get(key)
            for key in ("backend", "world_size", "device", "nbytes", "algbw_gbps", "busbw_gbps")
        },
        "options": {"warmup_iterations": record.get("warmup")},
        "stats": _pytest_benchmark_stats(record.get("samples"), record.get("batch_iterations")),
        "distbench": record,
    }


def _pytest_benchmark_stats(samples: Any, batch: Any = None) -> dict[str, Any]:
    if not isinstance(samples, list) or not samples or not all(is_number(s) for s in samples):
        return {}  # validation names the real problem (the record's samples)
    # pytest-benchmark's own Stats, so its compare command sees exactly the figures it would
    # have computed itself (its quartile method, its outlier counts). Imported lazily: reading
    # and comparing files never needs it.
    from pytest_benchmark.stats import Stats

    stats = Stats()
    for sample in samples:
        stats.update(sample)
    out = stats.as_dict()
    out["data"] = list(samples)
    # pytest-benchmark's round: `iterations` calls timed together, each sample their average.
    # A sample is one timed call, or with CUDA-event timing one batch of `batch_iterations`.
    out["iterations"] = batch if is_int(batch) and batch > 0 else 1
    return out


def _machine_info(environment: dict[str, Any]) -> dict[str, Any]:
    # The keys pytest-benchmark writes, so its machine_info comparison has something to chew on.
    return {
        "node": environment.get("hostname") or platform.node(),
        "processor": platform.processor(),
        "machine": platform.machine(),
        "python_compiler": platform.python_compiler(),
        "python_implementation": platform.python_implementation(),
        "python_implementation_version": platform.python_version(),
        "python_version": environment.get("python") or platform.python_version(),
        "python_build": list(platform.python_build()),
        "release": platform.release(),
        "system": platform.system(),
        "cpu": {
            "brand_raw": environment.get("cpu_model"),
            "count": environment.get("cpu_count"),
        },
    }


def _default_commit_info() -> dict[str, Any]:
    try:
        from pytest_benchmark.utils import get_commit_info

        info = get_commit_info()
    except Exception:  # noqa: BLE001 - provenance is nice to have, never worth a failed run
        info = None
    return json_safe(info) if isinstance(info, dict) else {"id": "unknown"}


def _pytest_benchmark_version() -> str:
    try:
        from pytest_benchmark import __version__
    except ImportError:
        return "unknown"
    return str(__version__)
