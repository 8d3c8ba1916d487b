"""A trace's JSON read as hostile data: every file through one bounded reader, every field
through one typed getter (no torch, no pytest).

Every trace input (this tool's manifest and rank files, PARAM's rank lists) is someone else's
file: a FIFO, a link to /dev/zero or out of the directory, a world of 10**9 ranks, a list
where a string belongs, a 5,000-digit integer. Each is refused in one line naming the file
and the field (TraceError), never with a traceback, a hang or an allocation of the size it
claims; a refusal says what the field holds by type only ("got a string"), never echoing the
file's content. A new field joins by being read through `Fields` here.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from ...results.document.io import UnreadableFile, read_regular_file
from ...results.document.schema import json_type
from ...units import MAX_WORLD_SIZE, format_size

MAX_FILE_BYTES = 256 << 20  # a trace file larger than this is not a step's calls
# The JSON values and keys a trace file may hold: what its parse builds (Python spends 30 to
# 90 bytes on each, whatever the file spends), counted before parsing. About what a real file
# of MAX_FILE_BYTES holds (a profiler event or a rank file's call: 12 to 20 values in 100 to
# 250 bytes), far fewer than a file of that size of `{},` or `0,` (90 or 130 million).
MAX_VALUES = 1 << 24
_SEPARATORS = (b"[", b"{", b",", b":")
# Python keeps a string at its widest character's width: 1 byte a character up to U+00FF, 2
# up to U+FFFF, 4 past it. Lead bytes of UTF-8 characters past U+00FF and past U+FFFF, and
# the \u escapes that may make them (one past \u00ff counted as 2 bytes, a surrogate as 4).
_WIDE = re.compile(rb"[\xc4-\xef]|\\u(?!00)")
_WIDEST = re.compile(rb"[\xf0-\xf4]|\\u[dD][89abAB]")
MAX_GROUPS = 4096  # each is a new_group in every rank of the replay's world
MAX_GROUP_MEMBERS = 1 << 20  # the ranks of all groups together
MAX_DIMS = 16
MAX_BUFFER_BYTES = 1 << 50  # 1 PiB: no rank holds a larger tensor
MAX_INDEX = 2**31 - 1  # steps, call indices, PARAM requests
__all__ = ["MAX_FILE_BYTES", "MAX_VALUES", "MAX_WORLD_SIZE", "Fields", "TraceError", "read_json",
           "type_name"]


class TraceError(ValueError):
    """A trace that cannot be replayed: the message names the file and the field."""


def read_json(path: Path, within: Path) -> Any:
    """The JSON value of the trace file `path`, a regular file inside the directory `within`
    (a link leading out of it is refused unread) of at most MAX_FILE_BYTES, whose parse would
    build at most MAX_VALUES values and MAX_FILE_BYTES of text (checked before parsing:
    docs/replay-trace-format.md, "Memory")."""
    try:
        raw = read_regular_file(path, MAX_FILE_BYTES, "a trace file", within=within)
    except UnreadableFile as exc:
        hint = " (is the directory a trace?)" if str(exc) == "no such file" else ""
        raise TraceError(f"{path}: {exc}{hint}") from None
    _refuse_what_parsing_would_build(path, raw)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: not JSON (not UTF-8 text, byte {exc.start})") from None
    del raw  # parsed without its bytes beside it
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path}: not JSON ({exc.msg}, line {exc.lineno} column "
                         f"{exc.colno})") from None
    except RecursionError:
        raise TraceError(f"{path}: not JSON a trace holds (nested too deeply)") from None
    except ValueError as exc:  # an integer of more digits than Python converts, NaN
        raise TraceError(f"{path}: not JSON a trace holds ({str(exc).split(';')[0]})") from None


def _refuse_what_parsing_would_build(path: Path, raw: bytes) -> None:
    """TraceError where parsing `raw` could build more than MAX_VALUES values, or more than
    MAX_FILE_BYTES of text. Counted on the bytes, at C speed, before anything is built
    (values_at_most), a string as wide as its widest character."""
    values = values_at_most(raw)
    if values > MAX_VALUES:
        raise TraceError(f"{path}: more than {MAX_VALUES:,} JSON values (counted by its "
                         f"brackets, commas and colons: {values:,}); a trace file holds at "
                         "most that many (docs/replay-trace-format.md, \"Memory\")")
    width = 1
    if not raw.isascii() or b"\\u" in raw:
        width = 4 if _WIDEST.search(raw) else 2 if _WIDE.search(raw) else 1
    if len(raw) * width > MAX_FILE_BYTES:
        past = "U+FFFF" if width == 4 else "U+00FF"
        raise TraceError(f"{path}: larger than {format_size(MAX_FILE_BYTES // width)}, the most a "
                         f"trace file may be that holds characters past {past} (Python keeps "
                         f"such text in {width} bytes a character)")


def values_at_most(raw: bytes) -> int:
    """At least as many as the values and keys parsing the JSON text `raw` builds: each but
    the first follows a bracket, a comma or a colon (those inside strings count too)."""
    return 1 + sum(raw.count(c) for c in _SEPARATORS)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def type_name(value: Any) -> str:
    """What `value` is, without what it holds: the most a refusal says of a file's content
    (an integer told from other numbers: most of a trace's fields are integers)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return "an integer" if abs(value) < 2**63 else "an integer out of range"
    return json_type(value)


def index(value: Any, high: int = MAX_INDEX) -> bool:
    """A non-negative JSON integer (not a bool) of at most `high`."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= high


_MISSING = object()


class Fields:
    """One JSON object of a trace file, read field by field: each getter checks the field's
    type and bounds and raises TraceError naming `where` and the field."""

    def __init__(self, data: Any, where: str, prefix: str = "") -> None:
        """`prefix`: the object's own place in its parent ("inputs[0]."), named in errors."""
        if not isinstance(data, dict):
            at = f"field '{prefix.rstrip('.')}': " if prefix else ""
            raise TraceError(f"{where}: {at}expected an object, got {type_name(data)}")
        self.data, self.where, self.prefix = data, where, prefix

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def fail(self, key: str, why: str) -> TraceError:
        return TraceError(f"{self.where}: field '{self.prefix}{key}': {why}")

    # Each getter checks inline and builds its message only on failure: a rank file holds
    # millions of calls, each read through here.

    def _absent(self, key: str, what: str | Callable[[], str], default: Any) -> Any:
        if default is _MISSING:
            raise TraceError(f"{self.where}: field '{self.prefix}{key}' is missing "
                             f"(expected {what() if callable(what) else what})")
        return default

    def _bad(self, key: str, value: Any, what: str | Callable[[], str]) -> TraceError:
        return self.fail(key, f"expected {what() if callable(what) else what}, "
                              f"got {type_name(value)}")

    def value(self, key: str, ok: Callable[[Any], bool], what: str | Callable[[], str],
              default: Any = _MISSING) -> Any:
        """The field checked by `ok` (which sees only values of the right type), else
        `default` where the field is absent or null (no default: it is required)."""
        value = self.data.get(key)
        if value is None:
            return self._absent(key, what, default)
        if not ok(value):
            raise self._bad(key, value, what)
        return value

    def integer(self, key: str, low: int = 0, high: int = MAX_INDEX, what: str = "",
                default: Any = _MISSING) -> Any:
        value = self.data.get(key)
        if value is None:
            return self._absent(key, what or (lambda: f"an integer {low}..{high}"), default)
        if type(value) is not int or not low <= value <= high:
            raise self._bad(key, value, what or (lambda: f"an integer {low}..{high}"))
        return value

    def string(self, key: str, choices: Collection[str] | None = None, what: str = "",
               default: Any = _MISSING) -> Any:
        value = self.data.get(key)
        if value is None:
            return self._absent(key, what or (lambda: _choice(choices)), default)
        if type(value) is not str or (choices is not None and value not in choices):
            raise self._bad(key, value, what or (lambda: _choice(choices)))
        return value

    def seconds(self, key: str) -> float | None:
        value = self.data.get(key)
        if value is None:
            return None
        if type(value) not in (int, float) or not (math.isfinite(value) and abs(value) < 1e12):
            raise self._bad(key, value, "seconds or null")
        return value

    def strings(self, key: str, default: Any = _MISSING) -> list[str]:
        return self.value(key, lambda v: isinstance(v, list) and all(
            isinstance(s, str) for s in v), "a list of strings", default)

    def indices(self, key: str, high: int = MAX_INDEX, default: Any = _MISSING) -> list[int]:
        return self.value(key, lambda v: isinstance(v, list) and all(index(s, high) for s in v),
                          f"a list of integers 0..{high}", default)

    def shape(self, key: str, item_bytes: int) -> tuple[int, ...]:
        """A tensor's shape: at most MAX_DIMS sizes, its bytes at most MAX_BUFFER_BYTES."""
        value = self.data.get(key)
        what = f"a list of at most {MAX_DIMS} sizes, of at most 1 PiB in all"
        if value is None:
            return self._absent(key, what, _MISSING)
        if type(value) is not list or len(value) > MAX_DIMS:
            raise self._bad(key, value, what)
        total = item_bytes
        for d in value:
            if type(d) is not int or not 0 <= d <= MAX_BUFFER_BYTES:
                raise self._bad(key, value, what)
            total *= d
        if total > MAX_BUFFER_BYTES:
            raise self._bad(key, value, what)
        return tuple(value)


def _choice(choices: Collection[str] | None) -> str:
    return "one of " + ", ".join(choices) if choices else "a string"
