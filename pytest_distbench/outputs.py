"""The end of a session: the results document, and every file and summary made from it.

One place builds the document (records, environment, command line) and writes what was asked
for: the results file, the baseline (or a run added to its history), plots, markdown, the
tables in the terminal, and each test's figures on its `-v` line and in JUnit. A requested
file that could not be written fails the session: a green run with its results lost is a
lie.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from . import gating
from .harness.controller.points import Point
from .harness.controller.session import Session
from .harness.environment.physical import measured_bounds
from .results.document.record import Record
from .settings import BY_NAME, of_session

HEADLINE_KEY = pytest.StashKey[str]()
_FILE_OPTIONS = ("json", "markdown", "plot")  # settings that name a file (and the baseline)


def configure(config: pytest.Config) -> None:
    """Refuse a plot request without matplotlib, or an output path no file can have, now, not
    after an hour of benchmarks."""
    options = of_session(config)
    for name in _FILE_OPTIONS:
        check_output_path(BY_NAME[name].option, getattr(options, name),
                          directory=name == "plot")
    check_output_path("--distbench-save", gating.save_path(config))
    if options.plot:
        from .results.rendering.plot import MISSING_MATPLOTLIB, matplotlib_available

        if not matplotlib_available():
            raise pytest.UsageError(f"--distbench-plot: {MISSING_MATPLOTLIB}")


def check_output_path(option: str, path: str | os.PathLike[str] | None, *,
                      directory: bool = False) -> None:
    """A usage error naming the option when ``path`` cannot take its output."""
    from .results.document.io import output_path_problem

    problem = path and output_path_problem(os.fspath(path), directory=directory)
    if problem:
        raise pytest.UsageError(f"{option}: {os.fspath(path)!r} {problem}")


# -- progress -----------------------------------------------------------------------------------

class SuiteProgress:
    """Before each suite's (test file's) first test: which suite of how many, and how far
    into the run it starts; quiet under -q. A plugin object: it needs the config in
    pytest_runtest_logstart."""

    NAME = "distbench-suite-progress"

    def __init__(self, config: pytest.Config) -> None:
        self._config = config
        self._lines: dict[str, str] = {}

    def plan(self, items: list[pytest.Item]) -> None:
        from .collection import is_distbench

        counts: dict[str, int] = {}
        for item in items:
            if is_distbench(item):
                # The file as pytest names it (a node id's path is empty for a suite run
                # with --pyargs from outside the rootdir).
                path = item.location[0]
                counts[path] = counts.get(path, 0) + 1
        total, done = sum(counts.values()), 0
        for number, (path, count) in enumerate(counts.items(), start=1):
            tests = f"{count} tests" if count > 1 else "1 test"
            self._lines[path] = (f"distbench: suite {number}/{len(counts)}, "
                                 f"{Path(path).name}: {tests}, "
                                 f"{done + 1}-{done + count} of {total}")
            done += count

    @pytest.hookimpl(tryfirst=True)  # before the terminal reporter starts the file's line
    def pytest_runtest_logstart(self, nodeid: str, location: tuple[str, Any, str]) -> None:
        line = self._lines.pop(location[0], None)
        reporter = self._config.pluginmanager.get_plugin("terminalreporter")
        if line is None or reporter is None or self._config.get_verbosity() < 0:
            return
        if isinstance(reporter.currentfspath, Path):  # a file's line of dots is open
            # pytest ends it with the run's [ %] when the next file starts: so do we, as it does.
            fill = getattr(reporter, "_write_progress_information_filling_space", None)
            if fill is not None and getattr(reporter, "_show_progress_info", False):
                fill()
        reporter.ensure_newline()
        # No newline: pytest's own line break, before it names the file, ends this one.
        reporter.write(line)


# -- per test ----------------------------------------------------------------------------------

def after_test(item: pytest.Function, points: list[Point], resolved: Any,
               view: Callable[[list[Point]], list[Record]]) -> None:
    """The gate's verdicts, the test's JUnit properties and the figures its `-v` line ends
    with, and a failure per regression, each judged on `view(points)`: their records with the
    interval the session knows so far (Session.view)."""
    from .results.rendering.junit import properties
    from .results.rendering.registered import headline

    shown = view(points)
    verdicts, failures = gating.judge(item, shown, resolved.threshold)
    item.user_properties.extend(properties(shown, verdicts))
    text = headline(shown)
    if text:
        item.stash[HEADLINE_KEY] = text
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)


def show_records(config: pytest.Config, distbench: Session,
                 records: list[dict[str, Any]]) -> None:
    """Each sealed record to every pytest_distbench_record hook (hookspecs.py), as a copy.
    A hook that raises fails the session once, in one line naming its plugin, and is called
    no more."""
    import copy

    name = "pytest_distbench_record"
    impls = list(getattr(config.hook, name).get_hookimpls())
    for record in records:
        for impl in list(impls):
            try:
                impl.function(**{arg: {"config": config, "record": copy.deepcopy(record)}[arg]
                                 for arg in impl.argnames})
            except Exception as exc:  # noqa: BLE001 - any error of a user's hook is reported
                impls.remove(impl)
                _failed(distbench, f"{name} of plugin {impl.plugin_name!r} raised "
                                   f"{type(exc).__name__}: {exc} (record {record['id']}); it is "
                                   "not called again this session")


def headline_of(item: pytest.Item) -> str | None:
    return item.stash.get(HEADLINE_KEY, None)


# -- the end of the session --------------------------------------------------------------------

class OutputsInterrupted(Exception):
    """SIGINT or SIGTERM came while the outputs were written; the ERROR line says so."""


def finish(config: pytest.Config, distbench: Session) -> bool:
    """Build the document and write every requested output; False when one was not written.

    A SIGINT or SIGTERM meanwhile stops the writing: the output being written stays as it was
    (io.py: no temporary file, no partial append), those after it are not written, and
    OutputsInterrupted follows one ERROR line saying so (not a traceback, nor a process
    killed mid-write)."""
    from .results.document.io import interrupting_signal, sigterm_interrupts

    try:
        with sigterm_interrupts():
            _finish(config, distbench)
    except KeyboardInterrupt as exc:
        name = interrupting_signal(exc).name
        written = ", ".join(sorted(map(str, distbench.written))) or "none"
        _failed(distbench, f"interrupted ({name}) while writing the outputs: the one being "
                           "written is left as it was (no temporary file, no partial append) "
                           f"and those after it are not written; written: {written}")
        raise OutputsInterrupted from None
    return not distbench.output_errors


def _finish(config: pytest.Config, distbench: Session) -> None:
    from .results import document as storage
    from .results.document.environment import controller_environment, cpu_probe, merge_rank_facts

    distbench.cpu_probes.append(cpu_probe())
    environment = controller_environment()
    merge_rank_facts(environment, distbench.rank_infos)
    environment["world_sizes"] = sorted({r["world_size"] for r in distbench.records})
    environment["cpu_probe_s"] = distbench.cpu_probes
    if distbench.rpc_checks is not None:
        environment["rpc_checks"] = [check.as_dict() for check in distbench.rpc_checks]
    if distbench.store_checks is not None:
        environment["store_checks"] = [check.as_dict() for check in distbench.store_checks]
    bounds = measured_bounds()
    if bounds is not None:  # what the sanity rules held this run's figures to
        environment["machine_bounds"] = bounds.as_dict()
    environment.update(distbench.environment_facts())  # launcher, hosts, xdist workers
    _add_hooked_facts(config, distbench, environment)
    document = storage.make_document(distbench.records, environment, list(sys.argv),
                                     left_out=lambda exc: _left_out(distbench, exc))
    options = of_session(config)
    json_path = options.json
    if json_path:
        _write(distbench, document, Path(json_path), overwrite=True, what="results file")
    save_path = gating.save_path(config)
    if save_path is not None and options.append:
        _append(distbench, document, save_path, options.keep_runs)
    elif save_path is not None:
        _write(distbench, document, save_path, overwrite=options.overwrite,
               what="baseline")
    gate_document = gating.compare_run(config, distbench, document)
    plot_dir = options.plot
    if plot_dir:
        _write_plots(distbench, document, Path(plot_dir), gate_document)
    markdown_path = options.markdown
    if markdown_path:
        _write_markdown(distbench, document, Path(markdown_path), memory=options.gpu_memory,
                        ab=gating.ab_markdown(config))


def _left_out(distbench: Session, problem: Exception) -> None:
    """A record no results file can hold (a bug past the check where records are made): the
    rest are written, and the session fails naming it, not a green run short of a record."""
    distbench.left_out += 1
    _failed(distbench, f"left out of every output: {problem}")


def _add_hooked_facts(config: pytest.Config, distbench: Session,
                      environment: dict[str, Any]) -> None:
    """What pytest_distbench_environment hooks (hookspecs.py) add to the environment. A name
    the plugin already set, or a value JSON cannot hold, fails the session with a line; the
    document is written without it."""
    hook = "pytest_distbench_environment"
    for facts in config.hook.pytest_distbench_environment(config=config):
        if not isinstance(facts, dict):
            _failed(distbench, f"{hook} returned a {type(facts).__name__}, not a dict of facts")
            continue
        for name, value in facts.items():
            if not isinstance(name, str) or name in environment:
                _failed(distbench, f"{hook}: {name!r} is not a name of its own (the plugin's "
                                   "environment already has it, or it is not a string)")
                continue
            try:
                json.dumps(value, allow_nan=False)
            except (TypeError, ValueError) as exc:
                _failed(distbench, f"{hook}: {name!r} is not a JSON value: {exc}")
                continue
            environment[name] = value


def nothing_measured(config: pytest.Config, distbench: Session) -> bool:
    """A session without a record: every requested output fails the session, in one line
    (an empty results file or baseline would pass for a run that measured something)."""
    if not distbench.reports:
        return True
    save_path, options = gating.save_path(config), of_session(config)
    asked = [f"{BY_NAME[name].option}={getattr(options, name)}" for name in _FILE_OPTIONS
             if getattr(options, name)]
    if save_path is not None:
        asked.append(f"--distbench-save={options.save} ({save_path})")
    if asked:
        _failed(distbench, f"nothing was measured (every distbench test was skipped, failed or "
                           f"deselected), so no requested output was written: {', '.join(asked)}")
    return not asked


def benchmark_json_note(config: pytest.Config, items: list[pytest.Item]) -> str | None:
    """pytest-benchmark's --benchmark-json in a distbench session: it writes the tests that
    used its `benchmark` fixture (none under xdist, where it turns itself off), never a
    distbench test; the line says which option writes those (a file pytest-benchmark reads)."""
    try:
        path = config.getoption("benchmark_json")
    except ValueError:  # pytest-benchmark is not installed, or -p no:benchmark
        return None
    if not path or any("benchmark" in getattr(item, "fixturenames", ()) for item in items):
        return None
    return ("distbench: --benchmark-json wrote nothing (pytest-benchmark writes tests using its "
            "fixture): use --distbench-json=PATH")


def world_starts_line(starts: list[tuple[Any, float]]) -> str:
    """`gloo ws2 cpu 0.22 s` for one start; per kind of world, how many and their time."""
    by_world: dict[str, list[float]] = {}
    for key, seconds in starts:
        by_world.setdefault(str(key), []).append(seconds)
    parts = []
    for world, times in by_world.items():
        if len(times) == 1:
            parts.append(f"{world} {times[0]:.2f} s")
        else:
            parts.append(f"{world} x{len(times)} ({sum(times):.1f} s in all, "
                         f"slowest {max(times):.2f} s)")
    return ", ".join(parts)


def write_lines(tr: Any, text: str, **markup: bool) -> None:
    """`text` through the terminal reporter, every line wrapped to fit a terminal."""
    from .results.rendering.fit import wrap_text

    for line in wrap_text(text).splitlines():
        tr.write_line(line, **markup)


def terminal_summary(tr: Any, config: pytest.Config, distbench: Session) -> None:
    if distbench.records:
        from .results.rendering.table import legend, render_tables

        tr.section("distbench results")
        write_lines(tr, legend(distbench.records))
        from .results.rendering.noise import noise_lines

        for line in noise_lines(distbench.records):
            write_lines(tr, line)
        tr.line("")
        tr.line(render_tables(distbench.records,
                              memory=of_session(config).gpu_memory,
                              details=config.get_verbosity() >= 1))
    if not distbench.records and distbench.reports:
        skips = skip_lines(tr.stats.get("skipped", []))
        if skips:  # pytest -q says only "1 skipped": the session's own summary says why
            tr.section("distbench results")
            for line in skips:
                write_lines(tr, line)
    if distbench.world_starts:
        tr.line("")
        write_lines(tr, f"worlds started: {world_starts_line(distbench.world_starts)}")
    if distbench.comparison is not None:
        from .results.rendering.report import render

        tr.section("distbench comparison")
        tr.line(render(distbench.comparison, "table").rstrip("\n"))
    # Wrapped to a terminal at spaces only: a path they name stays whole (it is copied and
    # searched for as it is), on a line of its own where the line would be too wide.
    for line in gating.warnings(config):
        write_lines(tr, line, yellow=True, bold=True)
    for line in distbench.notes:
        write_lines(tr, line)
    for line in distbench.output_errors:
        tr.line(f"distbench: ERROR: {line}", red=True, bold=True)
    if distbench.records:
        tr.section("distbench digest")
        for line in digest_lines(config, distbench):
            tr.line(line)


def skip_lines(reports: list[Any]) -> list[str]:
    """`3 skipped: backend nccl needs CUDA: no GPU is visible`: one line per reason, the most
    frequent first, from pytest's skip reports."""
    counts: dict[str, int] = {}
    for report in reports:
        longrepr = getattr(report, "longrepr", None)
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else (
            str(longrepr or "no reason given"))
        reason = str(reason).removeprefix("Skipped: ")
        counts[reason] = counts.get(reason, 0) + 1
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [f"{count} skipped: {reason}" for reason, count in ordered]


def digest_lines(config: pytest.Config, distbench: Session) -> list[str]:
    """What the session's output ends with, on one screen: each family's headline at its
    largest point, where the full tables are, and how noisy the machine was."""
    from .harness.local.limits import usable_cores
    from .results.rendering.digest import family_lines
    from .results.rendering.fit import wrap

    lines = family_lines(distbench.records)
    gate_line = gating.digest(config)
    if gate_line:
        lines += wrap(gate_line)
    if distbench.comparison is not None:
        from .results.rendering.report import summary_line

        lines += wrap(f"against {distbench.comparison.baseline_label}: "
                      f"{summary_line(distbench.comparison)}; family-wise "
                      f"{distbench.comparison.alpha * 100:g} %")
    json_path, markdown_path = of_session(config).json, of_session(config).markdown
    where = ["the full tables above",
             _pointer(distbench, json_path, "every sample in", "every sample: --distbench-json"),
             _pointer(distbench, markdown_path, "the tables as markdown in",
                      "as markdown: --distbench-markdown")]
    lines += wrap("; ".join(where))
    lines += wrap(machine_line(usable_cores(), max(r["world_size"] for r in distbench.records),
                               distbench.cpu_probes))
    return lines


def _pointer(distbench: Session, path: str | None, written: str, option: str) -> str:
    """Where the digest points for one output: the file, where it was written."""
    if not path:
        return f"{option}=PATH"
    if Path(path) in distbench.written and distbench.left_out:
        return f"{written} {path} but those of {distbench.left_out} record(s) (the ERROR above)"
    if Path(path) in distbench.written:
        return f"{written} {path}"
    return f"{option}: {path} not written (the ERROR above)"


def machine_line(cores: int, ranks: int, probes: list[float]) -> str:
    """The machine's noise: ranks against cores, and its speed at the start and the end."""
    text = f"machine: {ranks} ranks in the largest world on {cores} usable core(s)"
    if ranks > cores:
        text += " (oversubscribed: the figures include scheduling)"
    if len(probes) >= 2 and probes[0] > 0:
        change = 100.0 * (probes[-1] - probes[0]) / probes[0]
        text += (f"; CPU probe {probes[0] * 1e3:.3g} ms at the start, {probes[-1] * 1e3:.3g} ms "
                 f"at the end ({change:+.0f} %: the machine's own speed moved by that much)")
    return text


def _failed(distbench: Session, message: str) -> None:
    distbench.output_errors.append(message)


def _append(distbench: Session, document: dict[str, Any], path: Path, keep: int) -> None:
    """--distbench-append: this run added to the baseline's history (`keep` runs at most)."""
    from .results.document import ResultsFileError
    from .results.document.history import append_run

    try:
        distbench.notes.append(append_run(document, path, keep))
    except (OSError, ValueError, ResultsFileError) as exc:
        _failed(distbench, f"could not add this run to baseline {path}: {_why(exc, path)}")


def _why(exc: BaseException, path: Path) -> str:
    """An error's own words, less the file the line that quotes it names already."""
    from .results.document import ResultsFileError

    if isinstance(exc, ResultsFileError) and Path(exc.path) == Path(path):
        return exc.reason
    return str(exc)


def _write_plots(distbench: Session, document: dict[str, Any], out: Path,
                 baseline: dict[str, Any] | None) -> None:
    from .results.rendering.plot import PlotUnavailable, plot_comparison, plot_document

    try:
        written = plot_document(document, out)
        if baseline is not None and distbench.comparison is not None:
            written += plot_comparison(baseline, document, distbench.comparison, out)
    except (OSError, PlotUnavailable) as exc:
        _failed(distbench, f"could not write plots to {out}: {exc}")
        return
    names = ", ".join(r.path.name for r in written) or "none (no family here has a plot)"
    distbench.notes.append(f"distbench: wrote {len(written)} plot(s) to {out}: {names}")


def _write_markdown(distbench: Session, document: dict[str, Any], path: Path, *,
                    memory: bool = False, ab: str | None = None) -> None:
    from .results import document as storage
    from .results.rendering import markdown

    text = markdown.render(storage.records(document).values(),
                           document["distbench"]["environment"], distbench.comparison,
                           memory=memory, ab=ab)
    try:
        markdown.append(path, text)
    except OSError as exc:
        _failed(distbench, f"could not append markdown to {path}: {exc}")
        return
    distbench.written.add(path)
    distbench.notes.append(f"distbench: appended markdown tables to {path}")


def _write(distbench: Session, document: dict[str, Any], path: Path, *,
           overwrite: bool, what: str) -> None:
    from .results import document as storage

    existed = path.is_file()  # a device or a FIFO is written through, not replaced
    try:
        storage.write_document(document, path, overwrite=overwrite)
    except storage.ResultsFileExistsError:
        _failed(distbench, f"{what} {path} appeared during the run; not replaced "
                           "(pass --distbench-overwrite to replace it)")
        return
    except (OSError, storage.ResultsFileError) as exc:
        _failed(distbench, f"could not write {what} {path}: {_why(exc, path)}")
        return
    distbench.written.add(path)
    distbench.notes.append(f"distbench: {'replaced' if existed else 'wrote'} {what} {path}")
