"""A/B mode and baseline history in real pytest sessions with real ranks."""

from __future__ import annotations

import copy
import json
import stat
import sys
import xml.etree.ElementTree as ET

import pytest

from pytest_distbench.results import document
from pytest_distbench.results.document import history

# A busy wait of 2 ms, made (1 + SLOW) times longer by an environment variable: a real
# slowdown of the body. Each rank notes which variant it is (its environment, its pid, the
# `flavour` library it imported) so the tests can see where it ran.
BENCH = """
import os, time, pytest
import flavour

SLOW = float(os.environ.get("DISTBENCH_TEST_SLOW", "0"))

def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass

@pytest.mark.distbench(iterations=10, warmup=1)
def test_work(distbench, rank):
    with open(os.environ["DISTBENCH_TEST_NOTES"], "a") as notes:
        cpus = ",".join(map(str, sorted(os.sched_getaffinity(0))))
        notes.write(f"{os.environ.get('DISTBENCH_TEST_MARK', '-')} {os.getpid()} "
                    f"{flavour.NAME} {cpus}\\n")
    distbench.measure(lambda: spin(0.002 * (1 + SLOW)))
"""


@pytest.fixture
def bench(pytester, monkeypatch):
    pytester.makepyfile(test_bench=BENCH, flavour="NAME = 'candidate-lib'")
    notes = pytester.path / "notes.txt"
    monkeypatch.setenv("DISTBENCH_TEST_NOTES", str(notes))
    return pytester


def notes_by_mark(pytester) -> dict[str, set[tuple[str, str]]]:
    found: dict[str, set[tuple[str, str]]] = {}
    for line in (pytester.path / "notes.txt").read_text().splitlines():
        mark, pid, lib, _cpus = line.split()
        found.setdefault(mark, set()).add((pid, lib))
    return found


def junit_properties(path) -> dict[str, dict[str, str]]:
    root = ET.parse(path).getroot()
    return {case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")}
            for case in root.iter("testcase")}


def test_env_slowdown_of_the_candidate_fails_its_test(bench, distbench_run, monkeypatch):
    monkeypatch.setenv("DISTBENCH_TEST_SLOW", "1")  # the candidate: this run, 2x the work
    summary = bench.path / "summary.md"
    result = distbench_run("--distbench", "--distbench-baseline-env=DISTBENCH_TEST_SLOW=0",
                           "--distbench-rounds=10", "-rf", "--junitxml=report.xml",
                           f"--distbench-markdown={summary}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*distbench A/B: 10 interleaved rounds (ABBA) per benchmark*DISTBENCH_TEST_SLOW=0*",
        "*distbench A/B: CPU worlds run packed on one CPU (--distbench-bind=auto*",
        "performance regression against the live baseline*per-round min * us -> * us (median "
        "of 10 interleaved rounds); ratio *(95 % CI *), threshold 10 %; one-sided Wilcoxon "
        "signed-rank p = *",
        "*distbench A/B comparison*",
        "*benchmark*baseline*candidate*ratio*p*detectable*rounds*verdict*",
        "test_work*regression",
        "FAILED *test_work*",
    ])
    # The table and its legend fit a terminal's 120 columns (the table was 159, the legend 370).
    lines = result.stdout.lines
    shown = lines[next(i for i, ln in enumerate(lines) if "distbench A/B comparison" in ln):]
    assert max(len(ln) for ln in shown[:shown.index("") + 8]) <= 120, shown
    # One test, one point: the whole family-wise 1 % is its level, split among its three looks
    # (10 rounds, then 10 and 10 more had they left a regression open), said under the table.
    legend = " ".join(result.stdout.str().split())
    assert "family-wise 1 % over 1 test (Bonferroni: each point at p < 0.0033)" in legend
    assert ("looks = a test whose rounds left a regression open ran more (up to 20, as many as "
            "its first at a time) and was judged again on all of them (its rounds column says "
            "how many); the point's level is divided among its looks (the level above is one "
            "look's)") in legend
    assert ("A/B against the live baseline (environment DISTBENCH_TEST_SLOW=0): 1 regression, "
            "0 improvements, 0 unchanged of 1 point(s); family-wise 1 %") in legend
    # The failed testcase says what failed, as properties.
    props = junit_properties(bench.path / "report.xml")["test_work[gloo-ws2]"]
    # A 2x slowdown is shown beyond the threshold by the first 10 rounds: no more run.
    assert props["verdict"] == "regression" and props["rounds"] == "10"
    assert float(props["level"]) == pytest.approx(0.01 / 3, rel=1e-5)  # JUnit's 6 digits
    assert float(props["p"]) < 0.01 / 3
    assert float(props["ratio_low"]) > 1.1 and float(props["ratio"]) <= float(props["ratio_high"])
    assert "detectable" in props
    # The markdown holds the A/B table, its verdict and legend.
    text = summary.read_text()
    assert "## pytest-distbench A/B comparison" in text
    row = next(line for line in text.splitlines() if line.startswith("| test_work"))
    assert row.rstrip(" |").endswith("**regression**")
    assert "family-wise 1 % over 1 test " in text and "inconclusive = not shown" in text


def test_under_xdist_the_controller_shows_the_workers_ab_table(bench, distbench_run,
                                                                  monkeypatch):
    # The controller judges nothing itself: its table, digest and markdown are the workers'
    # (it printed no A/B table at all).
    monkeypatch.setenv("DISTBENCH_TEST_SLOW", "1")
    summary = bench.path / "summary.md"
    result = distbench_run("--distbench", "--distbench-baseline-env=DISTBENCH_TEST_SLOW=0",
                           "--distbench-rounds=8", "--distbench-extra-rounds=0", "-n", "2",
                           f"--distbench-markdown={summary}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*distbench A/B comparison*",
                                 "*benchmark*baseline*candidate*ratio*p*detectable*rounds*",
                                 "test_work*  8  regression"])
    said = " ".join(result.stdout.str().split())
    assert "family-wise 1 % over 1 test (Bonferroni: each point at p < 0.01)" in said
    assert ("A/B against the live baseline (environment DISTBENCH_TEST_SLOW=0): 1 regression, "
            "0 improvements, 0 unchanged of 1 point(s)") in said
    row = next(line for line in summary.read_text().splitlines()
               if line.startswith("| test_work"))
    assert row.rstrip(" |").endswith("**regression**")


def test_a_a_passes_and_the_variants_never_share_ranks(bench, distbench_run):
    out = bench.path / "run.json"
    result = distbench_run("--distbench", "--distbench-baseline-env=DISTBENCH_TEST_MARK=base",
                           "--distbench-rounds=4", f"--distbench-json={out}",
                           "--junitxml=report.xml")
    result.assert_outcomes(passed=1)
    # Four rounds give no finite 95 % interval (the signed-rank test's smallest two-sided p is
    # 2 x 2^-4): a regression is left open, so 4 more run, and 4 more where 8 left it open
    # (12 can reach 2^-12 < 0.01 / 3); an unchanged build reads unchanged, or inconclusive
    # where a round's ratio reached past the threshold.
    result.stdout.fnmatch_lines(["*test_work*[ui]n*", "*worlds started:*baseline*candidate*"])
    props = junit_properties(bench.path / "report.xml")["test_work[gloo-ws2]"]
    assert props["verdict"] in ("unchanged", "inconclusive") and props["rounds"] in ("8", "12")
    rounds = int(props["rounds"])
    notes = notes_by_mark(bench)
    base_pids = {pid for pid, _ in notes["base"]}
    cand_pids = {pid for pid, _ in notes["-"]}
    assert len(base_pids) == 2 and len(cand_pids) == 2 and not base_pids & cand_pids
    record = json.loads(out.read_text())["benchmarks"][0]["distbench"]
    # The candidate's record: every round's samples, and the paired verdict beside them.
    assert record["iterations"] == rounds * 10
    assert record["ab"]["rounds"] == rounds and record["ab"]["verdict"] == props["verdict"]
    assert record["ab"]["level"] == pytest.approx(0.01 / 3)  # a look's share of the point's
    assert len(record["ab"]["baseline_p50_s"]) == rounds
    # The verdict's per-round statistic, each round's fastest iteration, is in the record.
    assert record["ab"]["round_statistic"] == "min"
    for side in ("baseline", "candidate"):
        rounds = record["ab"][f"{side}_rounds"]
        assert record["ab"][f"{side}_round_s"] == [s["min"] for s in rounds]
    # --distbench-bind=auto packs both variants' ranks, every one on the same single CPU.
    lines = (bench.path / "notes.txt").read_text().split()
    assert len(set(lines[3::4])) == 1 and "," not in lines[3]


def test_baseline_python_runs_its_own_installation(bench, distbench_run, tmp_path):
    # A "second environment": this interpreter behind a wrapper that puts another `flavour`
    # library first on its path and marks its processes.
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "flavour.py").write_text("NAME = 'baseline-lib'\n")
    wrapper = tmp_path / "python"
    wrapper.write_text(
        f"#!/bin/sh\nDISTBENCH_TEST_MARK=wrapped PYTHONPATH={lib}:$PYTHONPATH "
        f'exec {sys.executable} "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    result = distbench_run("--distbench", f"--distbench-baseline-python={wrapper}",
                           "--distbench-rounds=4", "--distbench-extra-rounds=0")
    result.assert_outcomes(passed=1)
    # The header wraps at 120 columns: the path may go to the next line, whole.
    header = " ".join(result.stdout.str().split())
    assert f"live baseline: python {wrapper} (torch " in header
    notes = notes_by_mark(bench)
    assert {lib_name for _, lib_name in notes["wrapped"]} == {"baseline-lib"}
    assert {lib_name for _, lib_name in notes["-"]} == {"candidate-lib"}


def broken_interpreter(tmp_path) -> str:
    script = tmp_path / "broken-python"
    script.write_text("#!/bin/sh\necho 'ImportError: no torch here' >&2\nexit 1\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--distbench-baseline-python=/no/such/python"],
         "ERROR: --distbench-baseline-python: /no/such/python: no such file"),
        (["--distbench-baseline-python={broken}"],
         "ERROR: --distbench-baseline-python: *broken-python: cannot run the benchmark ranks*"
         "ImportError: no torch here"),
        (["--distbench-baseline-env=NOEQUALS"],
         "ERROR: --distbench-baseline-env: 'NOEQUALS' is not NAME=VALUE"),
        (["--distbench-baseline-env=A=1", "--distbench-rounds=1"],
         "ERROR: --distbench-rounds: invalid count '1': must be >= 2"),
        (["--distbench-rounds=8"], "ERROR: --distbench-rounds: only means something in A/B*"),
        (["--distbench-baseline-env=A=1", "--distbench-extra-rounds=-1"],
         "ERROR: --distbench-extra-rounds: invalid count '-1': must be >= 0"),
        (["--distbench-baseline-env=A=1", "--distbench-extra-rounds=some"],
         "ERROR: --distbench-extra-rounds: invalid count 'some': expected an integer"),
        (["--distbench-extra-rounds=0"],
         "ERROR: --distbench-extra-rounds: only means something in A/B*"),
        (["--distbench-append"], "ERROR: --distbench-append: needs --distbench-save=NAME*"),
        (["--distbench-save=x", "--distbench-keep-runs=5"],
         "ERROR: --distbench-keep-runs: only means something with --distbench-append*"),
        (["--distbench-baseline-env=A=1", "--distbench-compare=x.json"],
         "ERROR: --distbench-compare: cannot be combined with A/B mode*"),
    ],
    ids=["missing-python", "broken-python", "bad-env", "rounds-1", "rounds-alone",
         "extra-rounds-negative", "extra-rounds-text", "extra-rounds-alone", "append-alone",
         "keep-runs-alone", "ab-and-compare"],
)
def test_bad_ab_options_are_usage_errors_before_any_rank(bench, distbench_run, tmp_path,
                                                         args, message):
    args = [a.format(broken=broken_interpreter(tmp_path)) for a in args]
    result = distbench_run("--distbench", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert not (bench.path / "notes.txt").exists()


@pytest.mark.extended
def test_append_adds_runs_and_one_run_says_its_noise_is_unknown(bench, distbench_run):
    path = bench.path / "baselines" / "main.json"
    distbench_run("--distbench", "--distbench-save=main").assert_outcomes(passed=1)
    result = distbench_run("--distbench", "--distbench-save=main", "--distbench-append")
    result.assert_outcomes(passed=1)
    said = " ".join(result.stdout.str().split())  # wrapped at spaces to 120 columns
    assert f"appended this run to baseline {path} (2 run(s)" in said, said
    doc = json.loads(path.read_text())
    assert doc["distbench"]["schema_version"] == document.SCHEMA_VERSION
    assert len(doc["distbench"]["history"]) == 1
    # Two runs are not enough to learn a spread: the single-run verdict, and it says so.
    single = distbench_run("--distbench", "--distbench-compare=main")
    single.stdout.fnmatch_lines(["*stored run(s): not gateable, run-to-run noise unknown*",
                                 "*change*p-value*detectable*verdict*",
                                 "*run-to-run noise unknown*"])


def test_a_history_of_three_runs_judges_against_the_learned_spread(bench, distbench_run):
    first = bench.path / "first.json"
    distbench_run("--distbench", f"--distbench-json={first}").assert_outcomes(passed=1)
    # Two earlier runs of the same benchmark, 2 % either side of the real one.
    real = document.read_document(first)
    stored = None
    for factor in (1.02, 0.98, 1.0):
        run = copy.deepcopy(real)
        for bench_entry in run["benchmarks"]:
            bench_entry["distbench"]["summary"]["p50"] *= factor
        stored = history.with_history(run, stored)
    path = bench.path / "baselines" / "main.json"
    document.write_document(stored, path, overwrite=False)
    learned = distbench_run("--distbench", "--distbench-compare=main")
    learned.stdout.fnmatch_lines([
        "*stored runs: verdicts judge each p50 against the learned run-to-run spread of its*",
        "*change*p-value*detectable*verdict*",
        "test_work*",
    ])
    # The p-value column holds the z's p, not the z; the legend says where it comes from.
    compared = learned.stdout.str().split("distbench comparison", 1)[1].splitlines()
    row = next(line for line in compared if line.startswith("test_work"))
    assert " z " not in row
    said = " ".join(learned.stdout.str().split())
    assert ("the robust z of log p50 against the stored runs' spread, its one-sided p from "
            "Student's t") in said


def test_help_lists_the_ab_and_history_options(pytester):
    result = pytester.runpytest_subprocess("--help")
    assert result.ret == 0, result.stderr.str()
    text = result.stdout.str()  # --help's groups set the order; each option is there
    for option in ("--distbench-threshold=VALUE", "e.g. 5%", "--distbench-baseline-env=K=V ...",
                   "--distbench-baseline-python=PATH", "--distbench-rounds=N",
                   "--distbench-append"):
        assert option in text, option
    # The rounds a run takes when the option is not given, not "none".
    from pytest_distbench.harness.ab.mode import DEFAULT_ROUNDS

    rounds = " ".join(text.split("--distbench-rounds=N", 1)[1].split("--distbench-")[0].split())
    assert f"(default: {DEFAULT_ROUNDS} in A/B mode" in rounds, rounds
