"""A requested output that was not written fails the session (outputs.py)."""

from __future__ import annotations

import json

import pytest

BENCH = """
import time, pytest

@pytest.mark.distbench(iterations=3, warmup=1)
def test_sleep(distbench):
    distbench.measure(lambda: time.sleep(0.001))
"""


def test_a_results_file_that_cannot_be_written_fails_the_session(pytester, distbench_run):
    pytester.makepyfile(test_bench=BENCH)
    (pytester.path / "not_a_dir").write_text("a file where a directory should be")
    target = pytester.path / "not_a_dir" / "run.json"
    result = distbench_run("--distbench", "--world-size=2", f"--distbench-json={target}")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"*ERROR: could not write results file {target}*"])


def test_the_loser_of_two_saves_of_one_baseline_fails(pytester, distbench_run):
    """Another session saved the same name while this one ran: this run's data is stored
    nowhere, so it must not look green."""
    baseline = pytester.path / "baselines" / "main.json"
    pytester.makepyfile(test_bench=BENCH, test_other=f"""
import json, pathlib

def test_another_session_saves_first():
    path = pathlib.Path({str(baseline)!r})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({{"written": "by the other session"}}))
""")
    result = distbench_run("--distbench", "--world-size=2", "--distbench-save=main")
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"*ERROR: baseline {baseline} appeared during the run*"])
    assert json.loads(baseline.read_text()) == {"written": "by the other session"}


def test_written_outputs_leave_the_exit_status_alone(pytester, distbench_run):
    pytester.makepyfile(test_bench=BENCH)
    result = distbench_run("--distbench", "--world-size=2", "--distbench-json=run.json",
                           "--distbench-save=main")
    assert result.ret == pytest.ExitCode.OK
    assert (pytester.path / "run.json").exists()
    assert (pytester.path / "baselines" / "main.json").exists()
