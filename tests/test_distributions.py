"""The null distributions the verdicts read (results/statistics/distributions.py) give
scipy.stats' own figures: scipy is imported here, in the tests, and nowhere in the product."""

from __future__ import annotations

import math
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import mannwhitneyu
from scipy.stats import t as student_t

from pytest_distbench.results.statistics.distributions import (
    EXACT_MAX_PAIRS,
    mann_whitney_p_values,
    normal_sf,
    student_t_quantile,
)
from pytest_distbench.results.statistics.noise import t_975

# A few values drawn often, so that ties happen; any value in [0, 1] besides.
VALUES = st.sampled_from([0.1, 0.2, 0.25, 0.3]) | st.floats(0, 1)


def scipys(x: list[float], y: list[float], method: str) -> tuple[float, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # every value equal: scipy warns and gives nan
        found = [float(mannwhitneyu(x, y, alternative=way, method=method).pvalue)
                 for way in ("greater", "less")]
    return tuple(1.0 if math.isnan(p) else p for p in found)


@given(x=st.lists(VALUES, min_size=1, max_size=40), y=st.lists(VALUES, min_size=1, max_size=40))
@settings(max_examples=300, deadline=None)
def test_mann_whitney_p_values_are_scipys_with_and_without_ties(x, y):
    ties = len(set(x).union(y)) < len(x) + len(y)
    exact = not ties and len(x) * len(y) <= EXACT_MAX_PAIRS
    ours = mann_whitney_p_values(x, y, exact=exact)
    theirs = scipys(x, y, "exact" if exact else "asymptotic")
    assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-15)
    assert mann_whitney_p_values(x, y) == ours  # the default chooses as above
    if not exact:  # the normal approximation is asked for wherever it is wanted
        return
    assert mann_whitney_p_values(x, y, exact=False) == pytest.approx(
        scipys(x, y, "asymptotic"), rel=1e-9, abs=1e-15)


def test_the_exact_distribution_at_its_largest_and_its_refusal_of_ties():
    x = [i / 50 for i in range(50)]
    y = [i / 50 + 0.013 for i in range(50)]
    assert len(x) * len(y) == EXACT_MAX_PAIRS
    assert mann_whitney_p_values(x, y, exact=True) == pytest.approx(scipys(x, y, "exact"),
                                                                    rel=1e-9)
    with pytest.raises(ValueError, match="without ties"):
        mann_whitney_p_values([1.0, 2.0], [2.0, 3.0], exact=True)
    with pytest.raises(ValueError, match="a value on each side"):
        mann_whitney_p_values([], [1.0], exact=False)


@pytest.mark.parametrize("dof", [*range(1, 41), 57, 100, 333, 1000])
def test_student_t_quantiles_are_scipys(dof):
    for p in (0.6, 0.9, 0.95, 0.975, 0.99, 0.999, 0.9999):
        assert student_t_quantile(p, dof) == pytest.approx(float(student_t.ppf(p, dof)),
                                                           rel=1e-9)
        assert student_t_quantile(1 - p, dof) == -student_t_quantile(p, dof)
    assert t_975(dof) == student_t_quantile(0.975, dof)


def test_student_t_quantile_refuses_what_has_none():
    assert student_t_quantile(0.5, 3) == 0.0
    with pytest.raises(ValueError, match="degrees of freedom"):
        student_t_quantile(0.5, 0)  # refused before the median's shortcut
    for p in (0.0, 1.0, -0.1, math.nan):
        with pytest.raises(ValueError, match="0 < p < 1"):
            student_t_quantile(p, 3)
    for dof in (0, -2, 2.5):
        with pytest.raises(ValueError, match="degrees of freedom"):
            student_t_quantile(0.9, dof)


@given(z=st.floats(-8, 8))
def test_the_normal_tail(z):
    from scipy.stats import norm

    assert normal_sf(z) == pytest.approx(float(norm.sf(z)), rel=1e-12, abs=1e-300)


def test_the_verdicts_import_no_scipy():
    """A compare and a history verdict in a fresh interpreter: scipy.stats never imported
    (it cost each `pytest-distbench compare` 1.4-2 s of CPU)."""
    import subprocess
    import sys

    program = (
        "import sys\n"
        "from pytest_distbench.results.statistics.unpaired import judge\n"
        "from pytest_distbench.results.statistics.runs import judge_history\n"
        "assert judge([1.0 + i / 100 for i in range(40)], [1.3 + i / 100 for i in range(40)],"
        " 0.1)[0] == 'regression'\n"
        "assert judge_history([1.0, 1.01, 0.99, 1.0], 1.5, 0.1).kind == 'regression'\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'scipy'))\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
