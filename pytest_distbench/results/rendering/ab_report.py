"""The A/B comparison table printed at the end of an A/B session (and in its markdown), with
the vocabulary's legend and the one-line digest."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ...units import size_cell
from ..statistics import vocabulary
from ..statistics.paired import DEFAULT_CONFIDENCE
from ..statistics.stats import median
from . import fit
from .report import cell_text


def _pct(fraction: float) -> str:
    return "inf" if not math.isfinite(fraction) else f"{fraction * 100:.1f}%"


def _bound(value: float) -> str:
    return "inf" if not math.isfinite(value) else f"{value:.3f}"


# A space the fitted table keeps: "not gateable" wraps as one word, never over three lines.
KEPT = "\u00a0"


def counts_line(outcomes: Sequence[Any]) -> str:
    """'1 regression, 0 improvements, 2 unchanged, 1 slower (not gateable)': every kind with
    some, regressions and improvements always."""
    kinds = [o.verdict.kind for o in outcomes]
    parts = [f"{kinds.count('regression')} regression" + "s" * (kinds.count("regression") != 1),
             f"{kinds.count('improvement')} improvement"
             + "s" * (kinds.count("improvement") != 1)]
    for kind in ("slower", "faster", "unchanged", "inconclusive"):
        if kinds.count(kind) or kind == "unchanged":
            said = f" ({vocabulary.NOT_GATEABLE})" if kind in vocabulary.UNGATED else ""
            parts.append(f"{kinds.count(kind)} {kind}{said}")
    return ", ".join(parts)


def legend(outcomes: Sequence[Any], statistic: str, tests: int,
           extra_rounds: int = 0) -> list[str]:
    """The vocabulary under the A/B table, a term a line: its test, its interval, its
    family-wise level, and the second look where a test may get `extra_rounds`."""
    threshold = outcomes[0].verdict.threshold if outcomes else 0.0
    test = (f"a one-sided Wilcoxon signed-rank test on the per-round log {statistic} ratios "
            "(the table shows each side's median over the rounds)")
    family = vocabulary.family_clause(vocabulary.FAMILY_ALPHA, tests,
                                      [o.verdict.level for o in outcomes])
    looks = (f"a test whose rounds left a regression open ran more (up to {extra_rounds}, as "
             "many as its first at a time) and was judged again on all of them (its rounds "
             "column says how many); the point's level is divided among its looks (the level "
             "above is one look's)") if extra_rounds else None
    return [f"threshold {threshold * 100:g} %", *vocabulary.legend_terms(
        test, family, interval=f"the ratio's {DEFAULT_CONFIDENCE * 100:g} % interval "
        "(Hodges-Lehmann)", looks=looks)]


def digest_line(outcomes: Sequence[Any], baseline: str) -> str:
    """The A/B session in one line, for the digest."""
    return (f"A/B against the live baseline ({baseline}): {counts_line(outcomes)} of "
            f"{len(outcomes)} point(s); family-wise {vocabulary.FAMILY_ALPHA * 100:g} %")


def render_ab(outcomes: Sequence[Any], baseline: str, statistic: str, tests: int = 1, *,
              extra_rounds: int = 0, markdown: bool = False) -> str:
    """`statistic`: what stands for a round in the verdict (harness/ab/mode.py ROUND_STATISTIC);
    `tests`: the session's distbench tests, sharing its family-wise rate; `extra_rounds`: the
    most rounds a test left open to a regression gets (--distbench-extra-rounds)."""
    headers = ["benchmark", "size", f"baseline {statistic} (us)", f"candidate {statistic} (us)",
               "ratio [95% CI]", "p", "detectable", "rounds", "verdict"]
    rows = []
    for o in outcomes:
        v = o.verdict
        said = vocabulary.label(v.kind)
        rows.append([
            cell_text(o.name, True) if markdown else o.name,
            size_cell(o.nbytes),
            f"{median(o.baseline_round_s) * 1e6:,.2f}",
            f"{median(o.candidate_round_s) * 1e6:,.2f}",
            f"{v.ratio:.3f} [{_bound(v.ratio_low)}, {_bound(v.ratio_high)}]",
            f"{v.p_value:.2g}",
            _pct(v.detectable),
            str(v.rounds),
            f"**{said}**" if markdown and v.kind == "regression" else
            said.replace(" gateable", KEPT + "gateable"),
        ])
    align = ("left", "right", "right", "right", "right", "right", "right", "right", "left")
    summary = counts_line(outcomes)
    if markdown:
        from tabulate import tabulate  # lazy: only the markdown needs it

        table = tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True,
                         colalign=align)
        return "\n".join([f"baseline: {cell_text(baseline, True)}; candidate: this run as is",
                          "", table, "", summary, ""]
                         + [f"- _{term}_" for term in legend(outcomes, statistic, tests,
                                                             extra_rounds)]) + "\n"
    table = fit.table(rows, headers, colalign=align).replace(KEPT, " ")
    lines = [f"baseline: {baseline}; candidate: this run as is", table, "", summary,
             "; ".join(legend(outcomes, statistic, tests, extra_rounds))]
    return fit.wrap_text("\n".join(lines)) + "\n"  # a terminal's 120 columns, the table's too

