import math
import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pytest_distbench import units
from pytest_distbench.units import (
    format_duration_us,
    format_size,
    format_size_exact,
    parse_duration,
    parse_fraction,
    parse_positive_int_list,
    parse_size,
    parse_size_list,
    size_id,
)

KIB, MIB, GIB, TIB = 1 << 10, 1 << 20, 1 << 30, 1 << 40
# Hypothesis costs a few ms per example here; this budget keeps the file near 3 s.
FAST = settings(max_examples=50, deadline=None)

# Text that looks like the real thing often enough to reach the deep branches;
# cheaper to generate than st.from_regex.
size_like = st.one_of(
    st.text(max_size=12),
    st.tuples(
        st.sampled_from(["", " ", "-", "+"]),
        st.text("0123456789.", max_size=6),
        st.sampled_from(["", " "]),
        st.text("kKmMgGtTiIbBqe% ", max_size=4),
    ).map("".join),
)


# --- parse_size --------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4096", 4096),
        ("1", 1),
        ("4B", 4),
        ("4b", 4),
        ("1KiB", KIB),
        ("1kib", KIB),
        ("1 KiB", KIB),
        ("  64 MiB  ", 64 * MIB),
        ("2GiB", 2 * GIB),
        ("1TiB", TIB),
        ("1KB", 1000),
        ("1kb", 1000),
        ("3MB", 3_000_000),
        ("2GB", 2 * 10**9),
        ("1TB", 10**12),
        ("4K", 4096),
        ("4k", 4096),
        ("2M", 2 * MIB),
        ("1G", GIB),
        ("1.5KiB", 1536),
        ("1.5 KiB", 1536),
        (".5KiB", 512),
        ("0.001KB", 1),
        ("0.1GB", 100_000_000),
        ("4.", 4),
        ("+8", 8),
    ],
)
def test_parse_size_examples(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "12QB",
            "invalid size '12QB': unknown unit 'QB' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)",
        ),
        ("", "invalid size '': expected a number of bytes with an optional unit"),
        ("   ", "invalid size '   ': expected a number"),
        ("KiB", "invalid size 'KiB': expected a number"),
        (".", "invalid size '.': expected a number"),
        ("0.5B", "invalid size '0.5B': not a whole number of bytes"),
        ("1.0001KiB", "invalid size '1.0001KiB': not a whole number of bytes"),
        ("0", "invalid size '0': must be at least 1 byte"),
        ("0KiB", "invalid size '0KiB': must be at least 1 byte"),
        ("-4", "invalid size '-4': must be at least 1 byte"),
        ("-1KiB", "invalid size '-1KiB': must be at least 1 byte"),
        ("1e3", "invalid size '1e3': unknown unit 'e3'"),
        ("4 K i B", "invalid size '4 K i B': unknown unit 'K i B'"),
        ("1,5KiB", "invalid size '1,5KiB': unknown unit ',5KiB'"),
        ("4\u212a", "unknown unit '\u212a'"),  # Kelvin sign lower-cases to "k"
        ("1" * 41, "too many digits"),
    ],
)
def test_parse_size_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_size(text)


def test_parse_size_error_does_not_leak_python_int_limit() -> None:
    # int() refuses > 4300 digits with its own message; ours must quote the input.
    with pytest.raises(ValueError, match="invalid size"):
        parse_size("9" * 5000)


@FAST
@given(st.integers(min_value=0, max_value=1 << 62))
@example(18720)  # a DDP step's parameters: "18.3 KiB" is not a whole number of bytes
@example(3000)
@example(1067040)
@example((64 << 20) - 4)
def test_a_table_size_is_exactly_the_bytes_in_binary_units_or_the_bytes_themselves(n: int):
    text = format_size_exact(n)
    number, unit = text.split(" ")
    assert unit in ("B", "KiB", "MiB", "GiB", "TiB")
    assert text in (format_size(n), f"{n} B")  # the rounded size only where it is exact
    if n:
        assert parse_size(text) == n


@FAST
@given(st.integers(min_value=1, max_value=1 << 62))
@example(1536)
@example(1 << 50)
def test_size_id_round_trips(n: int) -> None:
    assert parse_size(size_id(n)) == n


@FAST
@given(size_like)
def test_parse_size_only_raises_value_error(text: str) -> None:
    try:
        result = parse_size(text)
    except ValueError as exc:
        assert repr(text) in str(exc)
    else:
        assert isinstance(result, int)
        assert result >= 1


@FAST
@given(
    st.integers(min_value=1, max_value=10**6),
    st.sampled_from(["B", "KiB", "MiB", "GiB", "TiB", "KB", "MB", "GB", "TB", "K", "M", "G"]),
    st.sampled_from(["", " ", "  "]),
    st.booleans(),
)
def test_parse_size_unit_scaling(n: int, unit: str, space: str, upper: bool) -> None:
    scale = {"B": 1, "K": KIB, "M": MIB, "G": GIB, "T": TIB}
    if unit.endswith("iB") or len(unit) == 1:
        factor = scale[unit[0]]
    else:
        factor = {"K": 1000, "M": 10**6, "G": 10**9, "T": 10**12}[unit[0]]
    spelled = unit.upper() if upper else unit
    assert parse_size(f"{n}{space}{spelled}") == n * factor


# --- parse_size_list ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4096", [4096]),
        ("4KiB,1MiB", [KIB * 4, MIB]),
        (" 4KiB , 1MiB ", [KIB * 4, MIB]),
        ("4B:64MiB:x4", [4 * 4**k for k in range(13)]),
        ("4B:64MiB:4", [4 * 4**k for k in range(13)]),
        ("4B:64MiB:X4", [4 * 4**k for k in range(13)]),
        ("1KiB:4KiB", [KIB, 2 * KIB, 4 * KIB]),
        ("1KiB:5KiB", [KIB, 2 * KIB, 4 * KIB]),  # never exceeds STOP
        ("1KiB:1KiB", [KIB]),
        ("3:100:x3", [3, 9, 27, 81]),
        ("1MiB,1KiB:4KiB,1024,2KiB", [MIB, KIB, 2 * KIB, 4 * KIB]),  # dedup, first-seen order
        ("8,8,8", [8]),
    ],
)
def test_parse_size_list_examples(text: str, expected: list[int]) -> None:
    assert parse_size_list(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "invalid size list '': expected comma-separated sizes"),
        ("4KiB,,8KiB", "invalid size list '4KiB,,8KiB': empty item"),
        ("4KiB,", "empty item"),
        ("64MiB:4B", "invalid size range '64MiB:4B': start is larger than stop"),
        ("4B:64MiB:x1", "invalid size range '4B:64MiB:x1': factor 'x1' must be an integer >= 2"),
        ("4B:64MiB:x0", "factor 'x0' must be an integer >= 2"),
        ("4B:64MiB:x1.5", "factor 'x1.5' must be an integer >= 2"),
        ("4B:64MiB:", "factor '' must be an integer >= 2"),
        ("1:2:3:4", "invalid size range '1:2:3:4': expected START:STOP or START:STOP:xF"),
        ("4B:12QB", "invalid size '12QB': unknown unit 'QB'"),
        ("0:64", "invalid size '0': must be at least 1 byte"),
        ("4KiB,abc", "invalid size 'abc'"),
    ],
)
def test_parse_size_list_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_size_list(text)


def test_parse_size_list_point_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    # With integer factors >= 2 and bounded digits the real limit is hard to reach;
    # shrink it to prove the guard fires.
    monkeypatch.setattr(units, "MAX_RANGE_POINTS", 10)
    assert len(parse_size_list("1:512")) == 10
    with pytest.raises(ValueError, match=re.escape("'1:1024': more than 10 points")):
        parse_size_list("1:1024")


@FAST
@given(
    st.integers(min_value=1, max_value=1 << 40),
    st.integers(min_value=1, max_value=1 << 40),
    st.integers(min_value=2, max_value=10),
)
def test_parse_size_list_range_is_geometric(start: int, stop: int, factor: int) -> None:
    start, stop = min(start, stop), max(start, stop)
    got = parse_size_list(f"{size_id(start)}:{size_id(stop)}:x{factor}")
    assert got[0] == start
    assert got[-1] <= stop < got[-1] * factor
    assert all(b == a * factor for a, b in zip(got, got[1:], strict=False))


@FAST
@given(st.lists(st.integers(min_value=1, max_value=1 << 40), min_size=1, max_size=20))
def test_parse_size_list_dedups_in_order(sizes: list[int]) -> None:
    got = parse_size_list(",".join(size_id(n) for n in sizes))
    assert got == list(dict.fromkeys(sizes))


@FAST
@given(st.one_of(st.text(max_size=20), st.text("0123456789KiBM:x, ", max_size=16)))
def test_parse_size_list_only_raises_value_error(text: str) -> None:
    try:
        result = parse_size_list(text)
    except ValueError:
        return
    assert result
    assert all(isinstance(n, int) and n >= 1 for n in result)
    assert len(set(result)) == len(result)


# --- parse_positive_int_list -------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("8", [8]), ("2,4,8", [2, 4, 8]), (" 2 , 4 ", [2, 4]), ("4,2,4", [4, 2]), ("007", [7])],
)
def test_parse_positive_int_list_examples(text: str, expected: list[int]) -> None:
    assert parse_positive_int_list(text, "world size") == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0", "invalid world size '0': must be a positive integer"),
        ("2,0", "invalid world size '0': must be a positive integer"),
        ("-2", "invalid world size '-2': must be a positive integer"),
        ("2.5", "invalid world size '2.5': must be a positive integer"),
        ("two", "invalid world size 'two': must be a positive integer"),
        ("\u0664", "invalid world size '\u0664': must be a positive integer"),  # Arabic-Indic 4
        ("", "invalid world size '': expected a positive integer or a comma-separated list"),
        ("2,,4", "invalid world size '2,,4': empty item"),
        ("9" * 5000, "must be a positive integer"),
    ],
)
def test_parse_positive_int_list_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_positive_int_list(text, "world size")


def test_parse_positive_int_list_uses_what() -> None:
    with pytest.raises(ValueError, match=re.escape("invalid repeat count 'x'")):
        parse_positive_int_list("x", "repeat count")


@FAST
@given(st.text(max_size=16))
def test_parse_positive_int_list_only_raises_value_error(text: str) -> None:
    try:
        result = parse_positive_int_list(text, "world size")
    except ValueError as exc:
        assert str(exc).startswith("invalid world size ")
    else:
        assert result and all(n >= 1 for n in result)


# --- parse_duration ----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.5", 0.5),
        ("0.5s", 0.5),
        ("0.5 s", 0.5),
        ("200ms", 0.2),
        ("50us", 5e-5),
        ("50\u00b5s", 5e-5),
        ("50\u03bcs", 5e-5),
        ("3ns", 3e-9),
        ("2m", 120.0),
        ("2min", 120.0),
        ("1h", 3600.0),
        ("1e-3", 1e-3),
        ("1.5E2ms", 0.15),
        ("10MS", 0.01),
    ],
)
def test_parse_duration_examples(text: str, expected: float) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0", "invalid duration '0': must be greater than zero"),
        ("0ms", "must be greater than zero"),
        ("-1s", "invalid duration '-1s': must be greater than zero"),
        ("1e-400", "must be greater than zero"),
        ("1e400", "invalid duration '1e400': must be finite"),
        ("1e307h", "must be finite"),
        ("", "invalid duration '': expected a number with an optional unit (use s, ms"),
        ("s", "expected a number"),
        ("inf", "expected a number"),
        ("nan", "expected a number"),
        ("5x", "invalid duration '5x': unknown unit 'x' (use s, ms, us, ns, m, h"),
        ("5 sec", "unknown unit 'sec'"),
    ],
)
def test_parse_duration_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_duration(text)


@FAST
@given(st.text(max_size=12))
def test_parse_duration_only_raises_value_error(text: str) -> None:
    try:
        result = parse_duration(text)
    except ValueError as exc:
        assert str(exc).startswith(f"invalid duration {text!r}")
    else:
        assert math.isfinite(result) and result > 0


# --- parse_fraction ----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10%", 0.10),
        ("0.1", 0.1),
        ("5 %", 0.05),
        (" 5% ", 0.05),
        ("150%", 1.5),
        ("0", 0.0),
        ("0%", 0.0),
        ("0.99", 0.99),
        ("1e-3", 1e-3),
    ],
)
def test_parse_fraction_examples(text: str, expected: float) -> None:
    assert parse_fraction(text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-5%", "invalid fraction '-5%': must be at least 0 and below 1000%"),
        ("-0.1", "must be at least 0 and below 1000%"),
        ("10", "invalid fraction '10': ambiguous; write 10% for a percentage"),
        ("2", "ambiguous"),
        ("1000%", "must be at least 0 and below 1000%"),
        ("1e400%", "must be at least 0 and below 1000%"),
        ("", "invalid fraction '': expected a fraction such as 0.1 or a percentage such as 10%"),
        ("%", "expected a fraction"),
        ("10%%", "expected a fraction"),
        ("ten", "expected a fraction"),
        ("nan", "expected a fraction"),
    ],
)
def test_parse_fraction_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_fraction(text)


@FAST
@given(st.floats(min_value=0.01, max_value=99.0))
def test_parse_fraction_percent_equals_fraction(percent: float) -> None:
    assert parse_fraction(f"{percent!r}%") == pytest.approx(parse_fraction(f"{percent / 100!r}"))


@FAST
@given(st.text(max_size=12))
def test_parse_fraction_only_raises_value_error(text: str) -> None:
    try:
        result = parse_fraction(text)
    except ValueError as exc:
        assert str(exc).startswith(f"invalid fraction {text!r}")
    else:
        assert 0 <= result < 10


# --- size_id / format_size ---------------------------------------------------


@pytest.mark.parametrize(
    ("nbytes", "expected"),
    [
        (1, "1B"),
        (4, "4B"),
        (1023, "1023B"),
        (1024, "1KiB"),
        (1536, "1536B"),
        (3 * KIB, "3KiB"),
        (64 * MIB, "64MiB"),
        (1536 * KIB, "1536KiB"),
        (3 * GIB, "3GiB"),
        (TIB, "1TiB"),
        (1024 * TIB, "1024TiB"),
    ],
)
def test_size_id_examples(nbytes: int, expected: str) -> None:
    assert size_id(nbytes) == expected


@pytest.mark.parametrize("nbytes", [0, -1])
def test_size_id_rejects_non_positive(nbytes: int) -> None:
    with pytest.raises(ValueError, match="must be at least 1 byte"):
        size_id(nbytes)


@FAST
@given(st.integers(min_value=1, max_value=1 << 62))
def test_size_id_is_compact(n: int) -> None:
    match = re.fullmatch(r"([0-9]+)(B|KiB|MiB|GiB|TiB)", size_id(n))
    assert match is not None
    number, unit = int(match.group(1)), match.group(2)
    # Largest unit: the number is not itself a multiple of 1024 unless TiB is exhausted.
    assert number % 1024 != 0 or unit == "TiB"


@pytest.mark.parametrize(
    ("nbytes", "expected"),
    [
        (0, "0 B"),
        (4, "4 B"),
        (1023, "1023 B"),
        (1024, "1 KiB"),
        (1536, "1.5 KiB"),
        (1100, "1.07 KiB"),
        (10 * KIB + 512, "10.5 KiB"),
        (10239, "10 KiB"),  # 9.999 rounds to 10
        (1000000, "977 KiB"),
        (1048575, "1 MiB"),  # would round to "1024 KiB"
        (MIB, "1 MiB"),
        (64 * MIB, "64 MiB"),
        (3 * GIB, "3 GiB"),
        (TIB, "1 TiB"),
        (1024 * TIB, "1024 TiB"),  # no unit above TiB
    ],
)
def test_format_size_examples(nbytes: int, expected: str) -> None:
    assert format_size(nbytes) == expected


def test_format_size_rejects_negative() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        format_size(-1)


@FAST
@given(st.integers(min_value=1, max_value=1023 * TIB))
def test_format_size_shape_and_accuracy(n: int) -> None:
    text = format_size(n)
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?) (B|KiB|MiB|GiB|TiB)", text)
    assert match is not None, text
    number = float(match.group(1))
    assert number < 1024
    assert not match.group(1).endswith("0") or "." not in match.group(1)
    digits = match.group(1).replace(".", "").lstrip("0")
    assert len(digits) <= 3 or number >= 100  # whole numbers from 100 up
    shown = number * 1024 ** ["B", "KiB", "MiB", "GiB", "TiB"].index(match.group(2))
    assert shown == pytest.approx(n, rel=0.006)


# --- format_duration_us ------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (12.34e-6, "12.3"),
        (1234e-6, "1234"),
        (0.512e-6, "0.512"),
        (4.25e-6, "4.25"),
        (123.4e-6, "123"),
        (99.96e-6, "100"),
        (9.996e-6, "10.0"),
        (0.9996e-6, "1.00"),
        (0.0, "0.000"),
        (2.5, "2500000"),
        (math.inf, "inf"),
        (math.nan, "nan"),
    ],
)
def test_format_duration_us_examples(seconds: float, expected: str) -> None:
    assert format_duration_us(seconds) == expected


@FAST
@given(st.floats(min_value=1e-9, max_value=1e3))
def test_format_duration_us_is_accurate(seconds: float) -> None:
    text = format_duration_us(seconds)
    assert "e" not in text
    us = seconds * 1e6
    # About three significant digits, never worse than half a thousandth of a microsecond.
    assert float(text) == pytest.approx(us, rel=5e-3, abs=5e-4)


@given(st.floats(min_value=1e-12, max_value=1e15, allow_nan=False),
       st.sampled_from([1, -1]))
def test_a_figure_keeps_four_significant_digits_and_no_more(value, sign):
    from pytest_distbench.units import format_figure

    text = format_figure(sign * value)
    back = float(text.replace(",", ""))
    assert back == pytest.approx(sign * value, rel=5.01e-4)  # within half a unit of the 4th digit
    digits = text.replace(",", "").replace("-", "").replace(".", "").lstrip("0")
    assert len(digits) <= max(4, len(str(int(abs(back)))))  # no decimals past the 4th digit


def test_figures_read_as_a_person_would_write_them():
    from pytest_distbench.units import format_figure

    assert format_figure(3351.829) == "3,352"
    assert format_figure(999.96) == "1,000"
    assert format_figure(0.0123456) == "0.01235"
    assert format_figure(0.0) == "0"
