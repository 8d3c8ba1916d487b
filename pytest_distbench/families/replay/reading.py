"""Any trace a user points at: this tool's format (trace.py) or PARAM's basic one (param.py)."""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path

from . import param
from .trace import MANIFEST, Trace, TraceError, load


def is_any_trace(path: Path) -> bool:
    """Whether `path` holds a trace in either format."""
    return (path / MANIFEST).is_file() or param.looks_like_param(path)


def read(directory: str | os.PathLike[str], keep: Collection[int] | None = None,
         check: bool = True) -> Trace:
    """The trace under `directory`, checked (TraceError naming file and field); `keep` and
    `check` as trace.load's (a PARAM trace is read and checked whole: its groups are named
    by the order they appear in over every rank's file)."""
    root = Path(directory)
    if not root.is_dir():
        raise TraceError(f"{root}: no such directory (a trace is a directory of JSON files)")
    if not (root / MANIFEST).exists() and param.looks_like_param(root):
        return param.load(root, keep)
    return load(root, keep, check)
