"""The session's tables (and comparison) as GitHub-flavoured markdown, for CI job summaries.

`--distbench-markdown="$GITHUB_STEP_SUMMARY"` appends this to the file, so several steps (or
sessions) can write to one summary. Families with a table style of their own are shown as their
terminal table in a code block: readable everywhere, no parser needed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from ... import registry
from ..document.io import append_output
from ..document.record import Record
from . import table
from .fit import printable
from .noise import noise_lines


def render(records: Iterable[Record], environment: dict[str, Any] | None = None,
           comparison: Any = None, *, memory: bool = False, ab: str | None = None) -> str:
    """`ab`: A/B mode's table as markdown (ab_report.render_ab), under its own heading."""
    records = list(records)
    lines = ["## pytest-distbench results", ""]
    if environment:
        lines += [f"_{_environment_line(environment, records)}_", ""]
    lines += [f"_{table.legend(records)}_", ""]
    lines += [f"_{line.strip()}_" for line in noise_lines(records)]
    lines += [""] * bool(noise_lines(records))
    for (family, backend, world_size, device, placement), rows in table.grouped(records):
        note = table.placement_note(placement)
        said = table.headline(family)
        timing = table.timing_note(rows)
        lines += [f"### {_cell(family)} · backend {_cell(backend)} · {world_size} ranks · "
                  f"{_cell(device)}" + (f" · {note}" if note else "")
                  + (f" · {timing}" if timing else "")
                  + (f" · {_cell(said)}" if said else ""), ""]
        if registry.table_style(family) is None:
            lines += _table_and_notes(table.family_text(family, rows, "github", memory=memory))
        else:
            lines += ["```text", table.family_text(family, rows, details=True), "```"]
        lines.append("")
    if ab:
        lines += ["## pytest-distbench A/B comparison", "", ab.rstrip("\n"), ""]
    if comparison is not None:
        from .report import render as render_comparison

        lines += ["## pytest-distbench comparison", "",
                  render_comparison(comparison, "markdown").rstrip("\n"), ""]
    return "\n".join(lines) + "\n"


def _table_and_notes(text: str) -> list[str]:
    # The terminal table's "# ..." footer lines would be headings in markdown: make them notes.
    out, notes = [], []
    for line in text.splitlines():
        (notes if line.startswith("# ") else out).append(line)
    if notes:
        out.append("")
        out += [f"> {line[2:]}  " for line in notes]
    return out


def _environment_line(environment: dict[str, Any], records: list[Record]) -> str:
    worlds = sorted({r["world_size"] for r in records})
    parts = [f"torch {environment.get('torch', '?')}",
             f"CPU {environment.get('cpu_model') or '?'} ({environment.get('cpu_count')} "
             "logical CPUs)",
             f"world sizes {', '.join(map(str, worlds))}"]
    if environment.get("gpus"):
        parts.append(f"GPUs {', '.join(map(str, environment['gpus']))}")
    if environment.get("hostname"):
        parts.append(f"host {environment['hostname']}")
    return _cell(" · ".join(parts))


def _cell(value: Any) -> str:
    text = printable(value)
    return text.replace("|", "\\|").replace("_", "\\_").replace("*", "\\*")


def append(path: str | os.PathLike[str], text: str) -> None:
    """Append to `path` (GITHUB_STEP_SUMMARY is shared by every step of a job); a device or
    a FIFO is written through, never replaced."""
    try:
        earlier = os.stat(path).st_size  # 0 for a device or a FIFO
    except FileNotFoundError:
        earlier = 0
    if earlier and not text.startswith("\n"):
        text = "\n" + text
    append_output(path, text.encode("utf-8"))
