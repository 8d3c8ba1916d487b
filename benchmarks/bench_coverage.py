"""Coverage of the printed 95 % intervals within one session: precision-targeted runs of a
point at the product's defaults against long fixed-budget runs of the same point in the same
world, minutes apart at most.

The ± the product prints (a record's `p50_ci`, or a rate's `figures.msgs_per_s_ci_*`) is the
interval of the point's value in this session: the run's sampling interval widened by the
run-to-run noise the session measured by revisiting points (statistics/noise.py). This
measures whether it keeps that promise. Per point, one session runs LONG, then TARGETED x
REPEATS, then LONG again (each a test of its own in one world); the long-run value is the
headline of the two long runs' samples pooled (p50, or for a rate the total messages / total
time), and a targeted run covers it when its printed interval contains it. Beside it, the
run's own sampling interval (`sampling_ci`, `figures.sampling_rate_ci`: the ± printed before
issue 34) judged the same way. A second session runs a collective at world size 8.
bench_precision.py measures the same across sessions, which the ± does not promise.

    python benchmarks/bench_coverage.py [--repeats 10] [--long-budget 5s] [--no-world-size-8]
        [--keep DIR]     # each session's results file kept as DIR/ws2.json, DIR/ws8.json
        [--read DIR]     # judge the results files kept there instead of running sessions

After the tables, the reference and the bound: the printed ± judged against the median of
each point's targeted runs (the session value its headline is), and what a ± of exactly 1x
and 2x each point's own needed ± (known in hindsight) would cover of the long-run value:
where 2x covers under 90 %, issue 38's two goals (90 % covered, at most twice as wide as the
point needed) cannot both hold against that reference in that session. Then the shape of the
noise: how far apart a point's runs land, by how many runs apart they ran (median and root mean
square of |log ratio|, pooled over the points), and where the long runs landed against the
median of the targeted ones.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pytest_distbench.results.statistics.interval import half_width_pct
from pytest_distbench.settings import BY_NAME

# The targeted runs run at the product's defaults (--distbench-budget, --distbench-precision).
DEFAULT_BUDGET = BY_NAME["budget"].default
DEFAULT_PRECISION = BY_NAME["precision"].default

# (family, label, call): the same families' harnesses the built-in suites call.
POINTS = [
    ("collectives", "all_reduce 1 KiB",
     'run_collective(distbench, COLLECTIVES["all_reduce"], 1024)'),
    ("collectives", "all_reduce 1 MiB",
     'run_collective(distbench, COLLECTIVES["all_reduce"], 1 << 20)'),
    ("collectives", "all_gather 64 KiB",
     'run_collective(distbench, COLLECTIVES["all_gather"], 65536)'),
    ("p2p", "p2p_latency 1 KiB", 'run_p2p(distbench, P2P["p2p_latency"], 1024)'),
    ("p2p", "p2p_bandwidth 64 KiB", 'run_p2p(distbench, P2P["p2p_bandwidth"], 65536, 64)'),
    ("message_rate", "message_rate 1 KiB c1",
     'run_message_rate(distbench, "client_to_computation", 1, 1024)'),
    ("rpc", "rpc_latency 4 B", "run_latency(distbench, rpc_agent, 4)"),
]
# The second session's points, at world size 8.
POINTS_WS8 = [
    ("collectives", "all_reduce 64 KiB",
     'run_collective(distbench, COLLECTIVES["all_reduce"], 65536)'),
]
FAMILIES = ("collectives", "p2p", "message_rate", "rpc")

TEMPLATE = '''
import pytest
from pytest_distbench.families.collectives.members import COLLECTIVES, run_collective
from pytest_distbench.families.message_rate.loop import run_message_rate
from pytest_distbench.families.p2p.members import P2P, run_p2p
from pytest_distbench.families.rpc.latency import run_latency

LONG = pytest.mark.distbench(precision="off", budget="{long_budget}")
TARGETED = pytest.mark.distbench(precision="{precision}", budget="{budget}")
'''

TEST = '''

@pytest.mark.parametrize("run", [pytest.param("long-0", marks=LONG)]
                         + [pytest.param(f"targeted-{{i}}", marks=TARGETED)
                            for i in range({repeats})]
                         + [pytest.param("long-1", marks=LONG)])
def test_point_{index}(distbench, {fixtures}run):
    {call}
'''

NO_NOISE = ("no record of the {what} session has p50_ci.run_noise: the "
            "session measured no run-to-run noise, so the printed interval is not the session "
            "interval (are the harness's revisits plumbed in?)")


def suite_text(points: list[tuple[str, str, str]], args: argparse.Namespace,
               repeats: int) -> str:
    text = TEMPLATE.format(long_budget=args.long_budget, precision=args.precision,
                           budget=args.budget)
    for index, (_, _, call) in enumerate(points):
        fixtures = "rpc_agent, " if "rpc_agent" in call else ""
        text += TEST.format(index=index, fixtures=fixtures, call=call, repeats=repeats)
    return textwrap.dedent(text)


def run_points(suite: str, world_size: int, keep: Path | None = None) -> list[dict] | None:
    """Run a generated suite in one session (one world per size) and return its records in
    run order, or None (the session's output printed) if it failed; with `keep`, its results
    file is copied there as ws{world_size}.json."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "test_generated_points.py"
        path.write_text(suite)
        out = Path(tmp) / "records.json"
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path),
             "--distbench", f"--world-size={world_size}", f"--distbench-json={out}"],
            capture_output=True, text=True, cwd=tmp)
        if done.returncode != 0:
            print(done.stdout[-4000:], done.stderr[-2000:])
            return None
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(out, kept_file(keep, world_size))
        return read_points(out)


def kept_file(folder: Path, world_size: int) -> Path:
    """Where --keep puts a session's results file and --read finds it."""
    return folder / f"ws{world_size}.json"


def read_points(path: Path) -> list[dict]:
    """The records of a results file, in run order."""
    return [b["distbench"] for b in json.loads(path.read_text())["benchmarks"]]


# -- reading a record --------------------------------------------------------------------------

def kind_of(records: list[dict]) -> str:
    """The statistic whose ± the product prints for these runs of one point: the one its
    precision target applies to, "p50" (the time) or "mean" (a rate over the timed region:
    p2p bandwidth, message rate)."""
    for record in records:
        statistic = (record.get("precision") or {}).get("statistic")
        if statistic:
            return statistic
    return "p50"


def figure(record: dict, kind: str) -> float:
    """The run's headline: its rate, or its p50 time."""
    return record["figures"]["msgs_per_s"] if kind == "mean" else record["summary"]["p50"]


def headline(records: list[dict], kind: str) -> float:
    """The long-run value of the runs: their samples' pooled p50, or for a rate the total
    messages over the total time."""
    if kind == "p50":
        return statistics.median(x for r in records for x in r["samples"])
    messages = sum(r["figures"]["total_messages"] for r in records)
    seconds = sum(r["figures"]["total_s"] for r in records)
    return messages / seconds


def _bounds(low: float | None, high: float | None) -> tuple[float, float] | None:
    return None if low is None or high is None else (low, high)


def interval(record: dict, kind: str) -> tuple[float, float] | None:
    """The interval the product prints for the record's headline."""
    ci = record.get("rate_ci" if kind == "mean" else "p50_ci") or {}
    return _bounds(ci.get("low"), ci.get("high"))


def sampling_interval(record: dict, kind: str) -> tuple[float, float] | None:
    """The run's own sampling interval of its headline (what it printed before issue 34)."""
    if kind == "mean":
        f = record.get("figures") or {}
        return _bounds(f.get("msgs_per_s_ci_low"), f.get("msgs_per_s_ci_high"))
    own = record.get("sampling_ci") or {}
    return _bounds(own.get("low"), own.get("high"))


def missing_noise(records: list[dict], what: str) -> str | None:
    """The error to stop on when no record of a session carries its run-to-run noise."""
    if any((r.get("p50_ci") or {}).get("run_noise") for r in records):
        return None
    return NO_NOISE.format(what=what)


def noise_groups(records: Iterable[dict]) -> dict[str, list[float]]:
    """The run-to-run noise (95 %, noise alone, percent) each session measured per group, as
    its records carry it: one entry per session and group."""
    seen: dict[str, dict[tuple, float]] = {}
    for record in records:
        noise = (record.get("p50_ci") or {}).get("run_noise")
        if noise:
            # Every record of one session's group carries the same figures.
            key = (noise["sd_log"], noise["dof"], noise["runs"])
            seen.setdefault(noise["group"], {})[key] = noise["half_width_pct"]
    return {group: sorted(values.values()) for group, values in seen.items()}


# -- judging -----------------------------------------------------------------------------------

@dataclass
class Tally:
    """How often one interval covered the long-run value, and how wide it was."""

    covered: int = 0
    total: int = 0
    widths: list[float] = field(default_factory=list)

    def judge(self, bounds: tuple[float, float] | None, value: float, centre: float) -> None:
        """A run without an interval counts as a miss: it promised nothing."""
        self.total += 1
        if bounds is None:
            return
        self.covered += bounds[0] <= value <= bounds[1]
        width = half_width_pct(bounds[0], bounds[1], centre)
        if width is not None:
            self.widths.append(width)

    def add(self, other: Tally) -> None:
        self.covered += other.covered
        self.total += other.total
        self.widths += other.widths

    def text(self) -> str:
        share = f"({self.covered / self.total:.0%})" if self.total else "-"
        width = f"± {statistics.median(self.widths):.1f} %" if self.widths else "-"
        return f"{self.covered:>3}/{self.total:<3} {share:>6} {width:>10}"


# Multiples of a point's own needed ± (known only in hindsight, from all its runs) judged as
# if each run had printed them: the coverage no model within that width of every point could
# beat against the same reference.
HINDSIGHT = (1.0, 2.0)


@dataclass
class Judged:
    """A point's runs judged: the printed interval and, beside it, the sampling one; then the
    printed one against the median of the point's runs (the session value its headline is),
    and HINDSIGHT multiples of the point's needed ± against the long-run value."""

    printed: Tally = field(default_factory=Tally)
    sampling: Tally = field(default_factory=Tally)
    at_median: Tally = field(default_factory=Tally)
    hindsight: dict[float, Tally] = field(
        default_factory=lambda: {multiple: Tally() for multiple in HINDSIGHT})

    def add(self, other: Judged) -> None:
        self.printed.add(other.printed)
        self.sampling.add(other.sampling)
        self.at_median.add(other.at_median)
        for multiple, tally in other.hindsight.items():
            self.hindsight[multiple].add(tally)


def judge(runs: list[dict], value: float, kind: str) -> Judged:
    judged = Judged()
    figures = [figure(record, kind) for record in runs]
    centre_of_runs = statistics.median(figures)
    need = needed(figures) / 100
    for record, centre in zip(runs, figures, strict=True):
        printed = interval(record, kind)
        judged.printed.judge(printed, value, centre)
        judged.sampling.judge(sampling_interval(record, kind), value, centre)
        judged.at_median.judge(printed, centre_of_runs, centre)
        for multiple, tally in judged.hindsight.items():
            half = multiple * need * centre
            tally.judge((centre - half, centre + half), value, centre)
    return judged


def needed(values: list[float]) -> float:
    """The half-width (percent) the point needed: the 90th percentile of |run / median of its
    runs - 1| over its runs in the session (issue 38's measure of "as narrow as it allows")."""
    centre = statistics.median(values)
    gaps = sorted(abs(v / centre - 1) * 100 for v in values)
    return gaps[min(len(gaps) - 1, math.ceil(0.9 * len(gaps)) - 1)]


def print_families(by_family: dict[str, Judged], heading: str) -> None:
    """Per family and overall: covered/total, percent and the median half-width of the
    printed interval, and of the runs' own sampling interval beside it."""
    print(f"\n{heading}")
    print(f"  {'family':14} {'printed ± (session interval)':>30}   "
          f"{'before: its sampling ±':>30}")
    overall = Judged()
    order = [f for f in FAMILIES if f in by_family] + sorted(set(by_family) - set(FAMILIES))
    for family in order:
        judged = by_family[family]
        overall.add(judged)
        print(f"  {family:14} {judged.printed.text():>30}   {judged.sampling.text():>30}")
    print(f"  {'overall':14} {overall.printed.text():>30}   {overall.sampling.text():>30}")


def print_bound(by_family: dict[str, Judged]) -> None:
    """Per family: the printed ± against the median of each point's runs, and what a ± of
    exactly 1x and 2x each point's own needed ± would have covered of the long-run value. Where
    2x covers under 90 %, no interval at most twice as wide as its point needed can cover 90 %
    of that reference: the long runs sit off the targeted ones."""
    print("\nthe reference and the bound: the printed ± against the median of the point's runs;\n"
          "a ± of 1x and 2x each point's needed ± (hindsight) against the long-run value")
    print(f"  {'family':14} {'printed ± vs runs median':>30}   "
          + "   ".join(f"{f'{m:g}x needed vs long run':>30}" for m in HINDSIGHT))
    order = [f for f in FAMILIES if f in by_family] + sorted(set(by_family) - set(FAMILIES))
    for family in order:
        judged = by_family[family]
        print(f"  {family:14} {judged.at_median.text():>30}   "
              + "   ".join(f"{judged.hindsight[m].text():>30}" for m in HINDSIGHT))


def print_noise(records: Iterable[dict]) -> None:
    groups = noise_groups(records)
    if groups:
        print("\nrun-to-run noise the session(s) measured (95 %, the noise alone), per group:")
    for group, pcts in sorted(groups.items()):
        spread = f" (median of {len(pcts)} sessions: {pcts[0]:.1f}-{pcts[-1]:.1f} %)"
        print(f"  {group:32} ± {statistics.median(pcts):.1f} %" + (spread if len(pcts) > 1
                                                                    else ""))


@dataclass
class Shape:
    """One point's targeted runs (their headlines, in run order) and its two long runs'."""

    label: str
    runs: list[float]
    longs: tuple[float, float]


LAGS = (1, 2, 3, 5, 7, 9)


def print_shape(shapes: list[Shape]) -> None:
    """How far apart runs of one point land by how many runs apart they ran (a noise that
    drifts grows with the lag, one with a heavy tail has a root mean square far above its
    median), and where the long runs landed against the targeted runs' median."""
    print("\nthe shape of the noise: 100 x |log ratio| of two targeted runs of one point,\n"
          "by how many runs apart they ran (pooled over the points)")
    for lag in LAGS:
        gaps = [100 * abs(math.log(s.runs[i + lag] / s.runs[i])) for s in shapes
                for i in range(len(s.runs) - lag)]
        if gaps:
            rms = math.sqrt(statistics.fmean(g * g for g in gaps))
            print(f"  {lag} apart: median {statistics.median(gaps):5.1f}, root mean square "
                  f"{rms:5.1f} ({len(gaps)} pairs)")
    print("the long runs over the median of the targeted runs (first, last):")
    for shape in shapes:
        centre = statistics.median(shape.runs)
        print(f"  {shape.label:26} {shape.longs[0] / centre:6.3f} {shape.longs[1] / centre:6.3f}")


# -- the session -------------------------------------------------------------------------------

def measure(points: list[tuple[str, str, str]], args: argparse.Namespace, world_size: int,
            repeats: int) -> tuple[list[dict], dict[str, Judged], list[Shape]] | str:
    """Run one session of `points` and print its table; its records, the points judged
    by family and their runs' shapes, or the error to stop on."""
    what = f"world size {world_size}"
    if args.read is not None:
        kept = kept_file(args.read, world_size)
        if not kept.is_file():
            return f"bench_coverage: --read: no {kept}"
        records = read_points(kept)
    else:
        records = run_points(suite_text(points, args, repeats), world_size, args.keep)
    if records is None:
        return f"bench_coverage: the {what} session failed (its output above)"
    error = missing_noise(records, what)
    if error:
        return f"bench_coverage: {error}"
    by_family: dict[str, Judged] = {}
    shapes: list[Shape] = []
    for index, (family, label, _) in enumerate(points):
        mine = [r for r in records if r["name"].startswith(f"test_point_{index}[")]
        longs = [r for r in mine if "-long-" in r["name"]]
        targeted = [r for r in mine if "-targeted-" in r["name"]]
        if len(longs) != 2 or not targeted:
            continue
        kind = kind_of(targeted)
        value = headline(longs, kind)
        judged = judge(targeted, value, kind)
        by_family.setdefault(family, Judged()).add(judged)
        met = sum(1 for r in targeted if (r.get("precision") or {}).get("met"))
        first_long, last_long = headline(longs[:1], kind), headline(longs[1:], kind)
        drift = first_long / last_long
        shown, unit = (value, "msg/s") if kind == "mean" else (value * 1e6, "us")
        runs = [figure(r, kind) for r in targeted]
        shapes.append(Shape(f"{label} ws{world_size}", runs, (first_long, last_long)))
        need = needed(runs)
        printed = statistics.median(judged.printed.widths) if judged.printed.widths else None
        ratio = f"{printed / need:6.2f}" if printed is not None and need > 0 else "     -"
        print(f"{f'{label} ws{world_size}':26} {shown:9.4g} {unit:5} "
              f"{judged.printed.text():>26} {judged.sampling.text():>26} "
              f"{met:>2}/{len(targeted):<2} {drift:8.3f} {need:7.1f} % {ratio}")
    return records, by_family, shapes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--budget", default=DEFAULT_BUDGET,
                        help="the targeted runs' (the product's default)")
    parser.add_argument("--long-budget", default="5s")
    parser.add_argument("--precision", default=DEFAULT_PRECISION,
                        help="the targeted runs' (the product's default)")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--world-size-8", action=argparse.BooleanOptionalAction, default=True,
                        help="a second session with a collective at world size 8")
    parser.add_argument("--ws8-repeats", type=int, default=None,
                        help="targeted runs per point at world size 8 (default: --repeats)")
    parser.add_argument("--keep", type=Path, default=None, metavar="DIR",
                        help="keep each session's results file in DIR (ws2.json, ws8.json)")
    parser.add_argument("--read", type=Path, default=None, metavar="DIR",
                        help="judge the results files --keep left in DIR; run nothing")
    args = parser.parse_args(argv)
    if args.keep is not None and args.read is not None:
        parser.error("--keep and --read: one or the other")
    print(f"{'point':26} {'long-run':>15} {'printed: covered, ±':>26} "
          f"{'sampling: covered, ±':>26} {'met':>5} {'long 0/1':>8} {'needed ±':>9} "
          f"{'ratio':>6}")
    sessions = [(POINTS, args.world_size, args.repeats)]
    if args.world_size_8:
        sessions.append((POINTS_WS8, 8, args.ws8_repeats or args.repeats))
    records: list[dict] = []
    by_family: dict[str, Judged] = {}
    shapes: list[Shape] = []
    for points, world_size, repeats in sessions:
        measured = measure(points, args, world_size, repeats)
        if isinstance(measured, str):
            print(measured, file=sys.stderr)
            return 1
        records += measured[0]
        for family, judged in measured[1].items():
            by_family.setdefault(family, Judged()).add(judged)
        shapes += measured[2]
    print_families(by_family, "WITHIN one session: how often the 95 % interval of a targeted "
                   "run covers the long-run value (covered/runs, share, median half-width)")
    print_bound(by_family)
    print_noise(records)
    print_shape(shapes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
