"""The results file: build it, write it atomically, read it back and validate it.

A results file is also a valid pytest-benchmark JSON file, so `pytest-benchmark compare FILE`
can list our benchmarks; everything pytest-distbench itself relies on lives under the
``"distbench"`` keys and is validated field by field on the way in. The schema is documented in
docs/results-schema.md; bump SCHEMA_VERSION only for changes an older reader would misread.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import secrets
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1

SUMMARY_KEYS = ("n", "min", "p50", "p75", "p90", "p95", "p99", "max", "mean", "stddev", "iqr")

# Ints beyond this are certainly corrupt, and bounding them keeps later float arithmetic
# (sizes, ratios) from raising OverflowError on absurd values.
_MAX_INT = 2**63 - 1
# Far deeper than anything we write, far shallower than what makes json/recursion blow up.
_MAX_DEPTH = 64
# Parametrize values nest inside benchmarks[i].distbench.params, well within _MAX_DEPTH.
_MAX_PARAM_DEPTH = 32
_BASELINE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")


class ResultsFileError(Exception):
    """A results file that cannot be written or used; str() names the file and the field."""

    def __init__(self, path: str | os.PathLike[str], message: str, field: str | None = None):
        self.path = os.fspath(path)
        self.field = field
        self.message = message
        where = f"{self.path}: {field}" if field else self.path
        super().__init__(f"{where}: {message}")


class ResultsFileExistsError(ResultsFileError):
    """Raised by write_document when the target exists and overwrite was not allowed.

    A separate class so the plugin can catch it and name its own command-line flag.
    """


class _Invalid(Exception):
    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field
        self.message = message


# ---------------------------------------------------------------------------------------------
# Building


def make_document(
    records: Iterable[dict[str, Any]],
    environment: dict[str, Any],
    command_line: Sequence[str],
    *,
    commit_info: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Build the results document for a run.

    ``commit_info`` defaults to what pytest-benchmark itself records (git commit, branch,
    dirty flag). Raises ValueError naming the field when a record does not fit the schema, so a
    bad record is caught before it becomes a file nobody can read back.
    """
    created = datetime.now(timezone.utc).isoformat()
    normalized = [_normalize_record(record) for record in records]
    doc: dict[str, Any] = {
        "machine_info": _machine_info(environment),
        "commit_info": commit_info if commit_info is not None else _default_commit_info(),
        "benchmarks": [_benchmark_entry(record) for record in normalized],
        "datetime": created,
        "version": _pytest_benchmark_version(),
        "distbench": {
            "schema_version": SCHEMA_VERSION,
            "created": created,
            "environment": _json_safe(dict(environment)),
            "command_line": [str(arg) for arg in command_line],
        },
    }
    try:
        _validate_document(doc)
    except _Invalid as exc:
        raise ValueError(f"invalid results document: {exc.field}: {exc.message}") from None
    return doc


def _normalize_record(record: dict[str, Any]) -> dict[str, Any]:
    out = dict(record)
    for key in _NULLABLE_RECORD_FIELDS:
        out.setdefault(key, None)
    out["params"] = _json_safe(dict(out.get("params") or {}))
    out["figures"] = _json_safe(dict(out.get("figures") or {}))
    # Samples often arrive as numpy arrays or numpy scalars; the file holds plain floats.
    if "samples" in out:
        out["samples"] = _floats(out["samples"])
    out["rank_samples"] = [_floats(rank) for rank in (out.get("rank_samples") or [])]
    if isinstance(out.get("summary"), dict):
        out["summary"] = {key: _plain_number(value) for key, value in out["summary"].items()}
    for key in ("busbw_factor", "algbw_gbps", "busbw_gbps", "skew", "threshold"):
        out[key] = _plain_number(out[key])
    for key in ("world_size", "nbytes", "count", "wrong", "stalls", "warmup", "iterations"):
        if key in out:
            out[key] = _plain_number(out[key])
    # Duration runs, live reports, pressure and memory (docs/duration-and-pressure.md).
    out["duration_s"] = _plain_number(out["duration_s"])
    if isinstance(out["peak_rss_bytes"], (list, tuple)):
        out["peak_rss_bytes"] = [_plain_number(v) for v in out["peak_rss_bytes"]]
    if isinstance(out["pressure"], dict):
        out["pressure"] = _json_safe(out["pressure"])
    if out.get("live_reports") is not None:
        out["live_reports"] = _json_safe(out["live_reports"])
    return out


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


def _json_safe(value: Any, depth: int = 0) -> Any:
    """Parametrize values can be anything; keep what JSON holds faithfully, repr the rest."""
    if depth > _MAX_PARAM_DEPTH:
        return repr(value)
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if abs(value) <= _MAX_INT else repr(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (list, tuple)):
        return [_json_safe(v, depth + 1) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _json_safe(v, depth + 1) for k, v in value.items()}
    return repr(value)


def _benchmark_entry(record: dict[str, Any]) -> dict[str, Any]:
    """One pytest-benchmark benchmark entry, carrying the full record under "distbench"."""
    name = record.get("name")
    param = None
    if isinstance(name, str) and name.endswith("]") and "[" in name:
        param = name[name.index("[") + 1 : -1]
    return {
        "group": f"{record.get('family')} {record.get('backend')} ws{record.get('world_size')}",
        "name": name,
        "fullname": record.get("id"),
        "params": record.get("params"),
        "param": param,
        "extra_info": {
            key: record.get(key)
            for key in ("backend", "world_size", "device", "nbytes", "algbw_gbps", "busbw_gbps")
        },
        "options": {"warmup_iterations": record.get("warmup")},
        "stats": _pytest_benchmark_stats(record.get("samples")),
        "distbench": record,
    }


def _pytest_benchmark_stats(samples: Any) -> dict[str, Any]:
    if not isinstance(samples, list) or not samples or not all(_is_number(s) for s in samples):
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
    # Each sample is one timed call of the operation, hence one iteration per round.
    out["iterations"] = 1
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
    return _json_safe(info) if isinstance(info, dict) else {"id": "unknown"}


def _pytest_benchmark_version() -> str:
    try:
        from pytest_benchmark import __version__
    except ImportError:
        return "unknown"
    return str(__version__)


# ---------------------------------------------------------------------------------------------
# Writing


def write_document(doc: dict[str, Any], path: str | os.PathLike[str], *, overwrite: bool) -> None:
    """Write ``doc`` to ``path`` atomically: readers see the old file or the new one, never half.

    Refuses to replace an existing file unless ``overwrite`` is true
    (ResultsFileExistsError, a ResultsFileError).
    """
    target = Path(path)
    if not overwrite and target.exists():
        raise _exists_error(path)
    try:
        data = _dumps(doc).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:
        raise ResultsFileError(path, f"cannot serialize the results: {exc}") from None

    directory = target.parent
    tmp: Path | None = None
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp, fd = _create_temp(directory, target.name)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if overwrite:
            os.replace(tmp, target)
        else:
            _publish_no_clobber(tmp, target, path)
        tmp = None
        _fsync_directory(directory)
    except OSError as exc:
        raise ResultsFileError(path, f"cannot write: {exc.strerror or exc}") from None
    finally:
        if tmp is not None:
            try:
                tmp.unlink()
            except OSError:
                pass


def _exists_error(path: str | os.PathLike[str]) -> ResultsFileExistsError:
    return ResultsFileExistsError(
        path, "already exists; refusing to overwrite it (ask for overwriting to replace it)"
    )


def _create_temp(directory: Path, name: str) -> tuple[Path, int]:
    # os.open with mode 0o666 lets the umask decide permissions, like any ordinary file;
    # tempfile.mkstemp would leave a 0600 baseline that teammates cannot read.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        tmp = directory / f".{name}.{secrets.token_hex(6)}.tmp"
        try:
            return tmp, os.open(tmp, flags, 0o666)
        except FileExistsError:
            continue


def _publish_no_clobber(tmp: Path, target: Path, path: str | os.PathLike[str]) -> None:
    # link() fails if the target exists, closing the race between our exists() check and a
    # concurrent writer; fall back to check-then-replace where hard links are unsupported.
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise _exists_error(path) from None
    except OSError:
        if target.exists():
            raise _exists_error(path) from None
        os.replace(tmp, target)
        return
    tmp.unlink()


def _fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable on POSIX; not possible (nor needed) everywhere.
    if not hasattr(os, "O_DIRECTORY"):
        return
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _dumps(value: Any, indent: int = 0) -> str:
    """Indented JSON, except that lists of numbers stay on one line.

    Baselines are committed; one sample list per line keeps files small and diffs readable.
    """
    pad = "  " * (indent + 1)
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = []
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"keys must be strings, not {type(key).__name__}")
            items.append(f"{pad}{json.dumps(key)}: {_dumps(item, indent + 1)}")
        return "{\n" + ",\n".join(items) + "\n" + "  " * indent + "}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        if all(_is_number(v) for v in value):
            return json.dumps(list(value), allow_nan=False, separators=(", ", ": "))
        items = [pad + _dumps(item, indent + 1) for item in value]
        return "[\n" + ",\n".join(items) + "\n" + "  " * indent + "]"
    return json.dumps(value, allow_nan=False)


# ---------------------------------------------------------------------------------------------
# Reading


def read_document(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate a results file; any problem is a ResultsFileError naming file and field."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise ResultsFileError(path, "no such file") from None
    except IsADirectoryError:
        raise ResultsFileError(path, "is a directory, not a results file") from None
    except OSError as exc:
        raise ResultsFileError(path, f"cannot read: {exc.strerror or exc}") from None

    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ResultsFileError(
            path, f"not a pytest-distbench results file (not UTF-8 text, byte {exc.start})"
        ) from None

    try:
        doc = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise ResultsFileError(
            path, f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except _NonFinite as exc:
        raise ResultsFileError(path, f"not valid JSON for a results file: {exc}") from None
    except RecursionError:
        raise ResultsFileError(
            path, "not a pytest-distbench results file (nested too deeply)"
        ) from None
    except ValueError as exc:  # e.g. integers with more digits than Python agrees to parse
        raise ResultsFileError(path, f"not valid JSON for a results file: {exc}") from None

    try:
        _validate_document(doc)
    except _Invalid as exc:
        raise ResultsFileError(path, exc.message, exc.field or None) from None
    return doc


def records(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The benchmark records of a (validated) document, keyed by id, in file order."""
    return {bench["distbench"]["id"]: bench["distbench"] for bench in doc["benchmarks"]}


class _NonFinite(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _NonFinite(f"{name} is not a number JSON allows")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NonFinite(f"number {text[:40]} is out of range")
    return value


def resolve_baseline(name_or_path: str, baseline_dir: Path) -> Path:
    """``NAME`` means ``baseline_dir/NAME.json``; anything with a separator or .json is a path.

    Raises ValueError for a NAME outside letters, digits, '.', '_' and '-'.
    """
    separators = [os.sep] + ([os.altsep] if os.altsep else []) + ["/"]
    if name_or_path.endswith(".json") or any(sep in name_or_path for sep in separators):
        return Path(name_or_path)
    if not _BASELINE_NAME.fullmatch(name_or_path):
        raise ValueError(
            f"invalid baseline name {name_or_path!r}: use letters, digits, '.', '_' and '-' "
            "(not starting with '.' or '-'), or give a path to a .json file"
        )
    return Path(baseline_dir) / f"{name_or_path}.json"


# ---------------------------------------------------------------------------------------------
# Validation: everything the verdict and report code reads is checked here, so a document that
# passes can be compared and rendered without further defensive code.

_NOT_OURS = "not a pytest-distbench results file"

_NULLABLE_RECORD_FIELDS = (
    "nbytes", "count", "dtype", "busbw_factor", "warmup", "iterations",
    "algbw_gbps", "busbw_gbps", "wrong", "skew", "stalls", "threshold",
    "duration_s", "peak_rss_bytes", "pressure",
)  # fmt: skip


def _validate_document(doc: Any) -> None:
    if not isinstance(doc, dict):
        raise _Invalid("", f"{_NOT_OURS} (top level is {_json_type(doc)}, expected an object)")
    meta = doc.get("distbench")
    if meta is None:
        if "benchmarks" in doc and "machine_info" in doc:
            raise _Invalid(
                "", f'{_NOT_OURS} (a plain pytest-benchmark file: no "distbench" section)'
            )
        raise _Invalid("", f'{_NOT_OURS} (no "distbench" section)')
    if not isinstance(meta, dict):
        raise _Invalid("distbench", f"expected an object, got {_json_type(meta)}")

    version = meta.get("schema_version")
    if not _is_int(version) or version < 1:
        raise _Invalid(
            "distbench.schema_version", f"expected an integer >= 1, got {_short(version)}"
        )
    if version > SCHEMA_VERSION:
        raise _Invalid(
            "distbench.schema_version",
            f"schema version {version} is newer than this pytest-distbench reads "
            f"(up to {SCHEMA_VERSION}); upgrade pytest-distbench",
        )
    _check_depth(doc)
    _expect(meta, "environment", dict, "distbench", "an object")
    _expect(meta, "created", str, "distbench", "a string")
    command_line = _expect(meta, "command_line", list, "distbench", "a list of strings")
    if not all(isinstance(arg, str) for arg in command_line):
        raise _Invalid("distbench.command_line", "expected a list of strings")

    benchmarks = _expect(doc, "benchmarks", list, "", "a list")
    seen: dict[str, int] = {}
    for index, bench in enumerate(benchmarks):
        where = f"benchmarks[{index}]"
        if not isinstance(bench, dict):
            raise _Invalid(where, f"expected an object, got {_json_type(bench)}")
        record = _expect(bench, "distbench", dict, where, "an object")
        _validate_record(record, f"{where}.distbench")
        if record["id"] in seen:
            raise _Invalid(
                f"{where}.distbench.id",
                f"duplicate id {_short(record['id'])} (also benchmarks[{seen[record['id']]}])",
            )
        seen[record["id"]] = index


def _validate_record(record: dict[str, Any], where: str) -> None:
    for key in ("id", "name", "family", "backend", "device"):
        value = _expect(record, key, str, where, "a string")
        if not value:
            raise _Invalid(f"{where}.{key}", "expected a non-empty string")
    _int_field(record, "world_size", where, minimum=1, nullable=False)
    for key in ("params", "figures"):
        if key in record and not isinstance(record[key], dict):
            raise _Invalid(f"{where}.{key}", f"expected an object, got {_json_type(record[key])}")
    for key in ("nbytes", "count", "warmup", "iterations", "wrong", "stalls"):
        _int_field(record, key, where, minimum=0, nullable=True)
    if record.get("dtype") is not None and not isinstance(record["dtype"], str):
        raise _Invalid(f"{where}.dtype", "expected a string or null")
    for key in ("busbw_factor", "algbw_gbps", "busbw_gbps", "skew", "threshold"):
        value = record.get(key)
        if value is not None and not (_is_number(value) and value >= 0):
            raise _Invalid(
                f"{where}.{key}", f"expected a non-negative number or null, got {_short(value)}"
            )

    samples = record.get("samples")
    if not _is_time_list(samples) or not samples:
        raise _Invalid(
            f"{where}.samples", "expected a non-empty list of numbers (seconds, finite, >= 0)"
        )

    rank_samples = record.get("rank_samples", [])
    if not isinstance(rank_samples, list):
        raise _Invalid(f"{where}.rank_samples", "expected a list with one list of samples per rank")
    if len(rank_samples) > record["world_size"]:
        raise _Invalid(
            f"{where}.rank_samples",
            f"{len(rank_samples)} ranks of samples for world_size {record['world_size']}",
        )
    for rank, values in enumerate(rank_samples):
        if not _is_time_list(values):
            raise _Invalid(
                f"{where}.rank_samples[{rank}]",
                "expected a list of numbers (seconds, finite, >= 0)",
            )
        if len(values) != len(samples):
            raise _Invalid(
                f"{where}.rank_samples[{rank}]",
                f"has {len(values)} samples, samples has {len(samples)} (ragged rank_samples)",
            )

    _validate_run_extras(record, where)

    summary = _expect(record, "summary", dict, where, "an object")
    for key in SUMMARY_KEYS:
        if key not in summary:
            raise _Invalid(f"{where}.summary", f"missing {key!r}")
        if not (_is_number(summary[key]) and summary[key] >= 0):
            raise _Invalid(
                f"{where}.summary.{key}",
                f"expected a non-negative finite number, got {_short(summary[key])}",
            )
    if summary["n"] != len(samples):
        raise _Invalid(
            f"{where}.summary.n",
            f"{_short(summary['n'])} does not match the {len(samples)} samples",
        )


def _validate_run_extras(record: dict[str, Any], where: str) -> None:
    """duration_s, peak_rss_bytes, pressure, live_reports (all optional)."""
    duration = record.get("duration_s")
    if duration is not None and not (_is_number(duration) and duration > 0):
        raise _Invalid(f"{where}.duration_s",
                       f"expected a positive number of seconds or null, got {_short(duration)}")
    peaks = record.get("peak_rss_bytes")
    if peaks is not None:
        if not isinstance(peaks, list) or len(peaks) != record["world_size"]:
            raise _Invalid(f"{where}.peak_rss_bytes",
                           f"expected a list of {record['world_size']} byte counts (one per "
                           f"rank) or null, got {_short(peaks)}")
        for rank, value in enumerate(peaks):
            if not (_is_int(value) and 0 <= value <= _MAX_INT):
                raise _Invalid(f"{where}.peak_rss_bytes[{rank}]",
                               f"expected an integer >= 0, got {_short(value)}")
    pressure = record.get("pressure")
    if pressure is not None and not isinstance(pressure, dict):
        raise _Invalid(f"{where}.pressure", f"expected an object or null, got "
                       f"{_json_type(pressure)}")
    reports = record.get("live_reports")
    if reports is None:
        return
    if not isinstance(reports, list):
        raise _Invalid(f"{where}.live_reports", f"expected a list, got {_json_type(reports)}")
    for i, report in enumerate(reports):
        ok = isinstance(report, dict) and all(
            _is_number(report.get(key)) and report[key] >= 0 for key in ("time_s", "iterations"))
        if not ok:
            raise _Invalid(f"{where}.live_reports[{i}]",
                           "expected an object with time_s and iterations (numbers >= 0)")


def _expect(obj: dict[str, Any], key: str, kind: type, where: str, what: str) -> Any:
    field = f"{where}.{key}" if where else key
    if key not in obj:
        raise _Invalid(field, f"missing (expected {what})")
    value = obj[key]
    if not isinstance(value, kind):
        raise _Invalid(field, f"expected {what}, got {_json_type(value)}")
    return value


def _int_field(record: dict[str, Any], key: str, where: str, *, minimum: int, nullable: bool):
    value = record.get(key)
    if value is None and nullable:
        return
    if not _is_int(value) or not minimum <= value <= _MAX_INT:
        null = " or null" if nullable else ""
        raise _Invalid(
            f"{where}.{key}", f"expected an integer >= {minimum}{null}, got {_short(value)}"
        )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, int):
        return abs(value) <= _MAX_INT
    return math.isfinite(value)


def _is_time_list(values: Any) -> bool:
    return isinstance(values, list) and all(_is_number(v) and v >= 0 for v in values)


def _check_depth(doc: Any) -> None:
    # Iterative, so a hostile file cannot turn the check itself into a RecursionError.
    stack = [(doc, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > _MAX_DEPTH:
            raise _Invalid("", f"{_NOT_OURS} (nested more than {_MAX_DEPTH} levels deep)")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value if isinstance(v, (dict, list)))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _json_type(value: Any) -> str:
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
