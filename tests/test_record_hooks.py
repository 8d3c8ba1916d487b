"""The record is written once (issue 38, item 5): every reader at the end of the session (the
results file, the pytest_distbench_record hooks, the gate's comparison) sees the same sealed
interval; and a hook is handed a copy (issue 39, item 13): one that raises fails the session
once, in one line naming its plugin; one that changes the record changes nothing else."""

from __future__ import annotations

import json

import pytest
from launching import TORCHRUN, run_all

from conftest import WITH_REVISITS

BENCH = """
import time, pytest

@pytest.mark.parametrize("ms", [1, 2, 3])
def test_sleep(distbench, ms):
    distbench.measure(lambda: time.sleep(ms / 1000))
"""

# Every record as its hook saw it, then a hook that mutates and one that raises; and what the
# stored gate's end-of-session comparison was handed (its per-test verdicts read the interval
# so far, Session.view, by design).
CONFTEST = """
import json
from pathlib import Path

from pytest_distbench.results.comparison.gate import Gate

_comparison = Gate.comparison


def _comparison_seen(self, current_document, threshold):
    with open(Path(__file__).parent / "gate.jsonl", "a") as seen:
        for benchmark in current_document["benchmarks"]:
            seen.write(json.dumps(benchmark["distbench"]) + "\\n")
    return _comparison(self, current_document, threshold)


Gate.comparison = _comparison_seen


def pytest_distbench_record(config, record):
    with open(config.rootpath / "seen.jsonl", "a") as seen:
        seen.write(json.dumps(record) + "\\n")
    record["summary"]["p50"] = 123.0
    record["name"] = "renamed"
    record["samples"] = "garbage"
"""

RAISING = """
class Broken:
    def pytest_distbench_record(self, config, record):
        raise ValueError("boom")

def pytest_configure(config):
    config.pluginmanager.register(Broken(), "broken-records")
"""


def _run(pytester, distbench_run, *args):
    pytester.makepyfile(BENCH)
    out = pytester.path / "r.json"
    result = distbench_run("--distbench", "--world-size=3", "--distbench-iterations=10",
                           f"--distbench-json={out}", *args)
    return result, _records(out)


def _records(path) -> dict[str, dict]:
    """A results file's records by id."""
    return {b["distbench"]["id"]: b["distbench"]
            for b in json.loads(path.read_text())["benchmarks"]}


# The modes a record is made in, and the interval each seals: the session's (its revisits'
# noise), an A/B record's rounds', and under xdist the controller's, as in local mode.
MODES = {
    "local": ([WITH_REVISITS], "session"),
    "ab": (["--distbench-baseline-env=DISTBENCH_UNUSED=1", "--distbench-rounds=2"], "rounds"),
    "xdist": ([WITH_REVISITS, "-n", "2"], "session"),
}


def _lines(path) -> dict[str, dict]:
    return {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}


def _launched(pytester, *args: str):
    """The benchmarks under torchrun at 3 ranks (launcher mode), and the records of its file."""
    out = pytester.path / "r.json"
    [done] = run_all([(TORCHRUN + ["--standalone", "--nproc-per-node=3", "-m", "pytest",
                                   "-p", "no:cacheprovider", "--distbench",
                                   "--distbench-iterations=10",
                                   f"--distbench-json={out}", *args], {})],
                     pytester.path, timeout=300)
    assert done.returncode == 0, done.output
    assert "3 passed" in done.output, done.output
    return _records(out)


@pytest.mark.parametrize("mode", [
    "local", pytest.param("ab", marks=pytest.mark.extended),
    pytest.param("xdist", marks=pytest.mark.extended),
    pytest.param("launcher", marks=pytest.mark.extended)])
def test_the_gate_the_file_and_the_hook_read_one_sealed_interval(pytester, distbench_run,
                                                                   leak_tag, mode):
    """One interval per record, final, the same in the results file, in every hook and (where
    a stored baseline can gate: not in A/B mode, which is its own baseline) in what the gate's
    end-of-session comparison reads."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(BENCH)
    gated = mode != "ab"
    if gated:
        saved = distbench_run("--distbench", "--world-size=3", "--distbench-iterations=10",
                              "--distbench-save=before")
        saved.assert_outcomes(passed=3)
        (pytester.path / "seen.jsonl").unlink()  # the baseline's records, seen by the hook
    compare = ["--distbench-compare=before"] if gated else []
    if mode == "launcher":
        records, basis = _launched(pytester, *compare), "session"
    else:
        extra, basis = MODES[mode]
        result, records = _run(pytester, distbench_run, *extra, *compare)
        result.assert_outcomes(passed=3)
    seen = _lines(pytester.path / "seen.jsonl")
    assert seen.keys() == records.keys()
    gate = _lines(pytester.path / "gate.jsonl") if gated else {}
    assert gate.keys() == (records.keys() if gated else set())
    for record_id, record in records.items():
        # One interval: final, the same in the hook, in the file and in the gate.
        assert record["p50_ci"]["basis"] == basis
        assert seen[record_id]["p50_ci"] == record["p50_ci"]
        assert seen[record_id] == record
        if gated:
            assert gate[record_id]["p50_ci"] == record["p50_ci"]
        # What the hook changed reached nothing.
        assert record["name"] != "renamed" and record["summary"]["p50"] != 123.0
        assert isinstance(record["samples"], list)
    if mode == "launcher":  # a launched session cannot revisit: the run's own interval, named
        assert all(r["p50_ci"]["noise_missing"] == "launcher" for r in records.values())


@pytest.mark.parametrize("mode", ["local", "ab"])
def test_a_raising_hook_fails_the_session_once_naming_its_plugin(pytester, distbench_run,
                                                                 mode):
    pytester.makeconftest(RAISING)
    extra = ["--distbench-baseline-env=DISTBENCH_UNUSED=1", "--distbench-rounds=2"] if (
        mode == "ab") else ["--distbench-revisits=0"]
    result, records = _run(pytester, distbench_run, *extra)
    result.assert_outcomes(passed=3)  # the tests themselves passed
    assert result.ret == 1
    out = result.stdout.str()
    line = ("pytest_distbench_record of plugin 'broken-records' raised ValueError: boom "
            "(record ")
    assert out.count(line) == 1, out
    assert len(records) == 3  # nothing lost
    if mode == "ab":
        # An A/B record's interval is its rounds' (its candidate rounds are its runs).
        assert all(r["p50_ci"]["basis"] == "rounds" for r in records.values())


def test_revisits_have_an_upper_bound(pytester, distbench_run):
    pytester.makepyfile(BENCH)
    result = distbench_run("--distbench", "--distbench-revisits=1000000000")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*--distbench-revisits*must be <= 64*"])
    assert "Traceback" not in result.stderr.str()


# The second test's report interrupts the session, as Ctrl-C would; no revisit is due during
# the loop (a gap longer than the session), so any revisit would be a closing one.
INTERRUPTING = """
import pytest_distbench.harness.controller.revisits as revisits

revisits.REVISIT_GAP_S = 1e6

def pytest_runtest_logreport(report):
    if report.when == "call" and report.nodeid.endswith("-2]"):
        raise KeyboardInterrupt
"""


def test_an_interrupt_starts_no_revisit_and_keeps_what_was_measured(pytester, distbench_run):
    pytester.makeconftest(INTERRUPTING)
    pytester.makepyfile(BENCH)
    out = pytester.path / "r.json"
    result = distbench_run("--distbench", "--world-size=3", "--distbench-iterations=10",
                           f"--distbench-json={out}", WITH_REVISITS)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert "revisit(s)" not in result.stdout.str()
    records = [b["distbench"] for b in json.loads(out.read_text())["benchmarks"]]
    assert len(records) == 2
    assert all(r["p50_ci"]["basis"] == "session" and not r.get("revisits") for r in records)
