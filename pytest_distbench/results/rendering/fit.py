"""Output that fits a terminal of WIDTH columns: tables whose headers wrap onto more lines (as
nccl-tests prints its two header lines) and notes that wrap at word boundaries.

A table whose cells alone are wider than WIDTH is left as it is: its family decides what to
leave out or how to turn it (the RPC transports table turns when it has many sizes).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from typing import Any

WIDTH = 120
# The most characters of a file's own text (a command line, a GPU's name) one line quotes.
QUOTED = 200


def printable(value: Any, keep: str = "", most: int | None = None) -> str:
    """Text from a file that may be foreign or hostile (a name in a results file or a trace),
    safe on a terminal and in a table: each control character (an escape sequence's start,
    a line break that would split a row) shown as '?', but those of `keep`; with `most`, cut
    to that many characters (`...` ending a longer text). Every name a table, a report or a
    plot prints from a file goes through here."""
    text = str(value)
    if most is not None and len(text) > most:
        text = text[:max(most - 3, 0)] + "..."
    return "".join(c if c.isprintable() or c in keep else "?" for c in text)


def widest(text: str) -> int:
    """The longest line of `text`, in characters."""
    return max((len(line) for line in text.splitlines()), default=0)


# Spaces a line never breaks at: between a figure and its unit (`168 %`, `1,003 us`, `64 MiB`,
# `87.2 MB/s`), around a ± and after a ~ (`752 us ± 168 %` stays one piece).
_UNIT = r"(?:%|[KMGTP]?i?B(?:/s)?|[KMGT]?B/s|[mun]?s|msgs/s|x)"
_KEPT = re.compile(rf"(?<=\d) (?={_UNIT}(?![\w/]))|(?<=[±~]) (?=\S)|(?<=\S) (?=±)")
_GLUE = "\x00"  # stands for a kept space while textwrap splits the line


def wrap(line: str, width: int = WIDTH, indent: str = "  ") -> list[str]:
    """One line as lines of at most `width` (a word longer than that stays whole, a figure
    stays with its unit), the ones after the first indented by `indent`; a note (`# ...`)
    continues as a note."""
    if len(line) <= width:
        return [line]
    if line.startswith("# "):
        indent = "#  " + indent
    glued = _KEPT.sub(_GLUE, line)
    return [part.replace(_GLUE, " ") for part in textwrap.wrap(
        glued, width, subsequent_indent=indent, break_long_words=False,
        break_on_hyphens=False)] or [line]


def wrap_text(text: str, width: int = WIDTH) -> str:
    """Every note and prose line of `text` wrapped to `width`; a table row (a line that is not
    a note and holds a run of two spaces: tabulate's column gap) is never cut."""
    out = []
    for line in text.splitlines():
        if line.startswith("# ") or "  " not in line.strip():
            out.extend(wrap(line, width))
        else:
            out.append(line)
    return "\n".join(out)


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str], *,
          colalign: Sequence[str] | None = None, width: int = WIDTH) -> str:
    """A table in tabulate's "simple" layout (headers, a rule of dashes, rows; columns two
    spaces apart) without its padding of every header by two more, made to fit `width` where
    it can: column by column, the one that gives the most, its header wraps at word
    boundaries (as nccl-tests prints two header lines); then cells wrap too: a text column's
    (not aligned right) at word boundaries, a number column's only before a parenthesis
    (`1,583` over `(no CI: n too small)`); last, a test id (`name[params]`) after its `[`,
    `-`, `,` or `/`. A number never wraps and no word is cut: a table that cannot fit
    stays wider."""
    columns = [[str(row[i]) if i < len(row) else "" for row in rows] for i in range(len(headers))]
    heads = [str(h) for h in headers]
    for wrap_cells in (None, _WORD, _ID):
        while sum(map(_column_width, heads, columns)) + 2 * (len(heads) - 1) > width:
            best = None
            for i, (header, cells) in enumerate(zip(heads, columns, strict=True)):
                breaks = wrap_cells
                if wrap_cells is not None and colalign is not None and colalign[i] == "right":
                    breaks = _NOTE
                narrower = _narrowed(header, cells, breaks)
                if narrower is not None:
                    gain = _column_width(header, cells) - _column_width(*narrower)
                    if best is None or gain > best[0]:
                        best = (gain, i, narrower)
            if best is None:
                break
            _, i, (heads[i], columns[i]) = best
    return _render(heads, columns, colalign or ["left"] * len(heads))


def _render(heads: list[str], columns: list[list[str]], align: Sequence[str]) -> str:
    widths = list(map(_column_width, heads, columns))

    def lines(cells: list[str]) -> list[str]:
        parts = [cell.split("\n") for cell in cells]
        height = max((len(p) for p in parts), default=0)
        out = []
        for k in range(height):
            out.append("  ".join(
                (p[k] if k < len(p) else "").rjust(w) if a == "right"
                else (p[k] if k < len(p) else "").ljust(w)
                for p, w, a in zip(parts, widths, align, strict=True)).rstrip())
        return out

    text = lines(heads) + ["  ".join("-" * w for w in widths)]
    for row in zip(*columns, strict=True):
        text += lines(list(row))
    return "\n".join(text)


def _column_width(header: str, cells: Sequence[str]) -> int:
    return max([widest(header)] + [widest(c) for c in cells])


_WORD = re.compile(r" +")  # a text cell breaks at any space
_NOTE = re.compile(r" +(?=\()")  # a number cell only before its parenthesis
_ID = re.compile(r"(?<=[\[\-,/])(?=[^\s\]])")  # an id, after its separators, keeping them


def _narrowed(header: str, cells: Sequence[str], breaks: re.Pattern[str] | None
              ) -> tuple[str, list[str]] | None:
    """The column one step narrower (the widest width below its own that its words allow),
    or None where no word may move. `breaks`: where its cells may break (None: nowhere)."""
    now = _column_width(header, cells)
    for w in range(now - 1, 0, -1):
        head = _wrapped(header, w)
        new_cells = [_wrapped(c, w, breaks) if breaks is not None else c for c in cells]
        if head is None or any(c is None or widest(c) > w for c in new_cells):
            return None
        if _column_width(head, new_cells) < now:  # type: ignore[arg-type]
            return head, new_cells  # type: ignore[return-value]
    return None


def _wrapped(text: str, width: int, breaks: re.Pattern[str] = _WORD) -> str | None:
    """`text` in lines of at most `width`, broken only where `breaks` matches, or None where
    a piece between two breaks is longer than that."""
    if widest(text) <= width:
        return text
    if breaks is _ID:  # breaks that keep their separator join without a space
        if "[" not in text:  # only a test id's words (`name[params]`) are cut
            return None
        glue, pieces = "", [p for line in text.splitlines() for p in _pieces(line)]
    else:
        glue = " "
        pieces = [p for line in text.splitlines() for p in breaks.split(line.strip()) if p]
    if width < 1 or any(len(p) > width for p in pieces):
        return None
    lines = [pieces[0]]
    for piece in pieces[1:]:
        if len(lines[-1]) + len(glue) + len(piece) <= width:
            lines[-1] += glue + piece
        else:
            lines.append(piece)
    return "\n".join(line.rstrip() for line in lines)


def _pieces(line: str) -> list[str]:
    """A line's words, each word cut after its id separators (`test_x[`, `gloo-`, `ws2-`)."""
    words = line.strip().split(" ")
    out = []
    for k, word in enumerate(words):
        parts = [p for p in _ID.split(word) if p]
        if k < len(words) - 1:
            parts[-1] += " "
        out.extend(parts)
    return out
