"""Parsing and formatting of user-facing sizes, durations and thresholds.

Every parser raises ``ValueError`` for bad string input; the message quotes the
offending text and says what is accepted, without naming the option (the
caller adds that).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from fractions import Fraction

__all__ = [
    "format_figure",
    "MAX_RANGE_POINTS",
    "format_duration_us",
    "format_size",
    "format_size_exact",
    "size_cell",
    "parse_duration",
    "parse_fraction",
    "parse_positive_int_list",
    "parse_size",
    "parse_size_list",
    "size_id",
]

#: Most points one ``START:STOP:xF`` range may expand to.
MAX_RANGE_POINTS = 4096
# The most ranks a world may have, whoever says how many (a launcher's WORLD_SIZE, a trace's
# world_size): far beyond any job we know of, and small enough that every count derived from
# it fits what the store, the sockets and memory take (a world size of 10**30 overflowed in
# listen(); a trace's built range(world) before reading a file).
MAX_WORLD_SIZE = 65536

_KIB = 1024
_SIZE_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "kib": _KIB,
    "mib": _KIB**2,
    "gib": _KIB**3,
    "tib": _KIB**4,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    # Shorthands people type for buffer sizes are almost always meant as binary.
    "k": _KIB,
    "m": _KIB**2,
    "g": _KIB**3,
}
_SIZE_UNITS_HELP = "use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB"
# Largest first, so size_id picks the biggest unit that divides exactly.
_BINARY_UNITS = (("TiB", _KIB**4), ("GiB", _KIB**3), ("MiB", _KIB**2), ("KiB", _KIB), ("B", 1))
_FORMAT_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")

# Seconds per unit as (multiplier, divisor): dividing by 1e6 keeps "50us" == 5e-05 exactly,
# where multiplying by 1e-6 would not.
_DURATION_UNITS: dict[str, tuple[float, float]] = {
    "": (1.0, 1.0),
    "s": (1.0, 1.0),
    "ms": (1.0, 1e3),
    "us": (1.0, 1e6),
    "\u00b5s": (1.0, 1e6),  # micro sign
    "\u03bcs": (1.0, 1e6),  # Greek mu
    "ns": (1.0, 1e9),
    "m": (60.0, 1.0),
    "min": (60.0, 1.0),
    "h": (3600.0, 1.0),
}
_DURATION_UNITS_HELP = "use s, ms, us, ns, m, h; a bare number is seconds"

# [0-9] rather than \d: \d also matches non-ASCII digits, which we do not want to accept.
_SIZE_RE = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?\s*(.*)", re.DOTALL)
_FLOAT_RE = re.compile(
    r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)\s*(.*)", re.DOTALL
)
_INT_RE = re.compile(r"[0-9]+")
_FACTOR_RE = re.compile(r"[xX]?\s*([0-9]+)")
# Bounds the digits we feed to int(): CPython refuses very long strings with its own
# message, and no real size needs this many digits.
_MAX_DIGITS = 40


def parse_size(text: str) -> int:
    """Parse a positive byte count such as ``4096``, ``4KiB``, ``1.5 MB`` or ``4K``.

    A sum of sizes, ``1MiB+1B``, is the exact total (1048577): the way to say "one byte past
    a power of two", as message-rate tools take a size in megabytes plus bytes.
    """
    terms = text.strip().split("+")
    if len(terms) > 2 or (len(terms) == 2 and terms[0].strip()):
        # A leading "+" is a sign ("+5"); any other "+" separates terms of a sum.
        if not terms[0].strip():
            terms = terms[1:]
        total = 0
        for term in terms:
            if not term.strip():
                raise ValueError(f"invalid size {text!r}: empty term in a sum such as 1MiB+1B")
            try:
                total += _parse_one_size(term)
            except ValueError as exc:
                raise ValueError(f"invalid size {text!r}: in term {term.strip()!r}: "
                                 f"{str(exc).split(': ', 1)[-1]}") from None
        return total
    return _parse_one_size(text)


def _parse_one_size(text: str) -> int:
    m = _SIZE_RE.fullmatch(text.strip())
    sign, whole, frac, unit = m.groups(default="") if m else ("", "", "", "")
    if not (whole or frac):
        raise ValueError(
            f"invalid size {text!r}: expected a number of bytes with an optional unit, "
            f"e.g. 4096, 64KiB, 1.5MB"
        )
    # isascii: str.lower() maps e.g. the Kelvin sign to "k", which should not mean KiB.
    multiplier = _SIZE_UNITS.get(unit.lower()) if unit.isascii() else None
    if multiplier is None:
        raise ValueError(f"invalid size {text!r}: unknown unit {unit!r} ({_SIZE_UNITS_HELP})")
    if len(whole) + len(frac) > _MAX_DIGITS:
        raise ValueError(f"invalid size {text!r}: too many digits")
    # Exact integer arithmetic: float would turn e.g. 0.1 GB into a non-integer.
    scaled = int(whole + frac) * multiplier
    scale = 10 ** len(frac)
    if scaled % scale:
        raise ValueError(f"invalid size {text!r}: not a whole number of bytes")
    nbytes = scaled // scale
    if sign == "-" or nbytes == 0:
        raise ValueError(f"invalid size {text!r}: must be at least 1 byte")
    return nbytes


def _parse_range(item: str) -> list[int]:
    parts = item.split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"invalid size range {item!r}: expected START:STOP or START:STOP:xF")
    start, stop = parse_size(parts[0]), parse_size(parts[1])
    factor = 2
    if len(parts) == 3:
        fm = _FACTOR_RE.fullmatch(parts[2].strip())
        if fm is None or len(fm.group(1)) > _MAX_DIGITS or int(fm.group(1)) < 2:
            raise ValueError(
                f"invalid size range {item!r}: factor {parts[2].strip()!r} must be an "
                f"integer >= 2, e.g. x4"
            )
        factor = int(fm.group(1))
    if start > stop:
        raise ValueError(f"invalid size range {item!r}: start is larger than stop")
    points: list[int] = []
    value = start
    while value <= stop:
        if len(points) >= MAX_RANGE_POINTS:
            raise ValueError(f"invalid size range {item!r}: more than {MAX_RANGE_POINTS} points")
        points.append(value)
        value *= factor
    return points


def split_list(text: str, what: str, expected: str) -> list[str]:
    """The stripped items of a comma-separated list; an empty list or item is an error."""
    if not text.strip():
        raise ValueError(f"invalid {what} {text!r}: expected {expected}")
    items = [raw.strip() for raw in text.split(",")]
    if not all(items):
        raise ValueError(f"invalid {what} {text!r}: empty item")
    return items


def parse_size_list(text: str) -> list[int]:
    """Parse comma-separated sizes and ``START:STOP[:xF]`` geometric ranges.

    A range starts at START, multiplies by F (default 2) and stops at the last
    value <= STOP. The result keeps first-seen order with duplicates removed.
    """
    sizes: list[int] = []
    for item in split_list(text, "size list", "comma-separated sizes or START:STOP[:xF] "
                           "ranges, e.g. 4KiB,1MiB or 4B:64MiB:x4"):
        sizes.extend(_parse_range(item) if ":" in item else [parse_size(item)])
    return list(dict.fromkeys(sizes))


def parse_positive_int_list(text: str, what: str) -> list[int]:
    """Parse ``"8"`` or ``"2,4,8"`` into integers >= 1, first-seen order, no duplicates.

    ``what`` names the value in error messages, e.g. ``"world size"``.
    """
    values: list[int] = []
    for item in split_list(text, what, "a positive integer or a comma-separated list of them, "
                           "e.g. 2,4,8"):
        if _INT_RE.fullmatch(item) is None or len(item) > _MAX_DIGITS or int(item) < 1:
            raise ValueError(f"invalid {what} {item!r}: must be a positive integer")
        values.append(int(item))
    return list(dict.fromkeys(values))


def parse_duration(text: str) -> float:
    """Parse a positive duration in seconds: ``0.5``, ``0.5s``, ``200ms``, ``50us``, ``2m``."""
    m = _FLOAT_RE.fullmatch(text.strip())
    if m is None:
        raise ValueError(
            f"invalid duration {text!r}: expected a number with an optional unit "
            f"({_DURATION_UNITS_HELP})"
        )
    unit = m.group(2).strip()
    scale = _DURATION_UNITS.get(unit.lower())
    if scale is None:
        raise ValueError(
            f"invalid duration {text!r}: unknown unit {unit!r} ({_DURATION_UNITS_HELP})"
        )
    seconds = float(m.group(1)) * scale[0] / scale[1]
    if not math.isfinite(seconds):
        raise ValueError(f"invalid duration {text!r}: must be finite")
    if seconds <= 0:
        raise ValueError(f"invalid duration {text!r}: must be greater than zero")
    return seconds


def parse_fraction(text: str) -> float:
    """Parse a relative threshold: ``10%``, ``5 %`` and ``0.1`` give 0.1, 0.05, 0.1.

    A bare number of 1 or more is refused rather than guessed at: ``10`` is far more likely a
    forgotten ``%`` than a 1000 % threshold. The result is in [0, 10).
    """
    m = _FLOAT_RE.fullmatch(text.strip())
    suffix = m.group(2).strip() if m else None
    if m is None or suffix not in ("", "%"):
        raise ValueError(
            f"invalid fraction {text!r}: expected a fraction such as 0.1 or a percentage "
            f"such as 10%"
        )
    value = float(m.group(1))
    if suffix == "" and value >= 1:
        raise ValueError(
            f"invalid fraction {text!r}: ambiguous; write {m.group(1)}% for a percentage, "
            "or a fraction below 1 such as 0.1"
        )
    if suffix == "%":
        value /= 100
    if not 0 <= value < 10:
        raise ValueError(f"invalid fraction {text!r}: must be at least 0 and below 1000%")
    return value


def size_id(nbytes: int) -> str:
    """Exact compact id for test ids, in the largest binary unit that divides exactly.

    ``4 -> "4B"``, ``1024 -> "1KiB"``, ``1536 -> "1536B"``, ``3 << 30 -> "3GiB"``.
    ``parse_size(size_id(n)) == n`` for every ``n >= 1``.
    """
    if nbytes < 1:
        raise ValueError(f"invalid size {nbytes!r}: must be at least 1 byte")
    for name, unit in _BINARY_UNITS:
        if nbytes % unit == 0:
            return f"{nbytes // unit}{name}"
    raise AssertionError("unreachable: every integer is a multiple of 1")


def format_size(nbytes: int) -> str:
    """Human-readable size in binary units, number and unit separated by one space.

    Bytes are printed exactly (``"4 B"``, ``"1023 B"``). Larger units are picked so
    the number is below 1024, then rounded: two decimals below 10, one below 100,
    a whole number from 100 up; trailing zeros are dropped. ``1536 -> "1.5 KiB"``,
    ``1048576 -> "1 MiB"``, ``1000000 -> "977 KiB"``. TiB is the largest unit.
    """
    if nbytes < 0:
        raise ValueError(f"invalid size {nbytes!r}: must not be negative")
    if nbytes < _KIB:
        return f"{nbytes} B"
    for power in range(1, len(_FORMAT_UNITS)):
        value = nbytes / _KIB**power
        if value >= 100:
            text = f"{value:.0f}"
        elif value >= 10:
            text = f"{value:.1f}"
        else:
            text = f"{value:.2f}"
        # Rounding can reach 1024 (e.g. 1048575 B); the next unit reads better then.
        if float(text) < _KIB or power == len(_FORMAT_UNITS) - 1:
            if "." in text:
                text = text.rstrip("0").rstrip(".")
            return f"{text} {_FORMAT_UNITS[power]}"
    raise AssertionError("unreachable: the last unit always returns")


def format_size_exact(nbytes: int) -> str:
    """format_size where its text is exactly `nbytes` (``"64 MiB"``, ``"1.5 KiB"``), else the
    bytes themselves (``"18720 B"``, not a round-looking ``"18.3 KiB"``): a table's size
    column names what was measured, and a rounded size may hide a size rounded to fit the
    ranks (64 MiB - 4 B)."""
    text = format_size(nbytes)
    number, unit = text.split(" ")
    exact = Fraction(number) * _KIB ** _FORMAT_UNITS.index(unit) == nbytes
    return text if exact else f"{nbytes} B"


def format_duration_us(seconds: float) -> str:
    """Microseconds for tables, without the unit: about three significant digits.

    Three decimals below 1 us, two below 10, one below 100, whole microseconds from
    100 up: ``"0.512"``, ``"4.25"``, ``"12.3"``, ``"1234"``. Non-finite values print as
    ``"nan"``/``"inf"``.
    """
    us = seconds * 1e6
    if not math.isfinite(us):
        return str(us)
    # Thresholds are on the rounded value so 99.96 prints as "100", not "100.0".
    magnitude = abs(us)
    if magnitude >= 99.95:
        digits = 0
    elif magnitude >= 9.995:
        digits = 1
    elif magnitude >= 0.9995:
        digits = 2
    else:
        digits = 3
    return f"{us:.{digits}f}"


def format_figure(value: float, digits: int = 4) -> str:
    """A measured figure with the precision a measurement has: `digits` significant digits,
    thousands separators, no trailing decimals past them (3351.829 -> "3,352", 0.0123456 ->
    "0.01235")."""
    if not math.isfinite(value):
        return str(value)
    rounded = float(f"{value:.{digits}g}")  # first, so 999.96 becomes 1000 and shows as such
    if rounded == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(rounded))))
    return f"{rounded:,.{decimals}f}"


def figure_cell(value: float | None) -> str:
    """A table cell of a measured figure: format_figure, or "-" where there is none."""
    return "-" if value is None else format_figure(value)


def size_cell(nbytes: int | None) -> str:
    """A size as every table, note, comparison and the digest print it: format_size_exact, or
    "-" where there is none."""
    return "-" if nbytes is None else format_size_exact(nbytes)


def parse_count(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """A parser of integers >= minimum (and <= maximum, if given), for settings that are
    counts."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError(f"invalid count {text!r}: expected an integer") from None
        if value < minimum:
            raise ValueError(f"invalid count {text!r}: must be >= {minimum}")
        if maximum is not None and value > maximum:
            raise ValueError(f"invalid count {text!r}: must be <= {maximum}")
        return value

    return parse


# Durations reach select(), poll(), Event.wait() and sleep(), whose C types overflow long before
# a finite 1e300 s does (poll's timeout is milliseconds in a C int: 24.8 days). A week is past
# any benchmark's need and leaves room for the sums the harness makes of them.
MAX_DURATION_S = 7 * 24 * 3600.0


def parse_bounded_duration(text: str) -> float:
    """A duration (parse_duration) of at most MAX_DURATION_S, for duration settings."""
    seconds = parse_duration(text)
    if seconds > MAX_DURATION_S:
        raise ValueError(f"invalid duration {text!r}: at most 7 days ({MAX_DURATION_S:g} s)")
    return seconds
