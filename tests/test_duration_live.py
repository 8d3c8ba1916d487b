"""Duration-bound runs and live reports, with real ranks (docs/duration-and-pressure.md)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
from launching import torchrun_tmpdir

LINE = re.compile(
    r"^  live: Time: (?P<t>[\d.]+)s Msgs: (?P<n>\d+) Rate: (?P<rate>[\d.]+)msg/s "
    r"\((?P<us>[\d.]+|-)us\) "
    r"(?P<mbps>[\d.]+)MB/s"
    r"( TOTALS: Time: (?P<T>[\d.]+)s Msgs: (?P<N>\d+) Rate: (?P<RATE>[\d.]+)msg/s)?$"
)


def totals(m: re.Match) -> tuple[int, float]:
    """A line's TOTALS (messages, seconds): its own interval's on the first line."""
    return (int(m["N"]), float(m["T"])) if m["N"] else (int(m["n"]), float(m["t"]))

# Three messages per iteration of 1000 bytes each: the lines must count messages, not calls.
BENCH = """
import pytest, torch, torch.distributed as dist

@pytest.mark.distbench
def test_messages(distbench):
    x = torch.zeros(250)
    distbench.measure(lambda: dist.all_reduce(x), nbytes=1000,
                      figures={"messages_per_iteration": 3})
"""


def _record(path) -> dict:
    return json.loads(path.read_text())["benchmarks"][0]["distbench"]


def _lines(text: str) -> list[re.Match]:
    return [m for m in (LINE.match(line) for line in text.splitlines()) if m]


def run_noting_live_lines(argv: list[str], cwd, timeout: float
                          ) -> tuple[int, str, list[float], float]:
    """Run a session, reading its output as it is written: (exit code, output, the moment
    each live line arrived, the moment the session ended), all on time.monotonic()."""
    process = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env={**os.environ, **torchrun_tmpdir(argv, cwd)})
    arrivals, output = [], []
    try:
        assert process.stdout is not None
        for line in process.stdout:  # bounded: the session itself ends (timeout below)
            output.append(line)
            if LINE.match(line.rstrip("\n")):
                arrivals.append(time.monotonic())
        process.wait(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, "".join(output), arrivals, time.monotonic()


def test_duration_run_stops_near_its_duration_with_every_rank_agreeing(pytester, distbench_run):
    # Rank 1's iterations are ten times slower than rank 0's and the body does no
    # communication, so only the harness keeps the two ranks' counts together.
    pytester.makepyfile(
        """
        import time, pytest

        @pytest.mark.distbench(duration="1.5s")
        def test_uneven(distbench):
            pause = 0.002 if distbench.rank == 1 else 0.0002
            distbench.measure(lambda: time.sleep(pause))
        """
    )
    out = pytester.path / "out.json"
    result = distbench_run("--distbench", "--world-size=2", f"--distbench-json={out}")
    result.assert_outcomes(passed=1)
    record = _record(out)
    assert record["duration_s"] == 1.5
    assert [len(s) for s in record["rank_samples"]] == [record["iterations"]] * 2
    slow = sum(record["rank_samples"][1])  # the rank that sets the pace
    # Its sleeps fill most of the run (the rest is the loop and the chunk agreements)...
    assert 1.0 <= slow <= 1.5 + 1.0, slow
    # ...and the run lasted its duration on both ranks (the sanity rules hold it to that).
    assert all(1.35 <= e <= 2.5 for e in record["elapsed_s"]), record["elapsed_s"]


def test_a_rank_whose_clock_started_first_does_not_stop_the_others_short(
        pytester, distbench_run):
    # Rank 2 has no work (as a rank off a message path) and its clock is set 0.3 s ahead
    # once the run starts, as if it left the start barrier first: the working ranks must
    # still time the whole duration by their own clocks (CI: a 0.2 s run stopped at 0.17 s).
    pytester.makepyfile(
        """
        import time, types, pytest
        from pytest_distbench.harness.ranks import measure

        def skewed_clock():
            real, calls = time.perf_counter, []

            def perf_counter():
                calls.append(None)
                return real() + (0.3 if len(calls) > 1 else 0.0)
            return types.SimpleNamespace(perf_counter=perf_counter)

        @pytest.mark.distbench(duration="0.6s", warmup=1)
        def test_skewed(distbench, monkeypatch):
            if distbench.rank == 2:
                run_for = measure.Distbench._run_for

                def skewed_run_for(self, *args):
                    monkeypatch.setattr(measure, "time", skewed_clock())
                    return run_for(self, *args)
                monkeypatch.setattr(measure.Distbench, "_run_for", skewed_run_for)
            pause = 0.0 if distbench.rank == 2 else 0.05
            distbench.measure(lambda: time.sleep(pause))
        """
    )
    out = pytester.path / "out.json"
    result = distbench_run("--distbench", "--world-size=3", f"--distbench-json={out}")
    result.assert_outcomes(passed=1)
    elapsed = _record(out)["elapsed_s"]
    assert elapsed[0] >= 0.6 * 0.9 and elapsed[1] >= 0.6 * 0.9, elapsed


@pytest.mark.extended
def test_live_lines_in_order_with_consistent_totals(pytester, distbench_run):
    pytester.makepyfile(BENCH)
    out = pytester.path / "out.json"
    # -s here; the test below reads a session with capture on.
    result = distbench_run("-s", "-v", "--distbench", "--world-size=2",
                           "--distbench-duration=2.5s", "--distbench-report-every=0.5s",
                           f"--distbench-json={out}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_messages[[]gloo-ws2[]]*", "  live: Time: *"])
    lines = _lines(result.stdout.str())
    assert 5 <= len(lines) <= 6, result.stdout.str()
    total_n, total_t = 0, 0.0
    for k, m in enumerate(lines, start=1):
        n, t = int(m["n"]), float(m["t"])
        big_n, big_t = totals(m)
        assert (m["N"] is None) == (k == 1)  # the first line says its totals once
        total_n += n
        total_t += t
        assert big_n == total_n and n % 3 == 0
        assert big_t == pytest.approx(total_t, abs=0.02)
        if k <= 5:
            assert big_t == pytest.approx(0.5 * k, abs=0.25)  # each line closes its interval
        # The printed times are rounded to 10 ms: a rate agrees with them within what that
        # rounding allows, which is more than a few percent on a short tail interval.
        assert t > 0 and float(m["rate"]) == pytest.approx(n / t, rel=0.01 + 0.005 / t)
        assert float(m["mbps"]) == pytest.approx(float(m["rate"]) * 1000 / 1e6, abs=0.006)
        if m["RATE"]:
            assert float(m["RATE"]) == pytest.approx(big_n / big_t, rel=0.01 + 0.005 / big_t)
    record = _record(out)
    reports = record["live_reports"]
    assert [3 * r["iterations"] for r in reports] == [totals(m)[0] for m in lines]
    assert totals(lines[-1])[0] <= 3 * record["iterations"]
    assert all(r["delay_s"] < 5 for r in reports)


def test_live_lines_arrive_while_the_test_runs_with_capture_on(pytester, leak_tag):
    """Read the session's output as it is written: lines come one interval apart, not at
    the end, although pytest captures the test's output."""
    pytester.makepyfile(BENCH)
    returncode, text, arrivals, finished = run_noting_live_lines(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--capture=fd", "-v",
         "--distbench", "--world-size=2", "--distbench-duration=4s",
         "--distbench-report-every=1s"], pytester.path, timeout=120)
    assert returncode == 0, text
    assert 4 <= len(arrivals) <= 5, text
    # Spread over the run at about one per second; printed at the end they would be bunched.
    # (A fifth line is the tail after 4 s, if the run went on for more than 0.1 s.)
    arrivals = arrivals[:4]
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
    assert min(gaps) > 0.5 and arrivals[-1] - arrivals[0] > 2.4, gaps
    assert finished - arrivals[0] > 2.4


def test_report_every_also_reports_a_run_without_duration(pytester, distbench_run):
    pytester.makepyfile(BENCH)
    # A fixed count of iterations with reports: lines without a duration. (Without either
    # option there are none: see the pressure tests' sessions.)
    result = distbench_run("-v", "--distbench", "--world-size=2", "--distbench-iterations=1500",
                           "--distbench-report-every=0.1s")
    result.assert_outcomes(passed=1)
    assert _lines(result.stdout.str())


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--distbench-duration=soon"], "--distbench-duration: invalid duration 'soon'*"),
        (["--distbench-duration=20s", "--distbench-timeout=10s"],
         "--distbench-duration (20 s) must be shorter than --distbench-timeout (10 s)*"),
        (["--distbench-report-every=-1s"], "--distbench-report-every: *"),
    ],
)
def test_bad_duration_options_are_usage_errors(pytester, options, message):
    pytester.makepyfile(BENCH)
    result = pytester.runpytest_subprocess("--distbench", *options)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
