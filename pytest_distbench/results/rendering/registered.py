"""What the families' registered plots make of a record: the spec that draws it, and the
figures a test's `-v` line ends with.

Apart from plot_spec.py, the specs' own vocabulary, so that registry.py can name `PlotSpec` in
`Family` while this module asks the registry for every family's specs (no import circle).
"""

from __future__ import annotations

from collections.abc import Sequence

from ... import registry
from ..document.session_intervals import SO_FAR
from ..peaks import pct_cell
from .ci import incomplete_text
from .plot_spec import DEFAULT_HEADLINE, PlotSpec, Record, measurement_name


def specs() -> tuple[PlotSpec, ...]:
    """Every family's plots (families/<f>/family.py), in the registry's order."""
    return registry.plot_specs()


def spec_for(record: Record) -> PlotSpec | None:
    """The spec that draws this record (the last registered that accepts it), if any."""
    found = None
    for spec in specs():
        if spec.accepts(record):
            found = spec
    return found


def headline(records: Sequence[Record]) -> str:
    """The figures a test's `-v` line ends with, e.g. 'p50 12.3 us, busbw 1.23 GB/s'."""
    parts = []
    for record in records:
        incomplete = incomplete_text(record)
        if incomplete:
            parts.append(incomplete)
            continue
        spec = spec_for(record)
        lines = spec.headline if spec is not None else DEFAULT_HEADLINE
        texts = [t for t in (h.text(record) for h in lines) if t]
        share = record.get("of_peak")
        if share:  # the bandwidth as a share of its named peak (the table's legend names it)
            texts.append(f"{share['bandwidth']} {pct_cell(record)} of peak")
        measured = measurement_name(record)
        if texts:
            # Several measurements of one test: each says whose figures these are.
            named = len(records) > 1 and measured
            parts.append((f"{measured}: " if named else "") + ", ".join(texts))
    if len(parts) > 3:
        parts = parts[:3] + [f"... {len(parts) - 3} more"]
    text = "; ".join(parts)
    if text and any((r.get("p50_ci") or {}).get("basis") == SO_FAR and not incomplete_text(r)
                    for r in records):
        # The line's figures are this run's: the tables print the point's value in the
        # session (the median of its runs) and its final ±, which can differ from them.
        text += " (this run, ± so far; the tables have the session's value and ±)"
    return text
