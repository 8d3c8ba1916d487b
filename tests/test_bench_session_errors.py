"""benchmarks/bench_session_errors.py on the committed A/A data (a few sessions: fast), its
verdicts per level against judge_paired's own, its clear errors; and bench_ab.py --record's
file of kept sessions."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scripts import loaded

from pytest_distbench.results.statistics import paired

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "bench_session_errors.py"
DATA = ROOT / "benchmarks" / "data" / "ab_rounds.json"


@pytest.fixture(scope="module")
def bse():
    with loaded(SCRIPT) as module:
        yield module


@pytest.fixture(scope="module")
def bab():
    with loaded(ROOT / "benchmarks" / "bench_ab.py") as module:
        yield module


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_prints_its_table_from_the_committed_data():
    done = run("--sessions", "30", "--points", "10")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Traceback" not in done.stderr
    assert all(len(line) <= 120 for line in out.splitlines()), out
    kept = json.loads(DATA.read_text())["sessions"]
    aa = [s for s in kept if s["phase"] == "A/A"]
    assert f"{len(aa)} A/A sessions, {sum(len(s['trials']) for s in aa)} A/A trials" in out
    rows = {}
    for line in out.splitlines():
        cells = re.findall(r"(\d+\.\d) % \[(\d+\.\d), (\d+\.\d)\]", line)
        if line.startswith(("unchanged", "5 %", "10 %", "20 %")):
            assert len(cells) == 3, line  # before / after / looks
            rows.setdefault(line.split("  ")[0], []).extend(float(c[0]) for c in cells)
            # 30 sessions: every rate is a count of 30, inside its own interval.
            assert all(float(lo) <= float(r) <= float(hi) for r, lo, hi in cells), line
            counts = [float(r) * 30 / 100 for r, _, _ in cells]
            assert all(abs(k - round(k)) < 0.02 for k in counts), line
    for row in ("unchanged: sessions failed", "20 % slowdown on one point: caught"):
        assert any(label.startswith(row) for label in rows), (row, out)
    # A table per resampling (trials, rounds): each row's label twice, 3 + 3 figures.
    assert len(rows) == 8 and all(len(v) == 6 for v in rows.values()), out
    # A point flagged at the smaller level is flagged at the larger: after never exceeds before.
    for values in rows.values():
        assert values[1] <= values[0] and values[4] <= values[3]
    live = out.split("live A/A sessions, as recorded")[1]
    assert sum(1 for s in aa if s["started"] in live) == len(aa)
    assert re.search(rf"before: \d+ of {len(aa)} sessions failed", live)


def test_bad_data_is_an_error_naming_the_option(tmp_path):
    bad = tmp_path / "other.json"
    bad.write_text('{"benchmarks": []}')
    done = run("--data", str(bad), "--sessions", "2")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert f"--data {bad}" in done.stderr and "sessions" in done.stderr
    bad.write_text('{"sessions": [{"phase": "A/A", "trials": [{"baseline_round_s": [1, 2], '
                   '"candidate_round_s": [1]}]}]}')
    done = run("--data", str(bad), "--sessions", "2")
    assert "Traceback" not in done.stderr
    assert "sessions[0].trials[0]" in done.stderr and "unpaired" in done.stderr
    done = run("--points", "0")
    assert done.returncode == 2 and "--points" in done.stderr


rounds = st.lists(st.tuples(st.floats(0.5, 2.0), st.floats(0.5, 2.0)), min_size=8, max_size=24)


@settings(max_examples=60, deadline=None)
@given(pairs=rounds, factor=st.sampled_from([1.0, 1.05, 1.2]),
       threshold=st.sampled_from([0.0, 0.1]))
def test_verdicts_per_level_are_judge_paireds(bse, pairs, factor, threshold):
    base = tuple(b for b, _ in pairs)
    cand = tuple(c for _, c in pairs)
    levels = {"before": 0.01, "after": 0.01 / 67, "lax": 0.2}
    judged = bse.judge_levels((base, cand), threshold, levels, factor)
    for name, level in levels.items():
        v = paired.judge_paired(base, [c * factor for c in cand], threshold, alpha=level)
        assert judged[name].regression == (v.kind == "regression")
        p_slower = paired.signed_rank_p_values(paired.log_ratios(
            base, [c * factor for c in cand]))[0]
        assert judged[name].slower == (p_slower < level)


def test_pooled_points_keep_each_rounds_place(bse):
    import random

    trials = [(tuple(10.0 * i + j for j in range(3)), tuple(10.0 * i + j + 0.5 for j in range(3)))
              for i in range(4)]
    session = bse.Session("A/A", "t", "1..2", trials)
    points = bse.pooled_points(session, 3, 200, random.Random(1))
    for base, cand in points:
        # Round j comes from round j (mod 3: the extra rounds too) of some trial, its baseline
        # and candidate together.
        assert len(base) == 9
        assert all(b % 10 == j % 3 and c == b + 0.5
                   for j, (b, c) in enumerate(zip(base, cand, strict=True)))
    # and from different trials: new points, not the recorded ones.
    assert any(base not in {t[0] for t in trials} for base, _ in points)


def test_a_trial_is_extended_by_its_sessions_rounds_in_their_abba_places(bse):
    import random

    pool = [(tuple(10.0 * i + j for j in range(6)), tuple(10.0 * i + j + 0.5 for j in range(6)))
            for i in range(4)]
    base, cand = bse.extended(pool[0], 6, pool, random.Random(2))
    assert base[:6] == pool[0][0] and cand[:6] == pool[0][1] and len(base) == 18
    # Round i from round i mod 6 of some trial of the pool, its baseline and candidate together,
    # and not all from the trial itself.
    assert all(b % 10 == i % 6 and c == b + 0.5
               for i, (b, c) in enumerate(zip(base, cand, strict=True)))
    assert any(b >= 10 for b in base[6:])
    longer = (pool[1][0] * 3, pool[1][1] * 3)
    assert bse.extended(longer, 6, pool, random.Random(2)) == longer  # recorded: kept


@settings(max_examples=40, deadline=None)
@given(pairs=st.lists(st.tuples(st.floats(0.5, 2.0), st.floats(0.5, 2.0)), min_size=24,
                      max_size=24), factor=st.sampled_from([1.0, 1.2]))
def test_looks_judge_the_first_rounds_then_more_while_a_regression_is_open(bse, pairs, factor):
    base = tuple(b for b, _ in pairs)
    cand = tuple(c for _, c in pairs)
    level = 0.03
    j = bse.judge_looks((base, cand), 8, 0.1, level, factor)
    for n in (8, 16, 24):  # each look at a third of the level
        final = paired.judge_paired(base[:n], [c * factor for c in cand[:n]], 0.1,
                                    alpha=level / 3)
        if not paired.open_to_regression(final):
            break
    assert j.regression == (final.kind == "regression")


def test_kept_sessions_append_and_read_back(bab, tmp_path):
    path = tmp_path / "kept.json"
    assert bab.kept_problem(path) is None
    session = {"phase": "A/A", "started": "s", "trials": [
        {"id": "t[0]", "baseline_round_s": [1e-4, 2e-4], "candidate_round_s": [3e-4, 4e-4]}]}
    bab.record_kept(path, session)
    bab.record_kept(path, {**session, "phase": "20 % slowdown"})
    kept = json.loads(path.read_text())
    assert [s["phase"] for s in kept["sessions"]] == ["A/A", "20 % slowdown"]
    assert kept["sessions"][1]["trials"] == session["trials"] and kept["what"]
    assert bab.kept_problem(path) is None
    path.write_text("[1]")
    assert "no 'sessions' list" in bab.kept_problem(path)
    assert "directory" in bab.kept_problem(tmp_path / "missing" / "kept.json")
