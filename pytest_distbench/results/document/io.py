"""Results files on disk: written atomically, read back strictly, named by baselines.

Any problem with a file is a ResultsFileError whose message names the file and the field.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
from pathlib import Path
from typing import Any

from .schema import SchemaError, is_number, validate_document

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
        if all(is_number(v) for v in value):
            return json.dumps(list(value), allow_nan=False, separators=(", ", ": "))
        items = [pad + _dumps(item, indent + 1) for item in value]
        return "[\n" + ",\n".join(items) + "\n" + "  " * indent + "]"
    return json.dumps(value, allow_nan=False)


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
        validate_document(doc)
    except SchemaError as exc:
        raise ResultsFileError(path, exc.message, exc.field or None) from None
    return doc


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
