"""Worlds and buffers too large for the machine, and more ranks than cores (issue 19 item 4)."""

from __future__ import annotations

import json
import os
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_distbench.harness.local import limits
from pytest_distbench.harness.local.limits import Machine

GIB = 1 << 30
ROOMY = Machine(memory_available=24 * GIB, tasks_left=30000, files_limit=20000, files_open=40)

BENCH = """
import pytest, torch, torch.distributed as dist

@pytest.mark.distbench
def test_sum(distbench, nbytes):
    x = torch.zeros(max(nbytes // 4, 1))
    distbench.measure(lambda: dist.all_reduce(x), nbytes=nbytes)
"""


def test_a_small_world_fits_and_a_huge_one_names_every_limit():
    assert limits.world_problems(8, ROOMY) == []
    problems = limits.world_problems(100000, ROOMY)
    assert len(problems) == 3
    assert "memory" in problems[0] and "24 GiB is available" in problems[0]
    assert "tasks" in problems[1] and "30000 more may start" in problems[1]
    assert "open files" in problems[2] and "ulimit -n is 20000" in problems[2]


def test_unknown_limits_are_not_checked():
    blind = Machine(memory_available=None, tasks_left=None, files_limit=None, files_open=0)
    assert limits.world_problems(10**6, blind) == []
    assert limits.memory_problem(2, 1 << 40, blind) is None


def test_the_buffers_of_a_point_count_per_rank():
    assert limits.memory_problem(2, 1 << 30, ROOMY) is None  # 2 x (150 MiB + 3 GiB)
    problem = limits.memory_problem(8, 1 << 30, ROOMY)
    assert "3 buffers of 1 GiB" in problem


@given(world_size=st.integers(1, 10**6), memory=st.integers(0, 1 << 50),
       tasks=st.integers(0, 10**6), files=st.integers(1, 10**6))
def test_a_world_that_fits_fits_with_a_rank_less(world_size, memory, tasks, files):
    machine = Machine(memory, tasks, files, 10)
    if not limits.world_problems(world_size, machine) and world_size > 1:
        assert not limits.world_problems(world_size - 1, machine)


def test_oversubscription_is_more_ranks_than_usable_cores():
    cores = limits.usable_cores()
    assert limits.oversubscription([cores]) is None
    assert limits.oversubscription([2, cores + 1, None]) == {"ranks": cores + 1, "cores": cores}
    assert "scheduling as much as communication" in limits.oversubscription_line(
        {"ranks": 8, "cores": 2})


def _quick_usage_error(result: pytest.RunResult, started: float, message: str) -> None:
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, output
    result.stderr.fnmatch_lines([f"ERROR: {message}*--distbench-force starts it anyway*"])
    # Refused before the forkserver starts: no rank was forked, nothing took long.
    assert time.monotonic() - started < 30
    assert "worlds started" not in output and "INTERNALERROR" not in output


def test_world_size_beyond_the_machine_is_refused_before_any_rank(pytester, distbench_run):
    pytester.makepyfile(BENCH)
    started = time.monotonic()
    result = distbench_run("--distbench", "--world-size=2,100000", "--tensor-size=4B",
                           timeout=60)
    _quick_usage_error(result, started, "--world-size=2,100000: a world of 100000 ranks does "
                       "not fit this machine: about 14* TiB of memory (150 MiB a rank)*")


def test_ini_world_size_names_the_ini_key(pytester, distbench_run):
    pytester.makeini("[pytest]\ndistbench_world_size = 100000\n")
    pytester.makepyfile(BENCH)
    started = time.monotonic()
    result = distbench_run("--distbench", timeout=60)
    _quick_usage_error(result, started, "ini option distbench_world_size: a world of 100000")


def test_a_marker_world_beyond_the_machine_is_refused_at_collection(pytester, distbench_run):
    pytester.makepyfile(BENCH + """
@pytest.mark.distbench(world_size=100000)
def test_huge(distbench):
    pass
""")
    started = time.monotonic()
    result = distbench_run("--distbench", "--tensor-size=4B", timeout=60)
    _quick_usage_error(result, started, "test_*.py::test_huge?gloo-ws100000?: its world of "
                       "100000 ranks does not fit this machine")


def test_tensor_size_beyond_memory_is_refused_naming_the_option(pytester, distbench_run):
    pytester.makepyfile(BENCH)
    started = time.monotonic()
    result = distbench_run("--distbench", "--tensor-size=4B,1TiB", timeout=60)
    _quick_usage_error(result, started, "--tensor-size=4B,1TiB: a world of 2 ranks with points "
                       "of 1 TiB does not fit this machine: about 6 TiB of memory (150 MiB + 3 "
                       "buffers of 1 TiB a rank)")


def test_force_starts_it_anyway(pytester, distbench_run):
    # The body allocates nothing: forcing a real 1 TiB point would take the machine down.
    pytester.makepyfile("""
import pytest

@pytest.mark.distbench
def test_point(distbench, nbytes):
    assert nbytes == 1 << 40
""")
    result = distbench_run("--distbench", "--tensor-size=1TiB", "--distbench-force")
    result.assert_outcomes(passed=1)


@pytest.fixture
def one_core():
    """Pytest sessions started meanwhile inherit an affinity of one CPU."""
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no CPU affinity on this platform")
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    yield
    os.sched_setaffinity(0, before)


def test_more_ranks_than_cores_is_said_once_and_recorded(pytester, distbench_run, one_core):
    pytester.makepyfile(BENCH)
    result = distbench_run("--distbench", "--tensor-size=4B", "--distbench-budget=0.05s",
                           "--distbench-json=out.json")
    result.assert_outcomes(passed=1)
    line = ("distbench: WARNING: 2 ranks on 1 usable core: ranks outnumber cores, so the "
            "figures measure scheduling as much as*")  # ...communication, on the next line
    result.stdout.fnmatch_lines([line])
    assert result.stdout.str().count("ranks outnumber cores") == 1
    environment = json.loads((pytester.path / "out.json").read_text())["distbench"][
        "environment"]
    assert environment["oversubscribed"] == {"ranks": 2, "cores": 1}


def test_marker_worlds_beyond_the_header_are_said_at_collection(pytester, distbench_run,
                                                                 one_core):
    pytester.makepyfile("""
import pytest

@pytest.mark.distbench(world_size=3)
def test_three(distbench):
    pass
""")
    result = distbench_run("--distbench")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["distbench: WARNING: 2 ranks on 1 usable core*",
                                 "*distbench: WARNING: 3 ranks on 1 usable core*"])


def test_as_many_ranks_as_cores_says_nothing(pytester, distbench_run, one_core):
    pytester.makepyfile(BENCH)
    result = distbench_run("--distbench", "--world-size=1", "--tensor-size=4B",
                           "--distbench-budget=0.05s", "--distbench-json=out.json")
    result.assert_outcomes(passed=1)
    assert "outnumber" not in result.stdout.str()
    environment = json.loads((pytester.path / "out.json").read_text())["distbench"][
        "environment"]
    assert "oversubscribed" not in environment


def test_an_xdist_worker_refuses_the_world_when_it_would_start(pytester, distbench_run):
    # Workers do not refuse at collection (a usage error there would take the worker down):
    # the check before each world starts is theirs.
    pytester.makepyfile("""
import pytest

@pytest.mark.distbench(world_size=100000)
def test_huge(distbench):
    pass
""")
    started = time.monotonic()
    result = distbench_run("--distbench", "-n", "1", timeout=120)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*could not start the world: 100000 ranks do not fit this "
                                 "machine now: about 14* TiB of memory*; --distbench-force "
                                 "starts it anyway*"])
    assert time.monotonic() - started < 60


THREADS = """
import pytest, torch

@pytest.mark.distbench
def test_threads(distbench):
    distbench.record([0.001] * 6, figures={"threads": torch.get_num_threads()})
"""


@pytest.mark.parametrize("bind", ["core", pytest.param("none", marks=pytest.mark.extended)])
def test_ranks_share_the_cores_intra_op_threads_as_torchrun_does(
        pytester, distbench_run, one_core, monkeypatch, bind):
    pytester.makepyfile(THREADS)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    result = distbench_run("--distbench", "--world-size=2", f"--distbench-bind={bind}",
                           "--distbench-json=out.json")
    result.assert_outcomes(passed=1)
    document = json.loads((pytester.path / "out.json").read_text())
    # Two ranks on one core: one thread each (torch alone would give each the machine's).
    assert document["benchmarks"][0]["distbench"]["figures"]["threads"] == 1
    assert document["distbench"]["environment"]["rank_intra_op_threads"] == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's choice wins
    result = distbench_run("--distbench", "--world-size=2", f"--distbench-bind={bind}",
                           "--distbench-json=out3.json")
    result.assert_outcomes(passed=1)
    document = json.loads((pytester.path / "out3.json").read_text())
    assert document["benchmarks"][0]["distbench"]["figures"]["threads"] == 3
