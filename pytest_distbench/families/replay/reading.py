"""Any trace a user points at: this tool's format (trace.py) or PARAM's basic one (param.py)."""

from __future__ import annotations

import os
from pathlib import Path

from . import param
from .trace import MANIFEST, Trace, TraceError, load


def is_any_trace(path: Path) -> bool:
    """Whether `path` holds a trace in either format."""
    return (path / MANIFEST).is_file() or param.looks_like_param(path)


def read(directory: str | os.PathLike[str]) -> Trace:
    """The trace under `directory`, checked (TraceError naming file and field)."""
    root = Path(directory)
    if not root.is_dir():
        raise TraceError(f"{root}: no such directory (a trace is a directory of JSON files)")
    if not (root / MANIFEST).exists() and param.looks_like_param(root):
        return param.load(root)
    return load(root)
