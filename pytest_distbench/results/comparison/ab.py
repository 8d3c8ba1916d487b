"""A/B mode's verdict in words and fields: the record's "ab" object, the failure message, and
the JUnit properties of an A/B test (harness/ab/mode.py measures; this says what it found)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..document.record import ABField
from ..statistics import stats
from ..statistics.vocabulary import FAMILY_ALPHA


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def ab_field(outcome: Any, baseline: str, statistic: str) -> ABField:
    """The record's "ab" object (docs/results-schema.md) of an ABOutcome (harness/ab/mode.py)."""
    v = outcome.verdict
    return {
        "baseline": baseline,
        "rounds": v.rounds,
        "round_statistic": statistic,
        "baseline_round_s": outcome.baseline_round_s,
        "candidate_round_s": outcome.candidate_round_s,
        "baseline_p50_s": outcome.baseline_p50s,
        "candidate_p50_s": outcome.candidate_p50s,
        "ratio": v.ratio,
        "ratio_low": _finite(v.ratio_low),
        "ratio_high": _finite(v.ratio_high),
        "p_value": v.p_value,
        "level": v.level,
        "verdict": v.kind,
        "detectable": _finite(v.detectable),
        "gateable": v.gateable,
        "threshold": v.threshold,
        "wall_s": outcome.wall_s,
    }


def failure_message(outcome: Any, baseline: str, statistic: str) -> str:
    v = outcome.verdict
    base = stats.median(outcome.baseline_round_s)
    cand = stats.median(outcome.candidate_round_s)
    return (
        f"performance regression against the live baseline ({baseline}): per-round "
        f"{statistic} {base * 1e6:.1f} us -> {cand * 1e6:.1f} us (median of "
        f"{v.rounds} interleaved rounds); "
        f"ratio {v.ratio:.3f} (95 % CI {v.ratio_low:.3f}..{v.ratio_high:.3f}), threshold "
        f"{v.threshold * 100:g} %; one-sided Wilcoxon signed-rank p = {v.p_value:.2g} < "
        f"{v.level:.2g} (this point's share of the session's family-wise "
        f"{FAMILY_ALPHA * 100:g} %)"
    )


def junit_properties(fields: Sequence[tuple[str, ABField]]) -> list[tuple[str, Any]]:
    """ratio, ratio_low, ratio_high, p, level, detectable, rounds, verdict of each point of an A/B
    test, as JUnit properties (prefixed by the measurement's name when a test has several)."""
    out: list[tuple[str, Any]] = []
    for i, (name, ab) in enumerate(fields):
        measurement = name.split("::", 1)[1] if "::" in name else str(i)
        prefix = f"{measurement}." if len(fields) > 1 else ""
        props = [("ratio", ab["ratio"]), ("ratio_low", ab["ratio_low"]),
                 ("ratio_high", ab["ratio_high"]), ("p", ab["p_value"]), ("level", ab["level"]),
                 ("detectable", ab["detectable"]), ("rounds", ab["rounds"]),
                 ("verdict", ab["verdict"])]
        out += [(prefix + key, _rounded(value)) for key, value in props if value is not None]
    return out


def _rounded(value: Any) -> Any:
    return float(f"{value:.6g}") if isinstance(value, float) else value
