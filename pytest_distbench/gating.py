"""Every baseline option, checked here: the stored baseline (save, overwrite, append,
compare, strict) and the live one (A/B mode); their rows are in settings.py's table. A pytest
plugin of its own (plugin.py loads it through pytest_plugins).

The options are checked before any test runs; the per-test work is in harness/ab/ (A/B
rounds), results/comparison/gate.py (a stored baseline's verdicts) and
results/document/history.py (stored runs); outputs.py hands a test's records to `judge` and a
finished run to `compare_run`, and saves it where `save_path` says.

PYTEST_DONT_REWRITE: plugin.py imports this module before pytest loads it as a plugin (no
asserts here to rewrite; without the marker every session warned that it could not).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .settings import BY_NAME, RUN_DEFAULTS, choose, of_run, of_session

if TYPE_CHECKING:
    from .harness.controller.session import Session

AB_KEY = pytest.StashKey[Any]()
GATE_KEY = pytest.StashKey[Any]()  # results.comparison.gate.Gate of --distbench-compare
SAVE_PATH_KEY = pytest.StashKey[Path]()
WARNINGS_KEY = pytest.StashKey[list[str]]()
MIN_ROUNDS = 2


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


def parse_rounds(text: str | None, default: int | None = None, least: int = MIN_ROUNDS) -> int:
    from .harness.ab.mode import DEFAULT_ROUNDS

    if text is None:
        return DEFAULT_ROUNDS if default is None else default
    try:
        rounds = int(text)
    except ValueError:
        raise ValueError(f"invalid count {text!r}: expected an integer") from None
    if rounds < least:
        raise ValueError(f"invalid count {text!r}: must be >= {least}")
    return rounds


@pytest.hookimpl(tryfirst=True)  # a bad option must stop the run before anything else starts
def pytest_configure(config: pytest.Config) -> None:
    options = of_session(config)
    env_text, python, rounds_text = options.baseline_env, options.baseline_python, options.rounds
    extra_text = options.extra_rounds
    if options.append and not options.save:
        raise pytest.UsageError("--distbench-append: needs --distbench-save=NAME (the baseline "
                                "to add this run to)")
    # On the command line it asks for this run (an ini's value is a project's standing one).
    if not options.append and choose(config, BY_NAME["keep_runs"])[1] == "option":
        raise pytest.UsageError("--distbench-keep-runs: only means something with "
                                "--distbench-append (the history it keeps)")
    if env_text is None and python is None:
        for name, text in (("rounds", rounds_text), ("extra-rounds", extra_text)):
            if text is not None:
                raise pytest.UsageError(f"--distbench-{name}: only means something in A/B mode "
                                        "(--distbench-baseline-env or "
                                        "--distbench-baseline-python)")
        return
    try:
        env = parse_env(env_text) if env_text is not None else {}
    except ValueError as exc:
        raise pytest.UsageError(f"--distbench-baseline-env: {exc}") from None
    try:
        rounds = parse_rounds(rounds_text)
    except ValueError as exc:
        raise pytest.UsageError(f"--distbench-rounds: {exc}") from None
    try:
        extra = parse_rounds(extra_text, default=2 * rounds, least=0)
    except ValueError as exc:
        raise pytest.UsageError(f"--distbench-extra-rounds: {exc}") from None
    if options.compare:
        raise pytest.UsageError("--distbench-compare: cannot be combined with A/B mode "
                                "(--distbench-baseline-env/--distbench-baseline-python): one "
                                "baseline per run")
    if not options.run:
        return
    from .harness.ab.mode import ABMode
    from .harness.ab.variants import BaselinePythonError, check_interpreter

    facts = None
    if python is not None:
        try:
            facts = check_interpreter(python, env)
        except BaselinePythonError as exc:
            raise pytest.UsageError(f"--distbench-baseline-python: {exc}") from None
    config.stash[AB_KEY] = ABMode(rounds=rounds, extra_rounds=extra, env_overrides=env,
                                  interpreter=facts)
    from .harness.ab.mode import RUN_BUDGET

    # Many short paired runs see more than a few long ones (docs/gating.md); a budget the
    # user gives (command line, ini, marker) still wins.
    config.stash.setdefault(RUN_DEFAULTS, {}).setdefault("budget", RUN_BUDGET)


def configure(config: pytest.Config, launch: Any, reports: bool) -> None:
    """After the launch mode is known: refuse A/B mode under a launcher; on the reporting
    process, check the stored baseline options before any rank starts (a bad one must not
    cost a whole run)."""
    if launch is not None and config.stash.get(AB_KEY, None) is not None:
        raise pytest.UsageError(
            "--distbench-baseline-env/--distbench-baseline-python: A/B mode starts both "
            f"variants' worlds itself and cannot run under a launcher ({launch.launcher} "
            "started this rank); run it without the launcher, or compare launched runs "
            "through a stored baseline (--distbench-save / --distbench-compare)")
    if reports:
        _configure_stored(config)


def _configure_stored(config: pytest.Config) -> None:
    from .results import document as storage

    options = of_session(config)
    baseline_dir = config.rootpath / options.baseline_dir
    save = options.save
    if save:
        try:
            path = storage.resolve_baseline(save, baseline_dir)
        except ValueError as exc:
            raise pytest.UsageError(f"--distbench-save: {exc}") from None
        if path.exists() and not options.overwrite and not options.append:
            raise pytest.UsageError(
                f"--distbench-save: baseline {path} already exists; pass --distbench-overwrite "
                "to replace it"
            )
        config.stash[SAVE_PATH_KEY] = path
    compare = options.compare
    if compare:
        from .results.comparison.gate import Gate
        from .results.document.environment import controller_environment

        gate = Gate.load(compare, baseline_dir, options.strict)
        differences = gate.environment_differences(controller_environment())
        if differences and gate.strict:
            raise pytest.UsageError(
                f"--distbench-strict: baseline {gate.path} was measured in another environment: "
                + "; ".join(differences)
            )
        config.stash[GATE_KEY] = gate
        config.stash[WARNINGS_KEY] = [
            f"WARNING: baseline {gate.path} was measured in another environment; differences "
            "may not come from your change:"
        ] + [f"  {line}" for line in differences] if differences else []


def ab_mode(config: pytest.Config) -> Any:
    """The A/B mode of this run (harness/ab/mode.ABMode), or None."""
    return config.stash.get(AB_KEY, None)


def save_path(config: pytest.Config) -> Path | None:
    return config.stash.get(SAVE_PATH_KEY, None)


def warnings(config: pytest.Config) -> list[str]:
    return config.stash.get(WARNINGS_KEY, [])


def judge(item: pytest.Item, records: list[dict[str, Any]], threshold: float
          ) -> tuple[dict[str, Any], list[str]]:
    """The stored baseline's verdict per record id, and a failure message per regression; each
    point at its share of the session's family-wise rate (vocabulary.point_level)."""
    gate = item.config.stash.get(GATE_KEY, None)
    failures, verdicts = [], {}
    if gate is not None:
        from .results.document.schema import is_figure
        from .results.statistics.vocabulary import point_level

        figures = [record for record in records if is_figure(record)]
        for record in figures:  # a record that is not a figure is only a bound: not judged
            v = gate.judge(record, threshold, point_level(gate.tests, len(figures)))
            verdicts[record["id"]] = v
            if v is not None and v.fails_session:
                failures.append(gate.failure_message(v, len(record["samples"])))
    return verdicts, failures


def compare_run(config: pytest.Config, session: Session, document: dict[str, Any]
                ) -> dict[str, Any] | None:
    """--distbench-compare: the whole run's comparison (kept on the session); the baseline's
    document, or None without a stored baseline."""
    gate = config.stash.get(GATE_KEY, None)
    if gate is None:
        return None
    from .results.comparison.verdict import speed_difference

    session.comparison = gate.comparison(document, of_run(config).threshold)
    from .results.document.nccl_tests import describe

    described = describe(gate.document)
    if described:  # which of nccl-tests' two timings stands beside this run's figures
        config.stash.setdefault(WARNINGS_KEY, []).append(f"baseline {gate.path}: {described}")
    speed = speed_difference(gate.document["distbench"]["environment"],
                             document["distbench"]["environment"])
    if speed:
        from .results.rendering.fit import wrap

        config.stash.setdefault(WARNINGS_KEY, []).extend(wrap(f"WARNING: {speed}"))
    return gate.document


def distbench_tests(items: list[pytest.Item]) -> int:
    """The tests a session's family-wise rate is shared among: its distbench items after
    deselection, less those skipped outright (launcher mode skips the other world sizes'),
    which cannot fail. Every xdist worker and every launched rank collects the whole list."""
    from .collection import is_distbench

    return sum(1 for item in items if is_distbench(item) and not item.get_closest_marker("skip"))


@pytest.hookimpl(trylast=True)  # after every plugin's pytest_collection_modifyitems
def pytest_collection_finish(session: pytest.Session) -> None:
    tests = distbench_tests(session.items)
    for holder in (session.config.stash.get(GATE_KEY, None), ab_mode(session.config)):
        if holder is not None:
            holder.tests = tests


# An xdist worker's levels, handed to the controller (which collects no test itself) so that
# its comparison table judges each point at the level the worker's gate did.
LEVELS_OUTPUT = "distbench_gate_levels"


# The count of tests an xdist worker's A/B mode shared the session's rate among: the
# controller's A/B table states it (its outcomes come from the records the workers hand over).
AB_TESTS_OUTPUT = "distbench_ab_tests"


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    gate = session.config.stash.get(GATE_KEY, None)
    mode = session.config.stash.get(AB_KEY, None)
    output = getattr(session.config, "workeroutput", None)
    if output is None:
        return
    if gate is not None:
        output[LEVELS_OUTPUT] = {"tests": gate.tests, "levels": gate.levels}
    if mode is not None:
        output[AB_TESTS_OUTPUT] = mode.tests


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    gate = node.config.stash.get(GATE_KEY, None)
    mode = node.config.stash.get(AB_KEY, None)
    output = getattr(node, "workeroutput", {})
    handed = output.get(LEVELS_OUTPUT)
    if gate is not None and handed:
        gate.tests = max(gate.tests, int(handed["tests"]))
        gate.levels.update(handed["levels"])
    if mode is not None and AB_TESTS_OUTPUT in output:
        mode.tests = max(mode.tests, int(output[AB_TESTS_OUTPUT]))


def ab_outcomes(config: pytest.Config) -> list[Any]:
    """A/B mode's outcomes: the ones this process judged, or on an xdist controller (which
    judges none) those of the records its workers handed over, in the tests' order."""
    mode = config.stash.get(AB_KEY, None)
    if mode is None:
        return []
    if mode.outcomes:
        return mode.outcomes
    from .harness.ab.mode import ABOutcome
    from .harness.controller.session import SESSION_KEY

    distbench = config.stash.get(SESSION_KEY, None)
    records = distbench.records if distbench is not None else []
    return [ABOutcome.of_record(r) for r in records if r.get("ab")]


def pytest_sessionstart(session: pytest.Session) -> None:
    """Start the baseline's forkserver once every option is known good, so its imports
    overlap collection."""
    mode = session.config.stash.get(AB_KEY, None)
    if mode is not None:
        from .harness.controller.session import SESSION_KEY

        mode.start(session.config.stash[SESSION_KEY])


def pytest_report_header(config: pytest.Config) -> list[str]:
    from .results.rendering.fit import wrap  # fitted as every session line (120 columns)

    lines = []
    gate = config.stash.get(GATE_KEY, None)
    if gate is not None:
        lines += wrap(f"distbench: comparing against {gate.path}; {gate.noise_note}")
    lines += [part for line in warnings(config) for part in wrap(line, indent="    ")]
    mode = config.stash.get(AB_KEY, None)
    if mode is None:
        return lines
    from .harness.ab.mode import RUN_BUDGET

    said = [f"distbench A/B: {mode.rounds} interleaved rounds (ABBA) per benchmark against a "
            f"live baseline: {mode.description}",
            f"distbench A/B: each round runs each variant once, for --distbench-budget of "
            f"timed iterations ({RUN_BUDGET} in A/B mode unless given)"]
    if mode.extra_rounds:
        said.append(f"distbench A/B: up to {mode.extra_rounds} more rounds, {mode.rounds} at a "
                    "time, for a test whose rounds leave a regression open "
                    "(--distbench-extra-rounds), each look at its share of the point's level")
    if of_run(config).bind == "auto":
        said.append("distbench A/B: CPU worlds run packed on one CPU (--distbench-bind=auto "
                    "means pack in A/B mode: steadier pairs on small VMs; =core spreads them)")
    return lines + [part for line in said for part in wrap(line)]


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    mode = config.stash.get(AB_KEY, None)
    outcomes = ab_outcomes(config)
    if mode is None or not outcomes:
        return
    from .harness.ab.mode import ROUND_STATISTIC
    from .results.rendering.ab_report import render_ab

    terminalreporter.section("distbench A/B comparison")
    terminalreporter.line(render_ab(outcomes, mode.description, ROUND_STATISTIC,
                                    mode.tests, extra_rounds=mode.extra_rounds).rstrip("\n"))


def ab_markdown(config: pytest.Config) -> str | None:
    """The A/B table, its verdicts and legend as markdown (--distbench-markdown); None outside
    A/B mode."""
    mode = config.stash.get(AB_KEY, None)
    outcomes = ab_outcomes(config)
    if mode is None or not outcomes:
        return None
    from .harness.ab.mode import ROUND_STATISTIC
    from .results.rendering.ab_report import render_ab

    return render_ab(outcomes, mode.description, ROUND_STATISTIC, mode.tests,
                     extra_rounds=mode.extra_rounds, markdown=True)


def digest(config: pytest.Config) -> str | None:
    """A/B mode's line in the session's digest (None outside A/B mode)."""
    mode = config.stash.get(AB_KEY, None)
    outcomes = ab_outcomes(config)
    if mode is not None and outcomes:
        from .results.rendering.ab_report import digest_line

        return digest_line(outcomes, mode.description)
    return None


@pytest.hookimpl(trylast=True)  # after plugin.py has stopped the worlds
def pytest_unconfigure(config: pytest.Config) -> None:
    mode = config.stash.get(AB_KEY, None)
    if mode is not None:
        mode.close()
