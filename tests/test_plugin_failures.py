"""Failure handling with real ranks: raise, hang, death by signal, skip, Ctrl-C.

Each scenario is followed by a passing test in the same session, which proves the broken
world was torn down and rebuilt. The leak_tag fixture fails any test that leaves a process.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from leaks import is_running, processes_with_tag

AFTER = """
@pytest.mark.distbench
def test_after(distbench):
    x = torch.ones(4)
    dist.all_reduce(x)
    assert x[0].item() == distbench.world_size
"""


def _durations(result: pytest.RunResult) -> dict[str, float]:
    found = {}
    for line in result.stdout.lines:
        match = re.match(r"\s*([\d.]+)s call\s+\S+::(\S+)", line)
        if match:
            found[match.group(2)] = float(match.group(1))
    return found


def test_rank_raises_reports_that_rank_and_releases_the_others(pytester, distbench_run):
    pytester.makepyfile(
        textwrap.dedent("""
        import pytest, torch, torch.distributed as dist

        @pytest.mark.distbench
        def test_raises(distbench):
            if distbench.rank == 1:
                raise ValueError("boom from the second rank")
            dist.barrier()  # rank 0 would wait here forever for rank 1
        """)
        + AFTER
    )
    result = distbench_run("--distbench", "--world-size=2", "--distbench-timeout=60",
                           "--durations=0", "-vv")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*rank 1 raised:*",
        "*[[]rank 1[]] *raise ValueError(\"boom from the second rank\")*",
        "*[[]rank 1[]] ValueError: boom from the second rank*",
        "*ranks [[]0[]] were still running after that and were stopped*",
    ])
    # Released after the grace period, not after the 60 s timeout.
    assert _durations(result)["test_raises[gloo-ws2]"] < 20


def test_hang_times_out_with_stacks_and_world_is_rebuilt(pytester, distbench_run):
    pytester.makepyfile(
        textwrap.dedent("""
        import time, pytest, torch, torch.distributed as dist

        def wait_forever():
            while True:
                time.sleep(1)

        @pytest.mark.distbench
        def test_hangs(distbench):
            if distbench.rank == 0:
                wait_forever()
            dist.barrier()
        """)
        + AFTER
    )
    result = distbench_run("--distbench", "--world-size=2", "--distbench-timeout=4",
                           "--durations=0")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*timed out after 4 s (--distbench-timeout): ranks [[]0, 1[]] did not finish*",
        "*--- rank 0 ---*",
        "*[[]rank 0[]] *in wait_forever*",
        "*[[]rank 0[]] *in test_hangs*",
        "*--- rank 1 ---*",
        "*[[]rank 1[]] *in test_hangs*",
    ])
    # Each stack is shown once, under its header: not again in the ranks' captured output.
    # (Under CI=true pytest repeats the whole message in the short summary: not counted.)
    text = result.stdout.str().split("short test summary info")[0]
    assert text.count("[rank 0] Current thread") == 1 and text.count(
        "[rank 1] Current thread") == 1, text
    assert _durations(result)["test_hangs[gloo-ws2]"] < 15


def test_rank_killed_by_signal_is_detected_quickly(pytester, distbench_run):
    pytester.makepyfile(
        textwrap.dedent("""
        import os, signal, pytest, torch, torch.distributed as dist

        @pytest.mark.distbench
        def test_killed(distbench):
            if distbench.rank == 2:
                os.kill(os.getpid(), signal.SIGKILL)
            dist.barrier()
        """)
        + AFTER
    )
    result = distbench_run("--distbench", "--world-size=3", "--distbench-timeout=120",
                           "--durations=0")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*rank 2 died during the test: killed by SIGKILL (exit code -9)*",
    ])
    assert _durations(result)["test_killed[gloo-ws3]"] < 15


def test_skip_inside_ranks_skips_the_test(pytester, distbench_run):
    pytester.makepyfile(
        textwrap.dedent("""
        import pytest, torch, torch.distributed as dist

        @pytest.mark.distbench
        def test_skips(distbench):
            pytest.skip("needs a feature this machine lacks")
        """)
        + AFTER
    )
    result = distbench_run("--distbench", "--world-size=2", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*needs a feature this machine lacks*"])


RANKS_END_EARLY = """
    import pytest, torch, torch.distributed as dist

    @pytest.mark.distbench
    def test_xfails(distbench):
        pytest.xfail("known to fail here")

    @pytest.mark.distbench
    def test_skips_in_the_last_rank_only(distbench):
        if distbench.rank == distbench.world_size - 1:
            pytest.skip("this rank lacks a feature")
        dist.barrier()  # the others wait here for the rank that skipped
"""


def test_xfail_and_a_skip_in_one_rank_end_the_test_as_pytest_would(pytester, distbench_run):
    """pytest.xfail in a body is an xfail with its reason, not a failure; a skip in some ranks
    only skips the test, naming them (the same under torchrun: test_launcher_run.py)."""
    pytester.makepyfile(textwrap.dedent(RANKS_END_EARLY) + AFTER)
    result = distbench_run("--distbench", "--world-size=2", "-rsx")
    result.assert_outcomes(passed=1, skipped=1, xfailed=1)
    result.stdout.fnmatch_lines(["XFAIL *test_xfails*known to fail here*"])
    result.stdout.fnmatch_lines(
        ["SKIPPED *this rank lacks a feature (in ranks [[]1[]] of 2 only)*"])


FORKS = """
    import os, pytest, torch, torch.distributed as dist

    @pytest.mark.distbench
    def test_forks(distbench):
        pid = os.fork()
        if pid == 0:
            return  # the child comes back into the harness
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        raise AssertionError("the rank's own process answers")
"""


def test_a_forked_child_never_answers_for_its_rank(pytester, distbench_run):
    """A child that a body forked and that returns exits at once; the rank's own process
    reports (the same in launcher mode: test_launcher_run.py)."""
    pytester.makepyfile(textwrap.dedent(FORKS) + AFTER)
    result = distbench_run("--distbench", "--world-size=2", "--distbench-timeout=30")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*[[]rank 1[]] AssertionError: the rank's own process answers*"])


def test_rank_output_is_shown_on_failure_prefixed_with_rank(pytester, distbench_run):
    pytester.makepyfile(
        textwrap.dedent("""
        import pytest

        @pytest.mark.distbench
        def test_prints(distbench):
            print(f"hello from {distbench.rank}")
            assert distbench.rank != 1, "rank one disagrees"
        """)
    )
    result = distbench_run("--distbench", "--world-size=2")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*[[]rank 1[]] AssertionError: rank one disagrees*",
        "*Captured ranks call*",
        "*[[]rank 0[]] hello from 0*",
        "*[[]rank 1[]] hello from 1*",
    ])


# kill -9 with the extended set: tests/test_hostile_environment.py's killed-session test
# SIGKILLs a controller and holds its rank to exiting (and the next session to removing its
# folders). Ctrl-C and SIGTERM are the ends a session handles itself, and one path: SIGTERM
# is raised as the KeyboardInterrupt Ctrl-C raises (session.interrupt_on_sigterm), so Ctrl-C
# joins the extended set; the killed-session test also ends a live session with a real SIGINT.
@pytest.mark.parametrize("signum", [pytest.param(signal.SIGINT, marks=pytest.mark.extended),
                                    signal.SIGTERM,
                                    pytest.param(signal.SIGKILL, marks=pytest.mark.extended)],
                         ids=["ctrl-c", "sigterm", "kill-9"])
def test_controller_interrupted_or_killed_leaves_no_rank_behind(pytester, leak_tag, signum,
                                                                 request):
    ready = pytester.path / "ready"
    ready.mkdir()
    # The session's TMPDIR (rank logs, the forkserver's folder); short: a socket lives there.
    # Removed however the test ends (its own check below reads it first).
    tmp = Path(tempfile.mkdtemp(prefix="dbt-"))
    request.addfinalizer(lambda: shutil.rmtree(tmp, ignore_errors=True))
    pytester.makepyfile(
        f"""
        import os, time, pytest

        @pytest.mark.distbench
        def test_sleeps(distbench):
            open(os.path.join({str(ready)!r}, str(os.getpid())), "w").close()
            time.sleep(600)
        """
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--distbench",
         "--world-size=4"],
        cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    try:
        deadline = time.monotonic() + 120
        while len(os.listdir(ready)) < 4 and time.monotonic() < deadline:
            time.sleep(0.2)
        rank_pids = [int(name) for name in os.listdir(ready)]
        assert len(rank_pids) == 4, process.stdout.read().decode() if process.poll() else ""
        process.send_signal(signum)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    if signum != signal.SIGKILL:  # SIGTERM ends the session as Ctrl-C does
        assert b"KeyboardInterrupt" in output, output.decode()
        assert process.returncode == pytest.ExitCode.INTERRUPTED
        assert sorted(os.listdir(tmp)) == [], "temporary files left behind"
    deadline = time.monotonic() + 10
    while processes_with_tag(leak_tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    alive = [pid for pid in rank_pids if is_running(pid)]
    assert not alive, f"rank processes survived {signum.name}: {alive}"


def test_processes_a_test_body_started_end_with_its_world(pytester, distbench_run, leak_tag):
    pytester.makepyfile(
        """
        import subprocess, time, pytest

        @pytest.mark.distbench(timeout="3s")
        def test_starts_a_child_then_hangs(distbench):
            subprocess.Popen(["sleep", "300"])
            time.sleep(60)
        """
    )
    result = distbench_run("--distbench", "--world-size=2")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*timed out after 3 s*"])
    # leak_tag: the `sleep` children carry the session's tag and must be gone
