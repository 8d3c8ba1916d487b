"""Reading a printed "simple" table back, headers wrapped onto several lines or not."""

from __future__ import annotations

import re


def read_table(lines: list[str]) -> tuple[list[str], list[list[str]]]:
    """The headers (each header's lines joined by a space) and the rows of the table whose
    header starts `lines`: columns are where the dashes line's runs of dashes are; a line with
    an empty first cell continues the row above (a wrapped cell)."""
    rule = next(i for i, line in enumerate(lines) if re.fullmatch(r"-+( +-+)*", line.strip()))
    spans = [m.span() for m in re.finditer(r"-+", lines[rule])]

    def cut(line: str) -> list[str]:
        return [line[a:b].strip() for a, b in spans]

    headers = [" ".join(part for part in parts if part)
               for parts in zip(*(cut(line) for line in lines[:rule]), strict=True)]
    rows = []
    for line in lines[rule + 1:]:
        if not line.strip() or line.startswith("#"):
            break
        cells = cut(line)
        if rows and not cells[0]:
            rows[-1] = [" ".join(p for p in pair if p)
                        for pair in zip(rows[-1], cells, strict=True)]
        else:
            rows.append(cells)
    return headers, rows


def table_under(text: str, marker: str) -> tuple[list[str], list[list[str]]]:
    """read_table of the table that starts on the line after the line `marker`."""
    lines = text.splitlines()
    return read_table(lines[lines.index(marker) + 1:])


def unwrapped(text: str) -> str:
    """Printed text with the lines that fit.wrap continued joined back onto their line."""
    return re.sub(r"\n(?:#  )?  (?=\S)", " ", text)
