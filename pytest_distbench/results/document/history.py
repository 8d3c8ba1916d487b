"""A stored baseline with a history: the last runs' p50s (judged by statistics/runs.py).

A baseline file is a results file (its benchmarks are the latest run's, as always) with an
optional ``distbench.history``: the earlier runs, oldest first, each reduced to its p50 per
benchmark id (docs/results-schema.md). ``--distbench-append`` moves the file's latest run into
the history, puts the new run in its place, and keeps the last KEEP runs in all.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .io import ResultsFileError, read_document, write_document
from .schema import records

KEEP = 10
HISTORY_KEY = "history"


def run_summary(document: dict[str, Any]) -> dict[str, Any]:
    """A run as the history keeps it: when, the machine speed, and each benchmark's p50."""
    env = document["distbench"]["environment"]
    return {
        "created": document["distbench"].get("created"),
        "torch": env.get("torch"),
        "cpu_probe_s": env.get("cpu_probe_s"),
        "p50_s": {bid: rec["summary"]["p50"] for bid, rec in records(document).items()},
    }


def history_of(document: dict[str, Any], path: str | Path = "") -> list[dict[str, Any]]:
    """The earlier runs stored in a baseline (oldest first); ResultsFileError if malformed."""
    history = document["distbench"].get(HISTORY_KEY, [])
    if not isinstance(history, list):
        raise ResultsFileError(path, "expected a list", f"distbench.{HISTORY_KEY}")
    for i, run in enumerate(history):
        where = f"distbench.{HISTORY_KEY}[{i}].p50_s"
        p50s = run.get("p50_s") if isinstance(run, dict) else None
        if not isinstance(p50s, dict):
            raise ResultsFileError(path, "expected an object of id -> seconds", where)
        for bid, value in p50s.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                math.isfinite(value) and value >= 0
            ):
                raise ResultsFileError(path, f"{bid!r}: expected seconds >= 0", where)
    return history


def p50_runs(document: dict[str, Any], path: str | Path = "") -> list[dict[str, float]]:
    """Every stored run's p50 per id, oldest first, the file's own (latest) run last."""
    return [run["p50_s"] for run in history_of(document, path)] + [
        run_summary(document)["p50_s"]
    ]


def with_history(new: dict[str, Any], old: dict[str, Any] | None,
                 keep: int = KEEP) -> dict[str, Any]:
    """The new run as a baseline whose history ends with the old file's runs."""
    earlier = [] if old is None else history_of(old) + [run_summary(old)]
    out = dict(new)
    out["distbench"] = dict(new["distbench"])
    out["distbench"][HISTORY_KEY] = earlier[-(keep - 1):] if keep > 1 else []
    return out


def append_run(document: dict[str, Any], path: Path, keep: int = KEEP) -> str:
    """Add a run to the baseline at path (created if missing), atomically; a line saying so."""
    old = None
    if path.exists():
        try:
            old = read_document(path)
            history_of(old, path)
        except ResultsFileError as exc:
            return f"distbench: could not append to baseline {path}: {exc}"
    merged = with_history(document, old, keep)
    try:
        write_document(merged, path, overwrite=True)
    except (OSError, ResultsFileError) as exc:
        return f"distbench: could not write baseline {path}: {exc}"
    runs = len(merged["distbench"][HISTORY_KEY]) + 1
    return f"distbench: appended this run to baseline {path} ({runs} run(s) kept, at most {keep})"
