"""A stored baseline with a history: the last runs' p50s, and a verdict that learns from them.

A baseline file is a results file (its benchmarks are the latest run's, as always) with an
optional ``distbench.history``: the earlier runs, oldest first, each reduced to its p50 per
benchmark id (docs/results-schema.md). ``--distbench-append`` moves the file's latest run into
the history, puts the new run in its place, and keeps the last KEEP runs in all.

With MIN_RUNS or more runs, a benchmark's verdict compares the new p50 with the spread of the
stored p50s (run-to-run noise, which one run cannot show): a robust z on log p50s, with a t
quantile for the few runs the spread is learned from, together with the threshold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import storage
from .paired import DEFAULT_ALPHA, DEFAULT_POWER, robust_sd

KEEP = 10
MIN_RUNS = 3
HISTORY_KEY = "history"


def run_summary(document: dict[str, Any]) -> dict[str, Any]:
    """A run as the history keeps it: when, the machine speed, and each benchmark's p50."""
    env = document["distbench"]["environment"]
    return {
        "created": document["distbench"].get("created"),
        "torch": env.get("torch"),
        "cpu_probe_s": env.get("cpu_probe_s"),
        "p50_s": {bid: rec["summary"]["p50"] for bid, rec in storage.records(document).items()},
    }


def history_of(document: dict[str, Any], path: str | Path = "") -> list[dict[str, Any]]:
    """The earlier runs stored in a baseline (oldest first); ResultsFileError if malformed."""
    history = document["distbench"].get(HISTORY_KEY, [])
    if not isinstance(history, list):
        raise storage.ResultsFileError(path, "expected a list", f"distbench.{HISTORY_KEY}")
    for i, run in enumerate(history):
        where = f"distbench.{HISTORY_KEY}[{i}].p50_s"
        p50s = run.get("p50_s") if isinstance(run, dict) else None
        if not isinstance(p50s, dict):
            raise storage.ResultsFileError(path, "expected an object of id -> seconds", where)
        for bid, value in p50s.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                math.isfinite(value) and value >= 0
            ):
                raise storage.ResultsFileError(path, f"{bid!r}: expected seconds >= 0", where)
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
            old = storage.read_document(path)
            history_of(old, path)
        except storage.ResultsFileError as exc:
            return f"distbench: could not append to baseline {path}: {exc}"
    merged = with_history(document, old, keep)
    try:
        storage.write_document(merged, path, overwrite=True)
    except (OSError, storage.ResultsFileError) as exc:
        return f"distbench: could not write baseline {path}: {exc}"
    runs = len(merged["distbench"][HISTORY_KEY]) + 1
    return f"distbench: appended this run to baseline {path} ({runs} run(s) kept, at most {keep})"


@dataclass(frozen=True)
class HistoryVerdict:
    kind: str  # "regression", "improvement" or "unchanged"
    change: float  # current / median of the stored p50s - 1
    z: float  # robust z of log p50 against the stored runs
    detectable: float  # smallest slowdown this history can tell from noise (fraction)
    runs: int


def judge_history(stored_p50s: Sequence[float], current_p50: float, threshold: float, *,
                  alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER) -> HistoryVerdict:
    """The verdict of one p50 against the same benchmark's stored p50s (at least 2)."""
    from scipy.stats import t as student_t  # lazy: scipy.stats takes ~2 s to import

    values = [float(v) for v in stored_p50s]
    if len(values) < 2:
        raise ValueError("a history verdict needs at least two stored runs")
    if not all(v > 0 and math.isfinite(v) for v in values + [current_p50]):
        raise ValueError("p50s must be finite and positive")
    logs = [math.log(v) for v in values]
    centre = sorted(logs)[len(logs) // 2] if len(logs) % 2 else _mid(sorted(logs))
    # The new run is one more draw from the same spread: its distance from the centre has
    # the run-to-run spread plus the centre's own uncertainty.
    spread = robust_sd(logs) * math.sqrt(1 + 1 / len(logs))
    dof = len(logs) - 1
    t_alpha = float(student_t.ppf(1 - alpha, dof))
    t_power = float(student_t.ppf(power, dof))
    distance = math.log(current_p50) - centre
    z = distance / spread if spread > 0 else (0.0 if distance == 0 else math.copysign(
        math.inf, distance))
    change = math.exp(distance) - 1
    limit = math.log1p(threshold)
    if z > t_alpha and distance > limit:
        kind = "regression"
    elif z < -t_alpha and distance < -limit:
        kind = "improvement"
    else:
        kind = "unchanged"
    return HistoryVerdict(kind, change, z, math.expm1((t_alpha + t_power) * spread), len(logs))


def _mid(ordered: list[float]) -> float:
    mid = len(ordered) // 2
    return ordered[mid - 1] + (ordered[mid] - ordered[mid - 1]) / 2
