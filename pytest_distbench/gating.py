"""pytest hooks of A/B mode and baseline history (loaded by plugin.py through pytest_plugins).

The options live here, checked before any test runs; the per-test work is in harness/ab.py
(A/B rounds) and results/history.py (stored runs); plugin.py only hands a test to A/B mode and
a finished run to the history.
"""

from __future__ import annotations

import shlex
from typing import Any

import pytest

AB_KEY = pytest.StashKey[Any]()
MIN_ROUNDS = 2


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("distbench", "distributed benchmarks (pytest-distbench)")
    group.addoption("--distbench-baseline-env", metavar="K=V ...", default=None,
                    help="A/B mode: a live baseline in this session whose ranks get these "
                         "environment variables (space separated K=V, shell quoting); the "
                         "candidate is this run as is")
    group.addoption("--distbench-baseline-python", metavar="PATH", default=None,
                    help="A/B mode: a live baseline whose ranks run under this Python "
                         "interpreter (another environment's torch or library)")
    group.addoption("--distbench-rounds", metavar="N", default=None,
                    help="A/B mode: interleaved rounds per benchmark (default: "
                         "see docs/gating.md)")
    group.addoption("--distbench-append", action="store_true", default=False,
                    help="with --distbench-save: add this run to the stored baseline's history "
                         "(the last 10 runs are kept)")


def parse_env(text: str) -> dict[str, str]:
    """'A=1 B="x y"' -> {"A": "1", "B": "x y"}; ValueError naming the bad item."""
    try:
        items = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"cannot split {text!r}: {exc}") from None
    if not items:
        raise ValueError("expected at least one K=V")
    env: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not (name[0].isalpha() or name[0] == "_") or not all(
            c.isalnum() or c == "_" for c in name
        ):
            raise ValueError(f"{item!r} is not NAME=VALUE")
        env[name] = value
    return env


def parse_rounds(text: str | None) -> int:
    from .harness.ab import DEFAULT_ROUNDS

    if text is None:
        return DEFAULT_ROUNDS
    try:
        rounds = int(text)
    except ValueError:
        raise ValueError(f"invalid count {text!r}: expected an integer") from None
    if rounds < MIN_ROUNDS:
        raise ValueError(f"invalid count {text!r}: must be >= {MIN_ROUNDS}")
    return rounds


@pytest.hookimpl(tryfirst=True)  # a bad option must stop the run before anything else starts
def pytest_configure(config: pytest.Config) -> None:
    env_text = config.getoption("distbench_baseline_env")
    python = config.getoption("distbench_baseline_python")
    rounds_text = config.getoption("distbench_rounds")
    if config.getoption("distbench_append") and not config.getoption("distbench_save"):
        raise pytest.UsageError("--distbench-append: needs --distbench-save=NAME (the baseline "
                                "to add this run to)")
    if env_text is None and python is None:
        if rounds_text is not None:
            raise pytest.UsageError("--distbench-rounds: only means something in A/B mode "
                                    "(--distbench-baseline-env or --distbench-baseline-python)")
        return
    try:
        env = parse_env(env_text) if env_text is not None else {}
    except ValueError as exc:
        raise pytest.UsageError(f"--distbench-baseline-env: {exc}") from None
    try:
        rounds = parse_rounds(rounds_text)
    except ValueError as exc:
        raise pytest.UsageError(f"--distbench-rounds: {exc}") from None
    if config.getoption("distbench_compare"):
        raise pytest.UsageError("--distbench-compare: cannot be combined with A/B mode "
                                "(--distbench-baseline-env/--distbench-baseline-python): one "
                                "baseline per run")
    if not config.getoption("distbench"):
        return
    from .harness.ab import ABMode
    from .harness.variants import BaselinePythonError, check_interpreter

    facts = None
    if python is not None:
        try:
            facts = check_interpreter(python, env)
        except BaselinePythonError as exc:
            raise pytest.UsageError(f"--distbench-baseline-python: {exc}") from None
    config.stash[AB_KEY] = ABMode(rounds=rounds, env_overrides=env, interpreter=facts)
    from .harness.ab import RUN_BUDGET
    from .settings import RUN_DEFAULTS

    # Many short paired runs see more than a few long ones (docs/gating.md); a budget the
    # user gives (command line, ini, marker) still wins.
    config.stash.setdefault(RUN_DEFAULTS, {}).setdefault("budget", RUN_BUDGET)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Start the baseline's forkserver once every option is known good, so its imports
    overlap collection."""
    mode = session.config.stash.get(AB_KEY, None)
    if mode is not None:
        mode.start()


def pytest_report_header(config: pytest.Config) -> list[str]:
    mode = config.stash.get(AB_KEY, None)
    if mode is None:
        return []
    from .harness.ab import RUN_BUDGET

    lines = [f"distbench A/B: {mode.rounds} interleaved rounds (ABBA) per benchmark against a "
             f"live baseline: {mode.description}",
             f"distbench A/B: each round runs each variant once, for --distbench-budget of "
             f"timed iterations ({RUN_BUDGET} in A/B mode unless given)"]
    from .settings import resolve

    if resolve(config).bind == "auto":
        lines.append("distbench A/B: CPU worlds run packed on one CPU (--distbench-bind=auto "
                     "means pack in A/B mode: steadier pairs on small VMs; =core spreads them)")
    return lines


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    mode = config.stash.get(AB_KEY, None)
    if mode is None or not mode.outcomes:
        return
    from .harness.ab import ROUND_STATISTIC
    from .results.rendering.ab_report import render_ab

    terminalreporter.section("distbench A/B comparison")
    terminalreporter.line(render_ab(mode.outcomes, mode.description,
                                    ROUND_STATISTIC).rstrip("\n"))


@pytest.hookimpl(trylast=True)  # after plugin.py has stopped the worlds
def pytest_unconfigure(config: pytest.Config) -> None:
    mode = config.stash.get(AB_KEY, None)
    if mode is not None:
        mode.close()
