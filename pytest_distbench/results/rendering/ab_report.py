"""The A/B comparison table printed at the end of an A/B session."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ...units import size_cell
from ..statistics.paired import DEFAULT_ALPHA, DEFAULT_CONFIDENCE, DEFAULT_POWER
from ..statistics.stats import median
from . import fit


def _pct(fraction: float) -> str:
    return "inf" if not math.isfinite(fraction) else f"{fraction * 100:.1f}%"


def _bound(value: float) -> str:
    return "inf" if not math.isfinite(value) else f"{value:.3f}"


# A space the fitted table keeps: "not gateable" wraps as one word, never over three lines.
KEPT = "\u00a0"


def verdict_cell(kind: str, gateable: bool) -> str:
    # A regression was seen whatever the noise; a pass that could not have seen one is no pass.
    return kind if gateable or kind == "regression" else f"{kind}, not gateable"


def render_ab(outcomes: Sequence[Any], baseline: str, statistic: str) -> str:
    """`statistic`: what stands for a round in the verdict (harness/ab/mode.py ROUND_STATISTIC)."""
    headers = ["benchmark", "size", f"baseline {statistic} (us)", f"candidate {statistic} (us)",
               "ratio [95% CI]", "p", "detectable", "rounds", "verdict"]
    rows = []
    for o in outcomes:
        v = o.verdict
        rows.append([
            o.name,
            size_cell(o.nbytes),
            f"{median(o.baseline_round_s) * 1e6:,.2f}",
            f"{median(o.candidate_round_s) * 1e6:,.2f}",
            f"{v.ratio:.3f} [{_bound(v.ratio_low)}, {_bound(v.ratio_high)}]",
            f"{v.p_value:.2g}",
            _pct(v.detectable),
            str(v.rounds),
            verdict_cell(v.kind, v.gateable).replace(" gateable", KEPT + "gateable"),
        ])
    table = fit.table(rows, headers, colalign=("left", "right", "right", "right", "right",
                                               "right", "right", "right", "left")
                      ).replace(KEPT, " ")
    kinds = [o.verdict.kind for o in outcomes]
    blind = sum(1 for o in outcomes if not o.verdict.gateable and o.verdict.kind != "regression")
    threshold = outcomes[0].verdict.threshold if outcomes else 0.0
    lines = [
        f"baseline: {baseline}; candidate: this run as is",
        table,
        "",
        f"{kinds.count('regression')} regressions, {kinds.count('improvement')} improvements, "
        f"{kinds.count('unchanged')} unchanged; {blind} not gateable at "
        f"{threshold * 100:g} %",
        f"regression = one-sided Wilcoxon signed-rank p < {DEFAULT_ALPHA:g} on the per-round "
        f"log {statistic} ratios (the table shows their medians over the rounds) AND the "
        f"ratio's {DEFAULT_CONFIDENCE * 100:g} % interval (Hodges-Lehmann) above 1 + threshold; "
        "detectable = smallest slowdown these rounds tell from "
        f"none at p < {DEFAULT_ALPHA:g} with {DEFAULT_POWER * 100:g} % power; not gateable = "
        "detectable > threshold (more rounds or a larger budget would help)",
    ]
    return fit.wrap_text("\n".join(lines)) + "\n"  # a terminal's 120 columns, the table's too
