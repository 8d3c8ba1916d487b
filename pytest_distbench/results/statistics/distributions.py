"""The null distributions the verdicts read, computed here instead of imported from scipy.stats.

scipy.stats takes 1.4-2 s of CPU to import on the 2-core VM: every `pytest-distbench compare`
and every session that gates against stored runs paid it for two functions. Both are exact
here (tests/test_distributions.py holds them to scipy's figures):

- Student's t for whole degrees of freedom: its distribution function is a finite sum
  (Abramowitz and Stegun 26.7.3-4), its quantiles that sum inverted by bisection;
- the Mann-Whitney U statistic: its exact null distribution counted (the coefficients of a
  Gaussian binomial), or the tie-corrected normal approximation with the continuity
  correction, as scipy.stats.mannwhitneyu gives them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cache


def _student_t_cdf(t: float, dof: int) -> float:
    """P(T <= t) for Student's t with `dof` (a whole number >= 1) degrees of freedom, to within
    about 1e-16 (absolute: far in the lower tail that is no relative precision)."""
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    theta = math.atan(t / math.sqrt(dof))
    sin, cos2 = math.sin(theta), math.cos(theta) ** 2
    if dof % 2:  # odd: (2/pi) (theta + sin cos (1 + 2/3 cos^2 + 2.4/3.5 cos^4 + ...))
        term, total = math.cos(theta), 0.0
        for k in range(1, dof - 1, 2):
            total += term
            term *= cos2 * (k + 1) / (k + 2)
        inside = 2 / math.pi * (theta + sin * total)
    else:  # even: sin (1 + 1/2 cos^2 + 1.3/2.4 cos^4 + ...)
        term, total = 1.0, 0.0
        for k in range(0, dof - 1, 2):
            total += term
            term *= cos2 * (k + 1) / (k + 2)
        inside = sin * total
    return min(1.0, max(0.0, (1 + inside) / 2))


@cache
def student_t_quantile(p: float, dof: int) -> float:
    """The t with P(T <= t) = p (0 < p < 1), to the last bit bisection can tell."""
    if not 0 < p < 1:
        raise ValueError(f"a quantile needs 0 < p < 1, got {p!r}")
    if dof < 1 or int(dof) != dof:
        raise ValueError(f"Student's t needs a whole number of degrees of freedom >= 1, "
                         f"got {dof!r}")
    if p < 0.5:
        return -student_t_quantile(1 - p, dof)
    if p == 0.5:
        return 0.0
    low, high = 0.0, 1.0
    while _student_t_cdf(high, dof) < p:
        low, high = high, high * 2
    while True:
        middle = (low + high) / 2
        if not low < middle < high:
            return high
        if _student_t_cdf(middle, dof) < p:
            low = middle
        else:
            high = middle


def student_t_sf(t: float, dof: int) -> float:
    """P(T > t): a one-sided p-value of a t statistic (absolute precision about 1e-16)."""
    if dof < 1 or int(dof) != dof:
        raise ValueError(f"Student's t needs a whole number of degrees of freedom >= 1, "
                         f"got {dof!r}")
    if math.isnan(t):
        return 1.0
    return _student_t_cdf(-t, dof)


def normal_sf(z: float) -> float:
    """P(Z > z) for the standard normal."""
    return 0.5 * math.erfc(z / math.sqrt(2))


# Past this many pairs the exact distribution's table (m x n + 1 counts) is not worth it: the
# normal approximation is accurate there.
EXACT_MAX_PAIRS = 2500


def mann_whitney_p_values(x: Sequence[float], y: Sequence[float],
                          exact: bool | None = None) -> tuple[float, float]:
    """One-sided Mann-Whitney U p-values: (x stochastically greater than y, x less), each the
    probability under no difference of a U at least as far that way (scipy's 'greater' and
    'less'). `exact`: the counted distribution (no ties, at most EXACT_MAX_PAIRS pairs);
    False: the normal approximation with the tie and continuity corrections; None (the
    default): the counted one wherever it applies. A test that cannot tell anything (every
    value equal) gives 1.0 both ways."""
    m, n = len(x), len(y)
    if not m or not n:
        raise ValueError("the Mann-Whitney test needs a value on each side")
    ranks, ties = average_ranks([*x, *y])
    u_x = sum(ranks[:m]) - m * (m + 1) / 2
    u_y = m * n - u_x
    if exact is None:
        exact = not ties and m * n <= EXACT_MAX_PAIRS
    if exact:
        if ties:
            raise ValueError("the exact Mann-Whitney distribution is for values without ties")
        at_least = _u_at_least(min(m, n), max(m, n))
        return at_least[round(u_x)], at_least[round(u_y)]
    tie_term = sum(t ** 3 - t for t in ties)
    total = m + n
    variance = m * n / 12 * ((total + 1) - tie_term / (total * (total - 1)))
    if variance <= 0:
        return 1.0, 1.0
    spread = math.sqrt(variance)
    return (normal_sf((u_x - m * n / 2 - 0.5) / spread),
            normal_sf((u_y - m * n / 2 - 0.5) / spread))


def average_ranks(values: Sequence[float]) -> tuple[list[float], list[int]]:
    """1-based ranks of `values` (ties share the mean of their ranks), and the size of each
    group of two or more tied values."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    tie_sizes = []
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for i in order[start:end + 1]:
            ranks[i] = (start + end) / 2 + 1
        if end > start:
            tie_sizes.append(end - start + 1)
        start = end + 1
    return ranks, tie_sizes


@cache
def _u_at_least(m: int, n: int) -> tuple[float, ...]:
    """P(U >= u) for u = 0 .. m*n under no difference, sides of m and n values, no ties.

    The number of orderings with U = u is the coefficient of q^u in the Gaussian binomial
    prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i); counted in whole numbers, divided once."""
    top = m * n
    counts = [1] + [0] * top
    for i in range(1, m + 1):
        for u in range(top, n + i - 1, -1):  # times (1 - q^(n+i))
            counts[u] -= counts[u - n - i]
        for u in range(i, top + 1):  # divided by (1 - q^i)
            counts[u] += counts[u - i]
    orderings = math.comb(m + n, m)
    at_least, running = [0.0] * (top + 1), 0
    for u in range(top, -1, -1):
        running += counts[u]
        at_least[u] = running / orderings
    return tuple(at_least)
