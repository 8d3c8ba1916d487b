"""The digest that ends a session's output: one line per family, its headline figures at its
largest world size and message size (the full tables stay above it), each line fitted to a
terminal."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ... import units
from .fit import wrap
from .plot_spec import headline
from .table import grouped


def family_lines(records: Iterable[dict[str, Any]]) -> list[str]:
    """`all_reduce       ws8  64 MiB  p50 ... (of 12 rows)` for every family, in table order:
    the rows at the family's largest world size and then its largest size."""
    by_family: dict[str, list[dict[str, Any]]] = {}
    for (family, *_), rows in grouped(records):  # valid records only, in table order
        by_family.setdefault(family, []).extend(rows)
    width = max((len(f) for f in by_family), default=0)
    lines = []
    for family, rows in by_family.items():
        world = max(r["world_size"] for r in rows)
        at_world = [r for r in rows if r["world_size"] == world]
        sizes = [r["nbytes"] for r in at_world if r["nbytes"] is not None]
        largest = max(sizes) if sizes else None
        point = [r for r in at_world if r["nbytes"] == largest]
        size = "-" if largest is None else units.format_size(largest)
        # Records of one point may share their figures (agent/observer's two metrics): once.
        parts = list(dict.fromkeys(text for text in (headline([r]) for r in point) if text))
        figures = "; ".join(parts[:2] + ([f"... {len(parts) - 2} more"] if len(parts) > 2 else [])
                            ) or "no headline figure"
        more = f" ({len(point)} rows here, {len(rows)} in all)" if len(point) > 1 else ""
        lines.extend(wrap(f"{family:<{width}}  ws{world:<3} {size:>8}  {figures}{more}",
                          indent=" " * (width + 2)))
    return lines
