"""Row names: which test, measurement and parameters a table row is, where the table's own
columns do not tell two rows apart (a user's ring all-reduce beside the built-in one, their
`impl=ring` beside `impl=builtin`). Every table style, the nccl-tests one and the families'
own, names its rows here."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from ..document.record import Record
from . import fit
from .plot_spec import measurement_name

RowKey = Callable[[Record], Hashable]


def row_labels(rows: Sequence[Record], key: RowKey) -> list[str] | None:
    """Each row's name where two rows share `key` (what the table's columns show of a row),
    else None: of its test, measurement name and parameters, what differs between the rows
    (all of it where nothing does), without a space, so a table fitted to the terminal never
    wraps a name away from its row: `impl=ring`, `ring_all_reduce`, `test_rings[impl=ring]`
    beside `test_all_reduce`."""
    keys = [key(r) for r in rows]
    if len(set(keys)) == len(keys):
        return None
    tests = [str(r["name"]).split("[", 1)[0].split("::", 1)[0] for r in rows]
    measured = [measurement_name(r) or "" for r in rows]
    params = [r.get("params") or {} for r in rows]
    varying = sorted({k for p in params for k in p if k != "nbytes"
                      and len({repr(q.get(k)) for q in params}) > 1})
    say_test, say_measured = len(set(tests)) > 1, len(set(measured)) > 1
    if say_measured:  # a parameter that names each row's measurement says it twice
        varying = [k for k in varying if any(_value(p.get(k)) != m
                                             for p, m in zip(params, measured, strict=True))]
    if not (say_test or say_measured or varying):  # nothing tells them apart: all there is
        say_test = say_measured = True
    labels = []
    for test, measure, p in zip(tests, measured, params, strict=True):
        base = "::".join(part for part, said in ((test, say_test), (measure, say_measured))
                         if said and part)
        values = ",".join(f"{k}={_value(p.get(k))}" for k in varying)
        labels.append(f"{base}[{values}]" if base and values else base or values)
    return labels


def _value(value: Any) -> str:
    text = "-".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    return text.replace(" ", "_")


def name_column(records: Sequence[Record], rows: list[list[Any]], headers: list[str],
                key: RowKey, align: Sequence[str]) -> tuple[list[list[Any]], list[str],
                                                             tuple[str, ...]]:
    """`rows` (one per record, in the same order) with a first column naming each, where
    `key` leaves two alike; the headers and column alignment to go with them."""
    labels = row_labels(records, key)
    if labels is None:
        return rows, headers, tuple(align)
    return ([[label, *row] for label, row in zip(labels, rows, strict=True)],
            ["name", *headers], ("left", *align))


def fitted_table(records: Sequence[Record], rows: list[list[Any]], headers: list[str],
                 key: RowKey, align: Sequence[str] | None = None) -> str:
    """A family's table of `rows` (one per record; numbers right-aligned unless `align` says
    otherwise), named where `key` leaves two rows alike, fitted to the terminal."""
    rows, headers, colalign = name_column(records, rows, headers, key,
                                          align or ("right",) * len(headers))
    return fit.table(rows, headers, colalign=colalign)
