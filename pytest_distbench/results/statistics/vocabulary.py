"""One vocabulary and one rule for every comparison: A/B rounds, a stored history, a single
stored run, `pytest-distbench compare` (docs/gating.md, "Verdicts").

A verdict is decided from two things only: whether the change is *shown* (the comparison's
one-sided test at the point's level) and where the change's interval lies against the
threshold. How large a change the comparison could have shown (`detectable`) is printed beside
it, as information: it never changes a verdict.

The level is family-wise: a session (or a `compare` command) holds the chance that an unchanged
build fails any of its N tests to FAMILY_ALPHA by the union bound (Bonferroni), each test of k
points judging each point at FAMILY_ALPHA / (N k).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

Kind = Literal["regression", "improvement", "slower", "faster", "inconclusive", "unchanged",
               "new", "missing"]
# The chance that an unchanged build fails any test of a session (or a compare command).
FAMILY_ALPHA = 0.01
# Shown, but not gateable: read "<kind>, not gateable" wherever a verdict is printed.
UNGATED: tuple[Kind, ...] = ("slower", "faster")
NOT_GATEABLE = "not gateable"


def decide(*, p_slower: float, p_faster: float, level: float, low: float, high: float,
           threshold: float, gateable: bool = True) -> Kind:
    """The verdict of one point.

    p_slower, p_faster: the comparison's one-sided p-values; level: the point's significance
    level; low, high: the change's interval on the log scale (log(current / baseline); the
    point estimate twice where the comparison has no interval); threshold: a fraction (0.1 =
    10 %); gateable: False for a comparison that cannot gate whatever it shows (one stored run:
    its run-to-run noise is unknown; one sample on a side).
    """
    if not (math.isfinite(threshold) and threshold >= 0):
        raise ValueError(f"threshold must be a finite fraction >= 0, got {threshold!r}")
    if not 0 < level < 1:
        raise ValueError(f"a level must lie strictly between 0 and 1, got {level!r}")
    limit = math.log1p(threshold)
    if p_slower < level:
        return "regression" if gateable and low > limit else "slower"
    if p_faster < level:
        return "improvement" if gateable and high < -limit else "faster"
    if -limit <= low and high <= limit:
        return "unchanged"
    return "inconclusive"


def label(kind: str) -> str:
    """How a verdict is printed: a change shown but not gateable says so."""
    return f"{kind}, {NOT_GATEABLE}" if kind in UNGATED else kind


def point_level(tests: int, points: int, alpha: float = FAMILY_ALPHA) -> float:
    """Bonferroni, weighted per test: each of `tests` tests gets alpha / tests, split equally
    among its `points` points. Over every point of every test the levels sum to alpha, so an
    unchanged build fails any of them with probability at most alpha (the union bound)."""
    if not 0 < alpha < 1:
        raise ValueError(f"a family-wise rate must lie strictly between 0 and 1, got {alpha!r}")
    return alpha / (max(int(tests), 1) * max(int(points), 1))


def family_clause(alpha: float, tests: int, levels: Sequence[float], unit: str = "tests") -> str:
    """E.g. 'family-wise 1 % over 67 tests (Bonferroni: each point at p < 0.00015)'."""
    shown = [lv for lv in levels if lv is not None]
    if not shown:
        each = f"each point at p < {point_level(tests, 1, alpha):.2g}"  # none judged yet
    elif max(shown) == min(shown):
        each = f"each point at p < {shown[0]:.2g}"
    else:
        each = (f"each point at p < {alpha * 100:g} % / ({tests} x its test's points): "
                f"{min(shown):.2g} to {max(shown):.2g}")
    unit = unit.removesuffix("s") if tests == 1 else unit
    return f"family-wise {alpha * 100:g} % over {tests} {unit} (Bonferroni: {each})"


def legend_terms(test: str, family: str, *, interval: str = "the change",
                 looks: str | None = None) -> list[str]:
    """The vocabulary under every comparison table, a term a line. `test`: what "shown" means
    here; `family`: family_clause's text; `interval`: what must lie beyond the threshold for a
    regression (and within it for unchanged); `looks`: how the level was divided among several
    looks at the same point, where it was (the term after "shown")."""
    return [
        f"regression = shown slower and {interval} wholly beyond the threshold (the gate fails "
        "it, nothing else); improvement = the same, faster",
        f"slower/faster, {NOT_GATEABLE} = shown to differ but not shown beyond the threshold, "
        "or shown by a comparison that cannot gate (one stored run: run-to-run noise unknown; "
        "one sample on a side); fails nothing",
        f"unchanged = not shown to differ and {interval} within the threshold; inconclusive = "
        "not shown to differ, and it may be beyond the threshold (can't tell)",
        f"shown = {test}, at the point's level: {family}",
        *([f"looks = {looks}"] if looks else []),
        "detectable = the smallest slowdown this comparison shows at that level with 95 % power "
        "(information: it decides no verdict)",
    ]


def legend(test: str, family: str, *, interval: str = "the change") -> str:
    """legend_terms as one paragraph (a terminal's, wrapped by the caller)."""
    return "; ".join(legend_terms(test, family, interval=interval))
