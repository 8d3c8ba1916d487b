"""Per-session error rates of the A/B gate, before and after Bonferroni, from recorded A/A runs.

    python benchmarks/bench_session_errors.py [--data benchmarks/data/ab_rounds.json]
        [--points 67] [--sessions 2000] [--seed 52] [--threshold 0.10] [--alpha 0.01]

A session of the main job judges about 67 points; it fails when any of them reads
"regression". Each point's verdict is results/statistics/paired.py judge_paired(baseline,
candidate, threshold, alpha=level) on its per-round values: regression = one-sided Wilcoxon
signed-rank p (slower) < level AND the Hodges-Lehmann 95 % interval's low bound above
1 + threshold; "shown slower" = p (slower) < level, whatever the size (regressions included).

- before: every point at level = alpha (0.01), on its own;
- after: Bonferroni over the session: every point at level = alpha / points (0.01 / 67);
- looks: the plugin's default since the extra rounds (harness/ab/mode.py, paired.look_rounds):
  the first R rounds judged at a third of that level; a point they leave open to a regression
  (not one, its interval reaching past the threshold: paired.open_to_regression) judged again
  on 2R rounds, and where still open on 3R, each look at the same third. A trial recorded with
  fewer than 3R rounds (the plugin ran no more, or the data predates the extra rounds) gets
  the missing ones as the rounds resampling makes them (below), from its own session's
  trials; a trial's own lean is then not kept in them.

The data: the A/A trials that `benchmarks/bench_ab.py --record` kept (one trial = one
benchmark of R interleaved rounds, baseline and candidate the same code) and its live 20 %
slowdown trials. Simulated sessions of --points points are made two ways (each --sessions
times, seeded):

- trials: every point is one recorded A/A trial as it was recorded (its R round pairs in
  order), drawn with replacement from all recorded A/A trials. Nothing is invented, but only
  the recorded trials exist: the per-session rate cannot be known better than the per-trial
  rate of those trials allows (printed under the table);
- rounds: round i of every point is round i of a trial drawn at random (each round its own
  draw) from one recorded A/A session (one session drawn per simulated session): new points
  with that session's round-to-round noise, each round keeping its place in the ABBA order
  (which variant ran first); a trial's own lean (all rounds of one benchmark leaning the same
  way) is not kept.

A slowdown of 5, 10 or 20 % is injected into one point of each simulated session by
multiplying that point's candidate round values by 1.05, 1.10 or 1.20; "caught" = that point
reads regression (it fails the session), "shown slower" as above. The live slowdown trials
(12 all_reduce calls against 10: 20 % more work) are judged as recorded.
Intervals are 95 % Clopper-Pearson; over simulated sessions they bound the resampling's own
error only (see the trials note for the data's).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_distbench.results.comparison import verdict
from pytest_distbench.results.rendering import fit
from pytest_distbench.results.statistics import paired

DATA = Path(__file__).resolve().parent / "data" / "ab_rounds.json"
SLOWDOWNS = (1.05, 1.10, 1.20)
Pairs = tuple[tuple[float, ...], tuple[float, ...]]  # (baseline rounds, candidate rounds)


@dataclass(frozen=True)
class Session:
    phase: str
    started: str
    load: str
    trials: list[Pairs]


@dataclass(frozen=True)
class Judged:
    regression: bool
    slower: bool


def judge(pairs: Pairs, threshold: float, level: float, factor: float = 1.0) -> Judged:
    base, cand = pairs
    if factor != 1.0:
        cand = tuple(c * factor for c in cand)
    v = paired.judge_paired(base, cand, threshold, alpha=level)
    # p_value is one-sided in the direction the estimate moved: p (slower) when ratio >= 1.
    return Judged(v.kind == "regression", v.ratio >= 1 and v.p_value < level)


def judge_looks(pairs: Pairs, rounds: int, threshold: float, level: float,
                factor: float = 1.0) -> Judged:
    """As the plugin judges with its extra rounds: the first `rounds` rounds, then `rounds`
    more at a time while a regression is left open, up to all of the point's rounds, each look
    at the level divided among the looks."""
    plan = paired.look_rounds(rounds, len(pairs[0]) - rounds, level)
    share = level / len(plan)
    for n in plan:
        v = paired.judge_paired(pairs[0][:n], tuple(c * factor for c in pairs[1][:n]),
                                threshold, alpha=share)
        if not paired.open_to_regression(v):
            break
    return Judged(v.kind == "regression", v.ratio >= 1 and v.p_value < share)


def judge_levels(pairs: Pairs, threshold: float, levels: dict[str, float],
                 factor: float = 1.0, rounds: int | None = None) -> dict[str, Judged]:
    """The point's verdict at each level, on its first `rounds` rounds (all: None), and by the
    looks at the smallest level where `rounds` is given; a point not shown slower at a
    level is not at any smaller one (p < a smaller level implies p < this one), so those are
    not recomputed."""
    first = pairs if rounds is None else (pairs[0][:rounds], pairs[1][:rounds])
    judged: dict[str, Judged] = {}
    last: Judged | None = None
    for name, level in sorted(levels.items(), key=lambda item: -item[1]):
        if last is None or last.slower:
            last = judge(first, threshold, level, factor)
        judged[name] = last
    if rounds is not None:
        judged[LOOKS] = judge_looks(pairs, rounds, threshold, min(levels.values()), factor)
    return judged


LOOKS = "looks"
EXTENDED = 3  # a point's rounds at most, in first looks' rounds: the plugin's default


def extended(pairs: Pairs, rounds: int, pool: Sequence[Pairs], rng: random.Random) -> Pairs:
    """The trial with EXTENDED x `rounds` round pairs: its recorded ones, each missing round i
    drawn from round i mod `rounds` of a trial of `pool` (its session's) drawn at random: fresh
    rounds of that session's noise, in their place in the ABBA order. Not from the trial's own
    rounds: the trials extended are those whose first rounds leaned, and their own rounds
    drawn again would carry that lean into the rounds meant to test it."""
    base, cand = list(pairs[0]), list(pairs[1])
    for i in range(len(base), EXTENDED * rounds):
        other = pool[rng.randrange(len(pool))]
        base.append(other[0][i % rounds])
        cand.append(other[1][i % rounds])
    return tuple(base[:EXTENDED * rounds]), tuple(cand[:EXTENDED * rounds])


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact two-sided interval of a binomial proportion k / n."""
    from scipy.stats import beta  # noqa: PLC0415  (its import costs ~2 s: only when printing)

    tail = (1 - confidence) / 2
    low = 0.0 if k == 0 else float(beta.ppf(tail, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1 - tail, k + 1, n - k))
    return low, high


def say(text: str) -> None:
    print(fit.wrap_text(text))


def rate(k: int, n: int) -> str:
    low, high = clopper_pearson(k, n)
    return f"{100 * k / n:.1f} % [{100 * low:.1f}, {100 * high:.1f}]"


def load_sessions(path: Path) -> list[Session]:
    """The kept sessions of `path`, each trial's rounds checked; a clear error otherwise."""
    try:
        kept = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SystemExit(f"--data {path}: cannot read it as JSON ({exc})") from None
    if not (isinstance(kept, dict) and isinstance(kept.get("sessions"), list)):
        raise SystemExit(f"--data {path}: not a file of kept sessions (no 'sessions' list); "
                         "benchmarks/bench_ab.py --record writes one")
    sessions = []
    for i, s in enumerate(kept["sessions"]):
        where = f"--data {path}: sessions[{i}]"
        if not isinstance(s, dict) or not isinstance(s.get("trials"), list) or not s["trials"]:
            raise SystemExit(f"{where}: no 'trials' list")
        trials = []
        for j, t in enumerate(s["trials"]):
            try:
                base = tuple(float(x) for x in t["baseline_round_s"])
                cand = tuple(float(x) for x in t["candidate_round_s"])
                paired.log_ratios(base, cand)
            except (KeyError, TypeError, ValueError) as exc:
                raise SystemExit(f"{where}.trials[{j}]: baseline_round_s / candidate_round_s: "
                                 f"{exc}") from None
            trials.append((base, cand))
        load = s.get("load_average_1min", {})
        sessions.append(Session(str(s.get("phase", "?")), str(s.get("started", "?")),
                                f"{load.get('min', '?')}..{load.get('max', '?')}", trials))
    return sessions


def pooled_points(session: Session, rounds: int, count: int, rng: random.Random) -> list[Pairs]:
    """`count` points of EXTENDED x `rounds` round pairs: round i of a point is round i mod `rounds`
    of a trial of `session` drawn at random, each round from its own draw."""
    points = []
    for _ in range(count):
        drawn = [session.trials[rng.randrange(len(session.trials))]
                 for _ in range(EXTENDED * rounds)]
        points.append((tuple(t[0][i % rounds] for i, t in enumerate(drawn)),
                       tuple(t[1][i % rounds] for i, t in enumerate(drawn))))
    return points


@dataclass
class Tally:
    """Counts over simulated sessions, per level ("before", "after") and slowdown factor."""
    sessions: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    slower: dict[str, int] = field(default_factory=dict)
    caught: dict[tuple[str, float], int] = field(default_factory=dict)
    shown: dict[tuple[str, float], int] = field(default_factory=dict)

    def add(self, names: Sequence[str], unchanged: Sequence[dict[str, Judged]],
            injected: dict[tuple[str, float], Judged]) -> None:
        self.sessions += 1
        for name in names:
            self.failed[name] = self.failed.get(name, 0) + any(j[name].regression
                                                                for j in unchanged)
            self.slower[name] = self.slower.get(name, 0) + any(j[name].slower for j in unchanged)
        for key, j in injected.items():
            self.caught[key] = self.caught.get(key, 0) + j.regression
            self.shown[key] = self.shown.get(key, 0) + j.slower


def injected(pairs: Pairs, threshold: float, levels: dict[str, float], rounds: int
             ) -> dict[tuple[str, float], Judged]:
    """The point's verdicts with each slowdown injected into its candidate's rounds."""
    return {(name, f): j for f in SLOWDOWNS
            for name, j in judge_levels(pairs, threshold, levels, f, rounds).items()}


def simulate_trials(trials: list[Pairs], rounds: int, args: argparse.Namespace,
                    levels: dict[str, float], rng: random.Random) -> Tally:
    """Sessions of recorded trials (extended to EXTENDED x `rounds`) drawn with replacement (each
    trial judged once, cached)."""
    plain = [judge_levels(t, args.threshold, levels, rounds=rounds) for t in trials]
    slowed = [injected(t, args.threshold, levels, rounds) for t in trials]
    tally = Tally()
    for _ in range(args.sessions):
        drawn = [rng.randrange(len(trials)) for _ in range(args.points)]
        # The slowdown goes into the session's first point, in place of its A/A verdict.
        tally.add([*levels, LOOKS], [plain[i] for i in drawn], slowed[drawn[0]])
    return tally


def simulate_rounds(aa: list[Session], rounds: int, args: argparse.Namespace,
                    levels: dict[str, float], rng: random.Random) -> Tally:
    """Sessions of points made of one recorded session's round pairs (EXTENDED x `rounds` of them:
    round i from a trial's round i mod `rounds`, which keeps its place in the ABBA order)."""
    tally = Tally()
    for _ in range(args.sessions):
        points = pooled_points(rng.choice(aa), rounds, args.points, rng)
        unchanged = [judge_levels(p, args.threshold, levels, rounds=rounds) for p in points]
        tally.add([*levels, LOOKS], unchanged,
                  injected(points[0], args.threshold, levels, rounds))
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA,
                        help="kept A/B sessions (benchmarks/bench_ab.py --record)")
    parser.add_argument("--points", type=int, default=67, help="points per simulated session")
    parser.add_argument("--sessions", type=int, default=2000,
                        help="simulated sessions per resampling")
    parser.add_argument("--seed", type=int, default=52)
    parser.add_argument("--threshold", type=float, default=verdict.DEFAULT_THRESHOLD)
    parser.add_argument("--alpha", type=float, default=paired.DEFAULT_ALPHA,
                        help="family-wise level of a session (before: of every point)")
    args = parser.parse_args()
    if args.points < 1 or args.sessions < 1:
        parser.error("--points and --sessions must be >= 1")
    if not 0 < args.alpha < 1:
        parser.error("--alpha must lie strictly between 0 and 1")
    if not (math.isfinite(args.threshold) and args.threshold >= 0):
        parser.error("--threshold must be a finite fraction >= 0")
    began = time.perf_counter()
    sessions = load_sessions(args.data)
    aa = [s for s in sessions if s.phase == "A/A"]
    slow = [t for s in sessions if s.phase != "A/A" for t in s.trials]
    if not aa:
        raise SystemExit(f"--data {args.data}: no A/A session in it")
    trials = [t for s in aa for t in s.trials]
    slow_sessions = [s for s in sessions if s.phase != "A/A"]
    # The first look's rounds: the fewest a trial has (a session with extra rounds kept 2R or 3R
    # where its first R left a regression open).
    rounds = min(len(t[0]) for t in trials)
    if rounds % 2 or any(len(t[0]) not in (rounds, 2 * rounds, 3 * rounds) for t in trials):
        raise SystemExit(f"--data {args.data}: the A/A trials' round counts are not R (even) "
                         "2R or 3R")
    levels = {"before": args.alpha, "after": args.alpha / args.points}
    print(f"$ python benchmarks/bench_session_errors.py {' '.join(sys.argv[1:])}".rstrip())
    say(f"data: {args.data.name}: {len(aa)} A/A sessions, {len(trials)} A/A trials of "
          f"{rounds} rounds; {len(slow)} live 20 % slowdown trials. Simulated sessions of "
          f"{args.points} points, {args.sessions} per resampling, seed {args.seed}; threshold "
          f"{100 * args.threshold:g} %; before: p < {args.alpha:g} per point, after: "
          f"p < {args.alpha:g}/{args.points} = {levels['after']:.2g} per point; looks: "
          f"{rounds} rounds, then {rounds} more at a time while they leave a regression open, "
          f"up to {EXTENDED * rounds}, each look at p < {levels['after'] / EXTENDED:.2g}.")
    rng = random.Random(args.seed)
    full = [extended(t, rounds, s.trials, rng) for s in aa for t in s.trials]
    tallies = {"trials": simulate_trials(full, rounds, args, levels, rng),
               "rounds": simulate_rounds(aa, rounds, args, levels, rng)}
    names = [*levels, LOOKS]
    judged_slow = [judge_levels(extended(t, rounds, s.trials, rng), args.threshold, levels,
                                rounds=rounds) for s in slow_sessions for t in s.trials]
    print_table(tallies, names, judged_slow, args)
    judged = [judge_levels(t, args.threshold, levels, rounds=rounds) for t in full]
    print_data_bound(trials, judged, rounds, levels, args)
    print_live(aa, judged, names)
    print(f"({time.perf_counter() - began:.0f} s)")


def print_table(tallies: dict[str, Tally], names: list[str], slow: list[dict[str, Judged]],
                args: argparse.Namespace) -> None:
    for mode, t in tallies.items():  # a table per resampling: each fits 120 columns
        heads = [f"simulated sessions, {mode} resampled", *names]
        rows = [["unchanged: sessions failed (any regression)",
                 *[rate(t.failed[n], t.sessions) for n in names]],
                ["unchanged: sessions with any point shown slower",
                 *[rate(t.slower[n], t.sessions) for n in names]]]
        for f in SLOWDOWNS:
            for word, counts in (("caught (regression)", "caught"), ("shown slower", "shown")):
                rows.append([f"{100 * (f - 1):.0f} % slowdown on one point: {word}",
                             *[rate(getattr(t, counts)[(n, f)], t.sessions) for n in names]])
        print()
        print(fit.table(rows, heads, colalign=["left"] + ["right"] * (len(heads) - 1)))
    if slow:
        print("\nlive 20 % slowdown trials (the candidate ran 12 calls against 10), as recorded:")
        for n in names:
            js = [j[n] for j in slow]
            say(f"  {n}: caught (regression) {rate(sum(j.regression for j in js), len(js))} "
                f"of {len(js)}; shown slower {rate(sum(j.slower for j in js), len(js))}")


def print_data_bound(trials: list[Pairs], judged: list[dict[str, Judged]], rounds: int,
                     levels: dict[str, float], args: argparse.Namespace) -> None:
    """What the recorded trials themselves allow: the per-point rate's interval, and the
    per-session rate it implies for independent points."""
    print(f"\nthe recorded A/A trials, each judged once ({len(trials)} trials):")
    for n in [*levels, LOOKS]:
        k = sum(j[n].regression for j in judged)
        high = clopper_pearson(k, len(trials))[1]
        say(f"  {n}: regression on {rate(k, len(trials))} ({k} of {len(trials)}): a session "
              f"of {args.points} independent points fails at most "
              f"{100 * (1 - (1 - high) ** args.points):.1f} % of the time (95 %); shown slower "
              f"on {rate(sum(j[n].slower for j in judged), len(trials))}")
    first = [(b[:rounds], c[:rounds]) for b, c in trials]
    ratios = [paired.judge_paired(b, c, args.threshold) for b, c in first]
    for n, lv in levels.items():
        det = sorted(paired.judge_paired(b, c, args.threshold, alpha=lv).detectable
                     for b, c in first)
        say(f"  {n}: detectable (smallest slowdown told from none with 95 % power at "
            f"p < {lv:.2g}) median {100 * det[len(det) // 2]:.1f} %, quartiles "
            f"{100 * det[len(det) // 4]:.1f} .. {100 * det[3 * len(det) // 4]:.1f} %")
    say(f"  largest Hodges-Lehmann ratio {max(v.ratio for v in ratios):.3f}, largest interval "
          f"low bound {max(v.ratio_low for v in ratios):.3f} (a regression needs > "
          f"{1 + args.threshold:.2f})")


def print_live(aa: list[Session], judged: list[dict[str, Judged]], names: list[str]) -> None:
    """`judged`: every A/A trial's verdicts, in the sessions' order."""
    print(f"\nlive A/A sessions, as recorded ({len(aa)}):")
    rows, failed, slower = [], dict.fromkeys(names, 0), dict.fromkeys(names, 0)
    at = 0
    for s in aa:
        row = [s.started, len(s.trials), s.load]
        mine, at = judged[at:at + len(s.trials)], at + len(s.trials)
        for n in names:
            regressions = sum(j[n].regression for j in mine)
            shown = sum(j[n].slower for j in mine)
            failed[n] += regressions > 0
            slower[n] += shown > 0
            row += [regressions, shown]
        rows.append(row)
    heads = ["started (UTC)", "points", "load (1 min)"]
    for n in names:
        heads += [f"{n}: regressions", f"{n}: shown slower"]
    print(fit.table(rows, heads, colalign=["left"] + ["right"] * (len(heads) - 1)))
    for n in names:
        say(f"  {n}: {failed[n]} of {len(aa)} sessions failed (any regression); "
              f"{slower[n]} of {len(aa)} with a point shown slower")


if __name__ == "__main__":
    main()
