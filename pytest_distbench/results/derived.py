"""Figures a family derives from a finished record (rates from the merged samples).

A rank knows only its own samples; a message rate or a one-way latency must come from the
samples the record keeps (slowest rank per iteration), so it is computed here, in the
controller, once the record is built.  A family registers one function per family name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

FigureDeriver = Callable[[dict[str, Any]], dict[str, Any]]
_DERIVERS: dict[str, FigureDeriver] = {}


def register_figures(families: Iterable[str], derive: FigureDeriver) -> None:
    """Add `derive(record)`'s figures to the records of these families."""
    for family in families:
        _DERIVERS[family] = derive


def completed_figures(record: dict[str, Any]) -> dict[str, Any]:
    """The record's figures plus what its family derives from it (derived keys win)."""
    derive = _DERIVERS.get(record["family"])
    figures = dict(record.get("figures") or {})
    if derive is not None:
        figures.update(derive(record))
    return figures
