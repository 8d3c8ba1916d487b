"""`pytest-distbench history` and the gate against a history's current segment: synthetic
baselines written through the project's writer, and real sessions that append and compare."""

from __future__ import annotations

import copy
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from results_data import ENVIRONMENT, benchmark_record

from pytest_distbench import cli
from pytest_distbench.results import document
from pytest_distbench.results.document import history
from pytest_distbench.results.rendering import fit

STEP, STEADY = 1024, 4096  # the sizes of the benchmark that steps and the one that does not
NAMES = {size: f"test_all_reduce[gloo-ws2-{size}]" for size in (STEP, STEADY)}
IDS = {size: f"pytest_distbench/suites/test_collectives.py::{name}"
       for size, name in NAMES.items()}


def run_document(i: int, scales: dict[int, float], rng: random.Random,
                 environment: dict | None = None) -> dict:
    """Run i of a synthetic history: each benchmark at 1 ms x its scale, 1 % run-to-run noise."""
    records = []
    for size, scale in scales.items():
        p50 = 0.001 * scale * (1 + rng.gauss(0, 0.01))
        records.append(benchmark_record(size, [p50 * (1 + 0.01 * (k % 7 - 3)) for k in range(40)]))
    doc = document.make_document(records, environment or ENVIRONMENT, ["pytest", "--distbench"],
                                 commit_info={"id": f"{i:02d}" + "c" * 38, "dirty": False})
    doc["distbench"]["created"] = f"2026-11-{1 + i:02d}T03:00:00+00:00"  # one run a night
    return doc


def baseline(path: Path, runs: int = 24, step_at: int | None = None, step: float = 1.3,
             torch_from: int | None = None, legacy: bool = False) -> Path:
    """A baseline of `runs` nights: the STEP benchmark `step` times slower from run `step_at`,
    another torch from run `torch_from`, the STEADY one unchanged; with `legacy`, its stored
    runs as pytest-distbench kept them before commits and fingerprints."""
    rng = random.Random(7)
    stored = None
    for i in range(runs):
        slow = step if step_at is not None and i >= step_at else 1.0
        env = dict(ENVIRONMENT, torch="2.14.0+cpu") if torch_from is not None and (
            i >= torch_from) else ENVIRONMENT
        stored = history.with_history(run_document(i, {STEP: slow, STEADY: 1.0}, rng, env),
                                      stored)
    if legacy:
        for run in stored["distbench"]["history"]:
            for key in ("commit", "dirty", "environment"):
                del run[key]
    document.write_document(stored, path, overwrite=True)
    return path


def history_of(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()  # what came before (a session's echoed output) is not the command's
    code = cli.main(["history", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_clean_step_is_found_at_the_run_it_started_and_nothing_elsewhere(tmp_path, capsys):
    path = baseline(tmp_path / "main.json", runs=30, step_at=12)
    code, out, err = history_of(capsys, path, "--format", "json")
    assert code == 0, err
    found = json.loads(out)["benchmarks"]
    stepped, steady = found[IDS[STEP]], found[IDS[STEADY]]
    assert stepped["runs"] == steady["runs"] == 30
    [point] = stepped["change_points"]
    assert point["run"] == 12  # the first run at the new speed, 0 the oldest
    assert point["after"] / point["before"] == pytest.approx(1.3, rel=0.03)
    assert point["change_pct"] == pytest.approx(30, abs=3)
    assert point["p"] < 0.001
    assert point["commit"].startswith("12") and point["time"].startswith("2026-11-13")
    assert steady["change_points"] == [] and steady["environment_changes"] == []
    assert stepped["current"]["start_run"] == 12 and stepped["current"]["runs"] == 18
    # 18 runs since the step: shown by the history as it stood 7 runs ago, the accepted speed.
    assert stepped["regression"] is None and json.loads(out)["regressions"] == []

    code, out, err = history_of(capsys, path)
    assert code == 0, err
    lines = out.splitlines()
    assert max(map(len, lines)) <= fit.WIDTH, out
    at = next(i for i, line in enumerate(lines) if line.startswith(NAMES[STEP]))
    assert "30 run(s), latest p50 1," in lines[at] and "(the 18 runs since run 12)" in lines[at]
    assert lines[at + 1].startswith("  run 12 (2026-11-13 03:00, commit 12ccccc): change point ")
    assert "(+3" in lines[at + 1] or "(+2" in lines[at + 1], lines[at + 1]
    assert next(line for line in lines if line.startswith(NAMES[STEADY])).endswith(
        "(the 30 stored runs), no step")
    assert "no regression: no slowdown beyond 10 % first shown within the newest 7 runs" in out


def test_a_step_is_a_regression_for_the_recent_runs_after_it_is_first_shown():
    """However many runs the history took to show the step (more on a noisier series), the
    nightly check reports it for --recent runs from then on, and not before or after."""
    from pytest_distbench.results.comparison.series import RECENT_RUNS, Run, series_for

    for noise in (0.01, 0.05):
        rng = random.Random(5)
        values = [(1.3 if i >= 12 else 1.0) * (1 + rng.gauss(0, noise)) for i in range(45)]
        shown, regression = [], []
        for n in range(13, len(values) + 1):
            series = series_for("x", [Run(i, None, None, None, {}) for i in range(n)],
                                values[:n])
            if series.steps and series.start == 12:
                shown.append(n)
            if series.regression(0.10) is not None:
                regression.append(n)
        assert shown, noise
        assert regression == list(range(shown[0], shown[0] + RECENT_RUNS)), (noise, shown)


@pytest.mark.parametrize(("runs", "step_at", "step", "fails"), [
    (24, 17, 1.3, True),  # 7 runs at the new speed: first shown within the newest 7
    (40, 8, 1.3, False),  # shown long ago: the accepted speed
    (24, 17, 1 / 1.3, False),  # faster
    (24, 17, 1.05, False),  # within the threshold
    (24, None, 1.0, False),
], ids=["new-slowdown", "old-slowdown", "speed-up", "small", "unchanged"])
def test_fail_on_regression_fails_a_slowdown_among_the_newest_runs_only(
        tmp_path, capsys, runs, step_at, step, fails):
    path = baseline(tmp_path / "main.json", runs=runs, step_at=step_at, step=step)
    code, out, err = history_of(capsys, path, "--fail-on-regression")
    assert code == (1 if fails else 0), out + err
    said = "regression since run 17 (commit 17ccccc)"
    if fails:
        assert said in out and "1 regression(s): " + NAMES[STEP] + " since run 17" in out
        assert err.startswith("pytest-distbench: error: --fail-on-regression: 1 benchmark(s)")
    else:
        assert "regression since" not in out and not err


def test_a_smaller_threshold_or_a_longer_window_makes_a_regression(tmp_path, capsys):
    small = baseline(tmp_path / "small.json", step_at=17, step=1.05)
    assert history_of(capsys, small, "--fail-on-regression", "--threshold", "3%")[0] == 1
    old = baseline(tmp_path / "old.json", runs=40, step_at=8)
    assert history_of(capsys, old, "--fail-on-regression")[0] == 0
    assert history_of(capsys, old, "--fail-on-regression", "--recent", "30")[0] == 1


def test_an_environment_change_starts_a_segment_and_is_never_a_regression(tmp_path, capsys):
    # Another torch from run 17 and, at the same run, a 30 % step: not the code's.
    path = baseline(tmp_path / "main.json", runs=24, step_at=17, torch_from=17)
    code, out, err = history_of(capsys, path, "--fail-on-regression")
    assert code == 0, out + err
    assert ("  run 17 (2026-11-18 03:00, commit 17ccccc): environment change (torch: "
            "2.13.0+cpu -> 2.14.0+cpu), ") in out
    assert "): change point" not in out and "regression since" not in out
    code, out, err = history_of(capsys, path, "--format", "json")
    stepped = json.loads(out)["benchmarks"][IDS[STEP]]
    assert stepped["change_points"] == [] and stepped["regression"] is None
    [change] = stepped["environment_changes"]
    assert change["run"] == 17 and change["differences"] == ["torch: 2.13.0+cpu -> 2.14.0+cpu"]
    assert change["change_pct"] == pytest.approx(30, abs=3) and change["p"] is None
    # The steady benchmark gets the same segment boundary, and the gate's segment is the new
    # environment's 7 runs for both.
    for size in (STEP, STEADY):
        current = json.loads(out)["benchmarks"][IDS[size]]["current"]
        assert (current["start_run"], current["runs"]) == (17, 7)


def test_runs_stored_before_commits_and_fingerprints_still_read(tmp_path, capsys):
    path = baseline(tmp_path / "old.json", runs=24, step_at=12, torch_from=20, legacy=True)
    stored = document.read_document(path)["distbench"]["history"]
    assert "environment" not in stored[0] and "commit" not in stored[0]
    code, out, err = history_of(capsys, path)
    assert code == 0, err
    # Their torch was kept: a change of it is still an environment change; the commit is not.
    assert "run 12 (2026-11-13 03:00, commit unknown): change point" in out
    assert "run 20 (2026-11-21 03:00, commit unknown): environment change (torch:" in out
    # The newest run records every field, the stored ones only their torch: the fields they
    # lack are no change (else every upgraded baseline would start a segment at its new run).
    assert "run 23" not in out


def test_the_gate_judges_against_the_current_segment(tmp_path):
    from pytest_distbench.results.comparison import verdict

    stepped = document.read_document(baseline(tmp_path / "step.json", step_at=12))
    rng = random.Random(99)
    at_new_speed = run_document(24, {STEP: 1.3, STEADY: 1.0}, rng)
    judged = verdict.compare_documents(stepped, at_new_speed, threshold=0.1)
    v = judged.get(IDS[STEP])
    assert v.kind == "unchanged" and v.gateable, v
    assert v.noise == "run-to-run: the 12 runs since run 12 (commit 12ccccc)"
    # Before the history shows the step (two runs at the new speed), the same run is judged
    # against every stored run and fails.
    early = document.read_document(baseline(tmp_path / "early.json", runs=14, step_at=12))
    v = verdict.compare_documents(early, at_new_speed, threshold=0.1).get(IDS[STEP])
    assert v.kind == "regression" and v.noise == "run-to-run: the 14 stored runs", v


def test_history_plots_each_benchmark_with_its_segments(tmp_path, capsys):
    path = baseline(tmp_path / "main.json", step_at=17, torch_from=8)
    code, out, err = history_of(capsys, path, "--plot", tmp_path / "plots")
    assert code == 0, err
    pngs = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert pngs == [f"history-{NAMES[size].replace('[', '_').rstrip(']')}.png"
                    for size in (STEP, STEADY)]
    assert all((tmp_path / "plots" / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert "wrote 2 plot(s)" in err


def _cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_distbench.cli", "history", *argv],
                          capture_output=True, text=True, cwd=cwd, timeout=120)


def test_bad_inputs_are_one_line_naming_them_and_exit_2(tmp_path):
    one_run = tmp_path / "one.json"
    document.write_document(run_document(0, {STEP: 1.0}, random.Random(1)), one_run,
                            overwrite=False)
    damaged = tmp_path / "damaged.json"
    damaged.write_text(one_run.read_text()[:300])
    (tmp_path / "a-file").write_text("")
    cases = {
        "missing": (["nope"], "baselines/nope.json"),
        "damaged": ([str(damaged)], "damaged.json: not valid JSON"),
        "no-history": ([str(one_run)], "one.json: no stored history (distbench.history)"),
        "bad-name": (["no good"], "invalid baseline name 'no good'"),
        "bad-recent": ([str(one_run), "--recent", "0"], "--recent: invalid count '0'"),
        "plot-to-a-file": ([str(one_run), "--plot", str(tmp_path / "a-file")], "--plot"),
    }
    for name, (argv, message) in cases.items():
        done = _cli(*argv, cwd=tmp_path)
        assert done.returncode == 2, (name, done.stdout, done.stderr)
        assert message in done.stderr, (name, done.stderr)
        assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr, name
        assert done.stdout == "", name


# -- real sessions -------------------------------------------------------------------------

BENCH = """
import os, time, pytest

SLOW = float(os.environ.get("DISTBENCH_TEST_SLOW", "1"))

@pytest.mark.distbench(iterations=20, warmup=2)
def test_wait(distbench):
    distbench.measure(lambda: time.sleep(0.002 * SLOW))
"""


def _git_commit(where: Path) -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com",
                               *args], cwd=where, check=True, capture_output=True,
                              text=True).stdout.strip()

    git("init", "-q")
    git("add", "test_bench.py")
    git("commit", "-q", "-m", "bench")
    return git("rev-parse", "HEAD")


def test_appended_sessions_read_back_as_a_history(pytester, distbench_run, capsys):
    pytester.makepyfile(test_bench=BENCH)
    commit = _git_commit(pytester.path)
    for _ in range(3):
        distbench_run("--distbench", "--distbench-save=main",
                      "--distbench-append").assert_outcomes(passed=1)
    path = pytester.path / "baselines" / "main.json"
    runs = history.stored_runs(document.read_document(path))
    assert [run["commit"] for run in runs] == [commit] * 3
    assert all(run["environment"]["torch"] == torch.__version__ for run in runs)
    assert all(run["environment"]["world_sizes"] == [2] for run in runs)
    assert [run["created"] for run in runs] == sorted(run["created"] for run in runs)

    code, out, err = history_of(capsys, "main", "--format", "json")  # baselines/ of the cwd
    assert code == 0, err
    [(bid, found)] = json.loads(out)["benchmarks"].items()
    assert bid.endswith("test_bench.py::test_wait[gloo-ws2]")
    assert found["runs"] == 3 and found["change_points"] == []
    assert found["current"]["commit"] == commit and found["current"]["runs"] == 3
    assert 0.002 < found["latest_p50_s"] < 0.02
    code, out, err = history_of(capsys, "main", "--fail-on-regression")
    assert code == 0, err
    assert out.splitlines()[1].startswith("test_wait[gloo-ws2]: 3 run(s), latest p50 ")
    assert "(the 3 stored runs), no step" in out.splitlines()[1]

    # --distbench-keep-runs: the oldest are dropped first, and the session says so.
    kept = distbench_run("--distbench", "--distbench-save=main", "--distbench-append",
                         "--distbench-keep-runs=2")
    kept.assert_outcomes(passed=1)
    assert "(2 run(s) kept, at most 2)" in " ".join(kept.stdout.str().split())
    after = history.stored_runs(document.read_document(path))
    assert [run["created"] for run in after] == [runs[2]["created"], after[1]["created"]]
    bad = distbench_run("--distbench", "--distbench-keep-runs=0")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["ERROR: --distbench-keep-runs: invalid count '0': must be >= 1"])


def test_a_run_at_the_new_speed_passes_against_the_history(pytester, distbench_run):
    pytester.makepyfile(test_bench=BENCH)
    first = pytester.path / "first.json"
    distbench_run("--distbench", f"--distbench-json={first}").assert_outcomes(passed=1)
    real = document.read_document(first)

    def stored(runs: int, step_at: int) -> None:
        """A history of `runs` nights whose benchmark ran four times as fast before `step_at`
        (2 % noise), at this machine's measured speed since: a step that stays past the 50 %
        threshold when the load doubles or halves the sleep's p50 between two sessions (at
        twice as fast, a run beside a busy machine's first run passed once)."""
        rng, built = random.Random(3), None
        for i in range(runs):
            run = copy.deepcopy(real)
            run["commit_info"] = {"id": f"{i:02d}" + "d" * 38, "dirty": False}
            for entry in run["benchmarks"]:
                entry["distbench"]["summary"]["p50"] *= (0.25 if i < step_at else 1.0) * (
                    1 + rng.gauss(0, 0.02))
            built = history.with_history(run, built)
        document.write_document(built, pytester.path / "baselines" / "main.json",
                                overwrite=True)

    stored(20, step_at=12)  # the history shows the step: 8 runs at this speed
    result = distbench_run("--distbench", "--distbench-compare=main",
                           "--distbench-threshold=50%")
    result.assert_outcomes(passed=1)
    header = " ".join(result.stdout.str().split())
    assert ("20 stored runs: verdicts judge each p50 against the learned run-to-run spread of "
            "its current segment") in header, header
    assert "the 8 runs since run 12 (commit 12ddddd) for 1 benchmark(s)" in header, header

    # The same run before the history shows the step (2 runs at this speed of 14): judged
    # against every stored run, it is four times as slow, and fails.
    stored(14, step_at=12)
    result = distbench_run("--distbench", "--distbench-compare=main",
                           "--distbench-threshold=50%", "-rf")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*performance regression against *main.json: p50 * us is +*% "
                                 "from the median of the 14 stored runs (threshold 50 %)*"])
