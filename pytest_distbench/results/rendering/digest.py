"""The digest that ends a session's output: one line per family, its headline figures at its
largest world size and at the message size people read it at (a latency's smallest, a
bandwidth's largest; the full tables stay above it), each line fitted to a terminal."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from ... import registry, units
from ..document import session_intervals
from ..document.record import Record
from . import names, table
from .fit import wrap
from .registered import headline


def family_lines(records: Iterable[Record]) -> list[str]:
    """`all_reduce  ws8    64 MiB  p50 ...` for every family, in table order: the rows at the
    family's largest world size and then its smallest size for a latency (registry.latencies),
    its largest for any other."""
    by_family: dict[str, list[dict[str, Any]]] = {}
    for (family, *_), rows in table.grouped(records):  # valid records only, in table order
        by_family.setdefault(family, []).extend(rows)
    width = max((len(f) for f in by_family), default=0)
    entries = []
    for family, rows in by_family.items():
        world = max(r["world_size"] for r in rows)
        at_world = [r for r in rows if r["world_size"] == world]
        sizes = [r["nbytes"] for r in at_world if r["nbytes"] is not None]
        pick = min if registry.is_latency(family) else max
        chosen = pick(sizes) if sizes else None
        point = [r for r in at_world if r["nbytes"] == chosen]
        size = units.size_cell(chosen)
        if table.headline(family) is None:  # its table has no headline column (store_routes)
            figures = "no headline figure: see its table"
        else:
            figures = _figures(point)
        caveat = registry.digest_caveat(family, point)
        if caveat:  # what the table's notes say of these rows travels with their figures
            figures += f" [{caveat}]"
        entries.append((family, world, size, figures))
    sized = max((len(size) for _, _, size, _ in entries), default=0)
    lines = []
    for family, world, size, figures in entries:
        lines.extend(wrap(f"{family:<{width}}  ws{world:<3} {size:>{sized}}  {figures}",
                          indent=" " * (width + 2)))
    return lines


def _figures(point: list[dict[str, Any]]) -> str:
    """The point's figures, each row's named by what tells it from the others (its test,
    parameters or measurement name, as a table names it); rows with the same figures
    (agent/observer's two metrics) once; two rows at most, then how many more: of more than
    two, the fastest and the slowest (by the figure the line prints: a rate's highest first,
    a time's lowest: a message-rate iteration of 10 credits takes longer than one of 1, yet
    moves more messages a second), so the line spans what the table holds
    instead of showing whichever came first."""
    texts = [" ".join(headline([r]).split()) for r in point]
    if len(set(texts)) == 1:  # one figure for every row
        return texts[0] or "no headline figure"
    labels = names.row_labels(point, key=lambda r: None) or [""] * len(point)
    shown = [(r, f"{label}: {text}") for r, label, text in zip(point, labels, texts,
                                                               strict=True) if text]
    if len(shown) <= 2:
        return "; ".join(text for _, text in shown) or "no headline figure"
    ordered = sorted(shown, key=lambda rt: _slowness(rt[0]))
    return (f"fastest {ordered[0][1]}; slowest {ordered[-1][1]}; "
            f"... {len(shown) - 2} more")


def _slowness(record: Record) -> float:
    """What orders rows from fastest to slowest: the headline figure, a rate negated."""
    value = session_intervals.headline(record)
    if value is None:
        return math.inf
    return -value if session_intervals.is_rate(record) else value
