"""The ``pytest-distbench`` command: compare, plot, export and read the history of stored runs
without starting any torch world (and capture a training launch's communication).

Exit status: 0 normally; 1 when --fail-on-regression finds a regression (compare, history) or
--strict finds that the runs come from different environments; 2 for bad input (missing,
damaged or foreign file, a file without a history for history, bad option), always as one
line on stderr, never a traceback; 128 + the signal's number after Ctrl-C (SIGINT), or SIGTERM
while a plot is written, in one line too.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from pytest_distbench.results.comparison.verdict import (
    DEFAULT_ALPHA,
    DEFAULT_THRESHOLD,
    METRICS,
    compare_documents,
    judged_count,
    speed_difference,
)
from pytest_distbench.results.document import nccl_tests
from pytest_distbench.results.document.io import (
    ResultsFileError,
    interrupting_signal,
    output_path_problem,
    read_document,
    write_output,
)
from pytest_distbench.results.rendering import export
from pytest_distbench.results.rendering.fit import printable
from pytest_distbench.results.rendering.report import FORMATS, render
from pytest_distbench.units import format_size, parse_fraction

PROG = "pytest-distbench"
PROGRESS_AFTER_S = 3.0  # a command that runs longer says what it is doing
PROGRESS_EVERY_S = 10.0  # how often the same step is said again where stderr is no terminal
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    # argparse prints the whole usage block before its error; CI logs want the one line.
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def _parse_fraction(text: str) -> float:
    """The plugin's own threshold syntax, as an argparse type."""
    try:
        return parse_fraction(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _parse_alpha(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"invalid alpha {text!r}: expected a number in (0, 1)")
    return value


def _build_parser() -> _Parser:
    parser = _Parser(prog=PROG, description="Work with pytest-distbench results files.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    compare = commands.add_parser(
        "compare",
        help="compare two or more results files",
        description=(
            "Compare results files benchmark by benchmark (matched by id). With two files: "
            "baseline then current. With more: every later file against the first."
        ),
    )
    compare.add_argument("files", nargs="+", metavar="FILE", help="results files (.json)")
    compare.add_argument("--format", choices=FORMATS, default="table", help="output format")
    compare.add_argument(
        "--metric",
        choices=METRICS,
        default="p50",
        help="statistic shown as the change (verdicts always use p50 and the raw samples)",
    )
    compare.add_argument(
        "--threshold",
        type=_parse_fraction,
        default=DEFAULT_THRESHOLD,
        help="slowdown beyond which a significant change is a regression: '10%%' or '0.1' "
        "(default 10%%; a benchmark's own threshold wins)",
    )
    compare.add_argument(
        "--alpha",
        type=_parse_alpha,
        default=DEFAULT_ALPHA,
        help="family-wise error rate: the chance that unchanged files read any regression; "
        "each benchmark judged is held to alpha / the benchmarks judged (Bonferroni; default "
        "%(default)s)",
    )
    compare.add_argument(
        "--fail-on-regression", action="store_true",
        help="exit 1 if any benchmark regressed (needs a baseline with 3+ stored runs: a "
        "slowdown against one stored run is 'slower, not gateable')"
    )
    compare.add_argument(
        "--strict",
        action="store_true",
        help="treat runs from different environments (torch, CPU, GPUs, ...) as an error",
    )
    _add_plot_command(commands)
    _add_history_command(commands)
    _add_export_command(commands)
    _add_capture_command(commands)
    return parser


def _parse_runs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"invalid count {text!r}: expected an integer >= 1")
    return value


def _add_history_command(commands: argparse._SubParsersAction) -> None:
    from pytest_distbench.results.comparison.series import RECENT_RUNS

    command = commands.add_parser(
        "history",
        help="a baseline's stored runs per benchmark: change points, environment changes, "
        "regressions",
        description=(
            "Per benchmark of a baseline made with --distbench-append: its runs, latest p50 "
            "and the median of its current segment, then each step: a change point (the run "
            "it started at, its date and commit, the medians before and after, the change, "
            "its p) or an environment change. A change point that starts the current segment, "
            "slower by more than --threshold, first shown within the newest --recent runs is a "
            "regression (docs/gating.md)."
        ),
    )
    command.add_argument("baseline", metavar="NAME|PATH",
                         help="a baseline: NAME is BASELINE_DIR/NAME.json, or a path")
    command.add_argument("--baseline-dir", default="baselines", metavar="DIR",
                         help="where a NAME is looked up (default: %(default)s)")
    command.add_argument("--format", choices=("text", "json"), default="text",
                         help="output format")
    command.add_argument("--threshold", type=_parse_fraction, default=DEFAULT_THRESHOLD,
                         help="slowdown beyond which a change point is a regression: '10%%' or "
                         "'0.1' (default 10%%)")
    command.add_argument("--recent", type=_parse_runs, default=RECENT_RUNS, metavar="N",
                         help="a step is a regression for this many runs after the history "
                         "first shows it (default %(default)s)")
    command.add_argument("--fail-on-regression", action="store_true",
                         help="exit 1 if any benchmark has a regression (a nightly job's check)")
    command.add_argument("--plot", metavar="DIR", default=None,
                         help="also draw one PNG per benchmark to DIR (needs matplotlib)")


def _add_export_command(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser(
        "export",
        help="a results file as github-action-benchmark's or Bencher's input, for their charts",
        description=(
            "Write each benchmark's headline and its 95 % interval in a CI tracker's format "
            "(docs/ci.md): github-action-benchmark: its customSmallerIsBetter list (the p50, "
            "us); github-action-benchmark-bigger: its customBiggerIsBetter list (a rate's "
            "messages/s, else the bus bandwidth, GB/s); bencher: Bencher Metric Format "
            "(latency in ns, busbw-gbps, throughput). Invalid and incomplete records are left "
            "out, and counted on stderr."
        ),
    )
    command.add_argument("file", metavar="RESULTS",
                         help="a results file or a baseline (.json)")
    command.add_argument("--format", required=True, choices=export.FORMATS,
                         help="the tracker's format")
    command.add_argument("-o", "--output", metavar="PATH", default=None,
                         help="the file to write (replaced atomically; default: standard output)")


def _parse_steps(text: str) -> list[int]:
    try:
        steps = sorted({int(s) for s in text.split(",") if s.strip()})
    except ValueError:
        steps = []
    if not steps or steps[0] < 0:
        raise argparse.ArgumentTypeError(f"invalid steps {text!r}: expected step indices "
                                         "such as 1,2")
    return steps


def _add_capture_command(commands: argparse._SubParsersAction) -> None:
    capture = commands.add_parser(
        "capture",
        help="run a training launch and record every rank's communication as a trace",
        description=(
            "Run LAUNCH (torchrun ..., python ...) with every rank recording its collective "
            "and point-to-point calls from the moment it initializes its process group "
            "(docs/replay.md). Steps end at each optimizer.step(). Replay the trace with "
            "pytest --distbench --distbench-replay=DIR."
        ),
    )
    capture.add_argument("--out", required=True, metavar="DIR",
                         help="the trace directory to write (refused if it holds a trace)")
    capture.add_argument("--steps", type=_parse_steps, default=None, metavar="I,J",
                         help="the step indices to keep, from 0 (default: every step; 1,2 "
                         "skips the first, which warms up)")
    capture.add_argument("--from-profiler", nargs="+", default=None, metavar="FILE",
                         help="instead of a launch: turn torch.profiler Chrome traces (one "
                         "JSON file per rank, from export_chrome_trace) into the trace")
    capture.add_argument("launch", nargs=argparse.REMAINDER, metavar="-- LAUNCH ...",
                         help="the command that starts the ranks, after --")


def _add_plot_command(commands: argparse._SubParsersAction) -> None:
    plot = commands.add_parser(
        "plot",
        help="draw PNG plots of a results file, or of a comparison of two",
        description=(
            "With one file: one PNG per family and sweep (the same as --distbench-plot). "
            "With two (baseline then current): comparison.png, the current/baseline p50 ratio "
            "of every benchmark with its 95 % interval, coloured by verdict. Needs matplotlib: "
            "pip install \"pytest-distbench[plot]\"."
        ),
    )
    plot.add_argument("files", nargs="+", metavar="FILE", help="one or two results files (.json)")
    plot.add_argument("--out", required=True, metavar="DIR", help="directory for the PNG files")
    plot.add_argument("--threshold", type=_parse_fraction, default=DEFAULT_THRESHOLD,
                      help="comparison: regression threshold, as for compare (default 10%%)")
    plot.add_argument("--alpha", type=_parse_alpha, default=DEFAULT_ALPHA,
                      help="comparison: significance level, as for compare")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command not in ("compare", "plot", "export", "capture", "history"):
        parser.print_usage(sys.stderr)
        return EXIT_USAGE
    if args.command == "capture":
        return _capture(args)
    if args.command == "export":  # reads no family's tables: no family warnings
        try:
            return _export(args)
        except BrokenPipeError:
            sys.stderr.close()
            return EXIT_OK
    from pytest_distbench.registry import family_problems

    for line in family_problems():  # its tables and plots are missing from what follows
        print(f"{PROG}: WARNING: {line}", file=sys.stderr)
    try:
        return {"compare": _compare, "plot": _plot, "history": _history}[args.command](args)
    except BrokenPipeError:
        # Output piped into `head` and friends: not an error worth a traceback.
        sys.stderr.close()
        return EXIT_OK
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM while a plot was written
        signum = interrupting_signal(exc)
        _error(f"interrupted ({signum.name}): each file written is whole, no temporary file "
               "is left")
        return 128 + signum


class _Progress:
    """What a long command is doing, on stderr, once it has run PROGRESS_AFTER_S: a line that
    rewrites itself on a terminal; elsewhere (a CI log) a line per step and, within a long
    step, one every PROGRESS_EVERY_S. A thread of its own says it: reading one large file is
    a single call."""

    def __init__(self) -> None:
        self._began = time.monotonic()
        self._step, self._count = "", ""
        self._said = ("", -math.inf)  # the last step said, and when
        self._stop = threading.Event()
        self._tty = sys.stderr.isatty()
        self._thread = threading.Thread(target=self._run, name="distbench-progress", daemon=True)
        self._thread.start()

    def doing(self, step: str, count: str = "") -> None:
        self._step, self._count = step, count

    def _run(self) -> None:
        if self._stop.wait(PROGRESS_AFTER_S):
            return
        while True:
            self._say()
            if self._stop.wait(0.5):
                return

    def _say(self) -> None:
        step, count, now = self._step, self._count, time.monotonic()
        if not self._tty and step == self._said[0] and now - self._said[1] < PROGRESS_EVERY_S:
            return
        line = f"{PROG}: {step}{': ' + count if count else ''} ({now - self._began:.0f} s so far)"
        sys.stderr.write(f"\r{line[:119]:<119}" if self._tty else line + "\n")
        sys.stderr.flush()
        self._said = (step, now)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        if self._tty and self._said[0]:
            sys.stderr.write("\r" + " " * 119 + "\r")  # the result follows on a clean line
            sys.stderr.flush()


def _read_documents(files: list[str], progress: _Progress | None = None
                    ) -> list[dict[str, Any]] | None:
    """Every file read and validated, or None after one error line naming the bad file."""
    docs = []
    for name in files:
        if progress is not None:
            progress.doing(f"reading and checking {name} ({_size_of(name)})")
        try:
            docs.append(read_document(name))
        except ResultsFileError as exc:
            _error(str(exc))
            return None
        described = nccl_tests.describe(docs[-1])
        if described:  # which of nccl-tests' two timings stands beside the plugin's figures
            print(f"{PROG}: {name}: {described}", file=sys.stderr)
    return docs


def _size_of(name: str) -> str:
    try:
        return format_size(os.stat(name).st_size)
    except OSError:
        return "size unknown"


def _compare(args: argparse.Namespace) -> int:
    if len(args.files) < 2:
        _error(f"compare needs at least two files, got {len(args.files)}")
        return EXIT_USAGE
    progress = _Progress()
    try:
        docs = _read_documents(args.files, progress)
        if docs is None:
            return EXIT_USAGE
        labels = _labels(args.files)
        # One family: every verdict the command gives can fail it (--fail-on-regression).
        family = sum(judged_count(docs[0], doc) for doc in docs[1:])
        comparisons = []
        for doc, label in zip(docs[1:], labels[1:], strict=True):
            def judged(done: int, total: int, label: str = label) -> None:
                progress.doing(f"comparing {label} with {labels[0]}",
                               f"{done:,} of {total:,} benchmarks")

            comparisons.append(compare_documents(
                docs[0], doc, threshold=args.threshold, metric=args.metric, alpha=args.alpha,
                baseline_label=labels[0], current_label=label, progress=judged,
                family=family))
        progress.doing(f"writing the {args.format}")
        text = render(comparisons, args.format)
    finally:
        progress.close()
    sys.stdout.write(text)
    sys.stdout.flush()

    status = EXIT_OK
    for comparison in comparisons:
        if not comparison.fingerprint_differences:
            continue
        lead = "error" if args.strict else "WARNING"
        _note(f"{PROG}: {lead}: {comparison.baseline_label} and {comparison.current_label} were "
              "measured in different environments; differences may not come from code changes:")
        for line in comparison.fingerprint_differences:
            _note(f"  {line}", indent="    ")
        if args.strict:
            status = EXIT_FAILED

    for doc, label in zip(docs[1:], labels[1:], strict=True):
        speed = speed_difference(docs[0]["distbench"]["environment"],
                                 doc["distbench"]["environment"])
        if speed:
            _note(f"{PROG}: WARNING: {label}: {speed}")

    if args.fail_on_regression:
        regressed = [(c.current_label, v) for c in comparisons for v in c.regressions]
        if regressed:
            names = ", ".join(f"{v.name} ({v.change * 100:+.1f}%)" for _, v in regressed[:10])
            more = f" and {len(regressed) - 10} more" if len(regressed) > 10 else ""
            _error(f"{len(regressed)} regression(s): {names}{more}")
            status = EXIT_FAILED
        ungated = sum(len(c.of_kind("slower")) for c in comparisons)
        if ungated and not regressed:
            print(f"{PROG}: --fail-on-regression: {ungated} benchmark(s) slower, but not "
                  "gateable (not shown beyond the threshold, or against one stored run): "
                  "nothing failed (docs/gating.md)", file=sys.stderr)
    return status


def _plot(args: argparse.Namespace) -> int:
    from pytest_distbench.results.rendering import plot

    if len(args.files) > 2:
        _error(f"plot takes one results file, or two to compare; got {len(args.files)}")
        return EXIT_USAGE
    if not plot.matplotlib_available():
        _error(plot.MISSING_MATPLOTLIB)
        return EXIT_USAGE
    problem = output_path_problem(args.out, directory=True)
    if problem:
        _error(f"--out {args.out!r} {problem}")
        return EXIT_USAGE
    docs = _read_documents(args.files)
    if docs is None:
        return EXIT_USAGE
    try:
        if len(docs) == 1:
            written = plot.plot_document(docs[0], args.out)
        else:
            labels = _labels(args.files)
            docs = list(nccl_tests.aligned(docs[0], docs[1]))
            comparison = compare_documents(docs[0], docs[1], threshold=args.threshold,
                                           alpha=args.alpha, baseline_label=labels[0],
                                           current_label=labels[1])
            written = plot.plot_comparison(docs[0], docs[1], comparison, args.out)
    except OSError as exc:
        _error(f"--out {args.out}: {exc}")
        return EXIT_USAGE
    for rendered in written:
        print(f"wrote {rendered.path}  ({printable(rendered.title)})")
    if not written:
        print(f"{PROG}: no benchmark in {args.files[0]} has a plot", file=sys.stderr)
    return EXIT_OK


def _history(args: argparse.Namespace) -> int:
    from pytest_distbench.results.document.io import resolve_baseline

    try:
        path = resolve_baseline(args.baseline, Path(args.baseline_dir))
    except ValueError as exc:
        _error(str(exc))
        return EXIT_USAGE
    if args.plot is not None:
        from pytest_distbench.results.rendering import plot

        problem = (plot.MISSING_MATPLOTLIB if not plot.matplotlib_available()
                   else output_path_problem(args.plot, directory=True))
        if problem:
            _error(f"--plot {args.plot!r}: {problem}")
            return EXIT_USAGE
    docs = _read_documents([str(path)])
    if docs is None:
        return EXIT_USAGE
    from pytest_distbench.results.comparison.series import read_history

    history = read_history(docs[0], str(path), args.threshold, args.recent)
    if history is None:
        _error(f"{path}: no stored history (distbench.history): one run, not a series; a "
               "baseline gets one with --distbench-save=NAME --distbench-append")
        return EXIT_USAGE
    from pytest_distbench.results.rendering.history_report import render_json, render_text

    sys.stdout.write(render_json(history) if args.format == "json" else render_text(history))
    sys.stdout.flush()
    if args.plot is not None:
        from pytest_distbench.results.rendering.history_plot import plot_history

        try:
            written = plot_history(history, args.plot)
        except OSError as exc:
            _error(f"--plot {args.plot}: {exc}")
            return EXIT_USAGE
        print(f"{PROG}: wrote {len(written)} plot(s) to {args.plot}", file=sys.stderr)
    regressions = history.regressions()
    if args.fail_on_regression and regressions:
        _error(f"--fail-on-regression: {len(regressions)} benchmark(s) with a regression "
               "(above)")
        return EXIT_FAILED
    return EXIT_OK


def _export(args: argparse.Namespace) -> int:
    problem = args.output is not None and output_path_problem(args.output)
    if args.output is not None and os.path.realpath(args.output) == os.path.realpath(args.file):
        problem = "is the results file itself (it would be replaced by the export)"
    if problem:
        _error(f"-o {args.output!r} {problem}")
        return EXIT_USAGE
    docs = _read_documents([args.file])
    if docs is None:
        return EXIT_USAGE
    done = export.export(docs[0], args.format)
    if args.output is None:
        sys.stdout.write(done.text)
        sys.stdout.flush()
    else:
        try:
            write_output(args.output, done.text.encode("utf-8"))
        except OSError as exc:
            _error(f"-o {args.output}: cannot write: {exc.strerror or exc}")
            return EXIT_USAGE
        print(f"wrote {args.output}: {done.written} benchmark(s), {args.format}")
    for line in _export_notes(done, args.format, len(docs[0]["benchmarks"])):
        print(f"{PROG}: export: {line}", file=sys.stderr)
    return EXIT_OK


def _note(line: str, indent: str = "  ") -> None:
    """A line on stderr, wrapped to a terminal's 120 columns (the machine-speed warning was
    200 wide)."""
    from .results.rendering.fit import wrap

    for part in wrap(line, indent=indent):
        print(part, file=sys.stderr)


def _export_notes(done: export.Export, fmt: str, total: int) -> list[str]:
    """What the exported file does not hold, and where it is: one line each, 120 columns
    at most."""
    notes = []
    if done.left_out:
        reasons = ", ".join(f"{count} {why}" for why, count in sorted(done.left_out.items()))
        notes.append(f"left out {sum(done.left_out.values())} of {total} benchmark(s): "
                     f"{reasons}")
    if done.elsewhere and fmt == export.SMALLER:
        notes.append(f"{done.elsewhere} rate benchmark(s) (bigger is better) are in "
                     f"--format {export.BIGGER}")
    elif done.elsewhere:
        notes.append(f"{done.elsewhere} without a rate or busbw: their p50 is in --format "
                     f"{export.SMALLER}")
    if not done.written and fmt != export.BENCHER:
        notes.append("WARNING: nothing to chart: github-action-benchmark refuses an empty list")
    return notes


def _capture(args: argparse.Namespace) -> int:
    launch = args.launch[1:] if args.launch[:1] == ["--"] else args.launch
    from pytest_distbench.families.replay.command import from_profiler, run

    if args.from_profiler is not None:
        if launch:
            _error("capture: give either --from-profiler FILE... or a launch after --, not both")
            return EXIT_USAGE
        code, line = from_profiler(args.out, args.steps, args.from_profiler)
    elif not launch:
        _error("capture: give the launch after --, e.g. -- torchrun --nproc-per-node=2 "
               "train.py (or --from-profiler FILE...)")
        return EXIT_USAGE
    else:
        code, line = run(args.out, args.steps, launch)
    if code:
        _error(f"capture: {line}")
    else:
        print(f"{PROG}: {line}")
    return code


def _labels(files: Sequence[str]) -> list[str]:
    # File stems read best in headers; fall back to the paths as given when stems collide.
    stems = [Path(f).stem for f in files]
    return stems if len(set(stems)) == len(stems) else list(files)


def _error(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
