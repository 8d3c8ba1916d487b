"""A stored baseline with a history: the last runs' p50s, each with its time, commit and
environment fingerprint (segmented by comparison/series.py, judged by statistics/runs.py).

A baseline file is a results file (its benchmarks are the latest run's, as always) with an
optional ``distbench.history``: the earlier runs, oldest first, each reduced to its p50 per
benchmark id (docs/results-schema.md; read_document validates it). ``--distbench-append``
moves the file's latest run into the history, puts the new run in its place, and keeps the
last ``keep`` runs in all (KEEP unless --distbench-keep-runs says).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .environment import fingerprint
from .io import ResultsFileError, read_document, write_document
from .schema import HISTORY_KEY, records

try:
    import fcntl
except ImportError:  # not POSIX: appends are not serialised there
    fcntl = None  # type: ignore[assignment]

KEEP = 100
# What pytest-benchmark's commit_info says when it knows no commit (build.py records it).
_NO_COMMIT = ("", "unknown", "unversioned")


def run_summary(document: dict[str, Any]) -> dict[str, Any]:
    """A run as the history keeps it: when, at which commit, in which environment, the
    machine speed, and each benchmark's p50."""
    env = document["distbench"]["environment"]
    info = document.get("commit_info")
    info = info if isinstance(info, dict) else {}
    return {
        "created": document["distbench"].get("created"),
        "commit": commit_of(document),
        "dirty": info.get("dirty") if isinstance(info.get("dirty"), bool) else None,
        "torch": env.get("torch"),
        "environment": fingerprint(env),
        "cpu_probe_s": env.get("cpu_probe_s"),
        "p50_s": {bid: rec["summary"]["p50"] for bid, rec in records(document).items()},
    }


def commit_of(document: dict[str, Any]) -> str | None:
    """The git commit a run was made at (build.py records pytest-benchmark's commit_info, from
    the directory pytest ran in), or None where it was not in a repository or git failed."""
    info = document.get("commit_info")
    commit = info.get("id") if isinstance(info, dict) else None
    return commit if isinstance(commit, str) and commit not in _NO_COMMIT else None


def stored_runs(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Every stored run as run_summary gives it, oldest first, the file's own (latest) run
    last. A run stored before commits and fingerprints were (pytest-distbench 0.x: created,
    torch, cpu_probe_s and p50_s only) has commit None and, for its environment, only the
    fields it kept (its torch): what it does not say is not taken for a change."""
    runs = []
    for run in history_of(document):
        known = run.get("environment")
        if not isinstance(known, dict):
            known = {"torch": run["torch"]} if run.get("torch") is not None else {}
        runs.append({**run, "commit": run.get("commit"), "environment": known})
    return runs + [run_summary(document)]


def history_of(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The earlier runs stored in a (validated) baseline, oldest first."""
    return document["distbench"].get(HISTORY_KEY, [])


def p50_runs(document: dict[str, Any]) -> list[dict[str, float]]:
    """Every stored run's p50 per id, oldest first, the file's own (latest) run last."""
    return [run["p50_s"] for run in stored_runs(document)]


def with_history(new: dict[str, Any], old: dict[str, Any] | None,
                 keep: int = KEEP) -> dict[str, Any]:
    """The new run as a baseline whose history ends with the old file's runs."""
    earlier = [] if old is None else history_of(old) + [run_summary(old)]
    out = dict(new)
    out["distbench"] = dict(new["distbench"])
    out["distbench"][HISTORY_KEY] = earlier[-(keep - 1):] if keep > 1 else []
    return out


def append_run(document: dict[str, Any], path: Path, keep: int = KEEP) -> str:
    """Add a run to the baseline at path (created if missing), atomically; a line saying so.

    A baseline that cannot be read, locked or written is a ResultsFileError naming it."""
    try:
        with _exclusive(path):
            old = read_document(path) if path.exists() else None
            merged = with_history(document, old, keep)
            write_document(merged, path, overwrite=True)
    except OSError as exc:
        raise ResultsFileError(path, f"cannot write: {exc.strerror or exc}") from None
    runs = len(merged["distbench"][HISTORY_KEY]) + 1
    return f"distbench: appended this run to baseline {path} ({runs} run(s) kept, at most {keep})"


@contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    """One read-modify-write of the baseline at a time, across processes.

    Sessions appending at once would each read the same old file and the last rename would
    keep only its own run. The lock is on a sibling file (PATH.lock, left in place): the
    baseline itself is replaced by a rename, so a lock on it would not stop the next writer."""
    target = Path(os.path.realpath(path))  # one lock for every symlink to one baseline
    lock = target.with_name(target.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock
