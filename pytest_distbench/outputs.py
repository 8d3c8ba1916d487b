"""The end of a session: the results document, and every file and summary made from it.

One place builds the document (records, environment, command line) and writes what was asked
for: the results file, the baseline (or a run added to its history), plots, markdown, the
tables in the terminal, and each test's figures on its `-v` line and in JUnit. A requested
file that could not be written fails the session: a green run with its results lost is a
lie.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from . import gating
from .harness.physical import measured_bounds
from .harness.session import Session

HEADLINE_KEY = pytest.StashKey[str]()


def add_options(group: Any) -> None:
    group.addoption("--distbench-json", metavar="PATH", default=None,
                    help="write every benchmark's parameters, environment, summaries and raw "
                         "samples to PATH (atomic write)")
    group.addoption("--distbench-plot", metavar="DIR", default=None,
                    help="at the end of the session write one PNG plot per family and sweep "
                         "to DIR (needs matplotlib: pip install 'pytest-distbench[plot]')")
    group.addoption("--distbench-markdown", metavar="PATH", default=None,
                    help="append the result tables (and the comparison) as GitHub markdown "
                         "to PATH, e.g. \"$GITHUB_STEP_SUMMARY\"")
    group.addoption("--distbench-gpu-memory", action="store_true", default=False,
                    help="show each rank's peak GPU memory (allocated and reserved by the "
                         "caching allocator) beside its peak RSS in the result tables; every "
                         "CUDA record stores them either way")


def configure(config: pytest.Config) -> None:
    """Refuse a plot request without matplotlib now, not after an hour of benchmarks."""
    if config.getoption("distbench_plot"):
        from .results.rendering.plot import MISSING_MATPLOTLIB, matplotlib_available

        if not matplotlib_available():
            raise pytest.UsageError(f"--distbench-plot: {MISSING_MATPLOTLIB}")


# -- per test ----------------------------------------------------------------------------------

def report_figures(item: pytest.Function, records: list[dict[str, Any]],
                   verdicts: dict[str, Any]) -> None:
    """JUnit properties of the test, and the figures its `-v` line ends with."""
    from .results.rendering.junit import properties
    from .results.rendering.plot_spec import headline

    item.user_properties.extend(properties(records, verdicts))
    text = headline(records)
    if text:
        item.stash[HEADLINE_KEY] = text


def after_test(item: pytest.Function, records: list[dict[str, Any]], resolved: Any) -> None:
    """The gate's verdicts, the test's figures (-v, JUnit), and a failure per regression."""
    from .collection import requested_sizes

    requested = requested_sizes(item)
    if requested:
        for record in records:
            record["requested_nbytes"] = requested
    verdicts, failures = gating.judge(item, records, resolved.threshold)
    report_figures(item, records, verdicts)
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)


def headline_of(item: pytest.Item) -> str | None:
    return item.stash.get(HEADLINE_KEY, None)


# -- the end of the session --------------------------------------------------------------------

def finish(config: pytest.Config, distbench: Session) -> bool:
    """Build the document and write every requested output; False when one was not written."""
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
    document = storage.make_document(distbench.records, environment, list(sys.argv))
    json_path = config.getoption("distbench_json")
    if json_path:
        _write(distbench, document, Path(json_path), overwrite=True, what="results file")
    save_path = gating.save_path(config)
    if save_path is not None and config.getoption("distbench_append"):
        _append(distbench, document, save_path)
    elif save_path is not None:
        _write(distbench, document, save_path, overwrite=config.getoption("distbench_overwrite"),
               what="baseline")
    gate_document = gating.compare_run(config, distbench, document)
    plot_dir = config.getoption("distbench_plot")
    if plot_dir:
        _write_plots(distbench, document, Path(plot_dir), gate_document)
    markdown_path = config.getoption("distbench_markdown")
    if markdown_path:
        _write_markdown(distbench, document, Path(markdown_path),
                        memory=config.getoption("distbench_gpu_memory"))
    return not distbench.output_errors


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
        tr.line(line, **markup)


def terminal_summary(tr: Any, config: pytest.Config, distbench: Session) -> None:
    if distbench.records:
        from .results.rendering.table import LEGEND, render_tables

        tr.section("distbench results")
        write_lines(tr, LEGEND)
        tr.line("")
        tr.line(render_tables(distbench.records,
                              memory=config.getoption("distbench_gpu_memory"),
                              details=config.get_verbosity() >= 1))
    if distbench.world_starts:
        tr.line("")
        write_lines(tr, f"worlds started: {world_starts_line(distbench.world_starts)}")
    if distbench.comparison is not None:
        from .results.rendering.report import render

        tr.section("distbench comparison")
        tr.line(render(distbench.comparison, "table").rstrip("\n"))
    for line in gating.warnings(config):
        write_lines(tr, line, yellow=True, bold=True)
    for line in distbench.notes:
        write_lines(tr, line)
    for line in distbench.output_errors:
        write_lines(tr, f"distbench: ERROR: {line}", red=True, bold=True)


def _failed(distbench: Session, message: str) -> None:
    distbench.output_errors.append(message)


def _append(distbench: Session, document: dict[str, Any], path: Path) -> None:
    """--distbench-append: this run added to the baseline's history."""
    from .results.document.history import append_run

    try:
        distbench.notes.append(append_run(document, path))
    except (OSError, ValueError) as exc:
        _failed(distbench, f"could not add this run to baseline {path}: {exc}")


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
                    memory: bool = False) -> None:
    from .results import document as storage
    from .results.rendering import markdown

    text = markdown.render(storage.records(document).values(),
                           document["distbench"]["environment"], distbench.comparison,
                           memory=memory)
    try:
        markdown.append(path, text)
    except OSError as exc:
        _failed(distbench, f"could not append markdown to {path}: {exc}")
        return
    distbench.notes.append(f"distbench: appended markdown tables to {path}")


def _write(distbench: Session, document: dict[str, Any], path: Path, *,
           overwrite: bool, what: str) -> None:
    from .results import document as storage

    existed = path.exists()
    try:
        storage.write_document(document, path, overwrite=overwrite)
    except storage.ResultsFileExistsError:
        _failed(distbench, f"{what} {path} appeared during the run; not replaced "
                           "(pass --distbench-overwrite to replace it)")
        return
    except (OSError, storage.ResultsFileError) as exc:
        _failed(distbench, f"could not write {what} {path}: {exc}")
        return
    distbench.notes.append(f"distbench: {'replaced' if existed else 'wrote'} {what} {path}")
