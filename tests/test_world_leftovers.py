"""A world is reused only as its last test left it: fit (process group, no leftovers) or rebuilt.

A destroyed process group is the world's to rebuild (the test that destroyed it passes); a
thread or child process a test left running fails that test, naming it, and the world is
rebuilt so the next test is not measured beside it (docs/failure-model.md).
"""

from __future__ import annotations

import textwrap

from launching import launch

LEFTOVERS = """
import os, subprocess, threading, time
import pytest, torch, torch.distributed as dist

def spin(stop):
    while not stop.is_set():
        pass

@pytest.mark.distbench
def test_destroys_group(distbench):
    dist.barrier()
    dist.destroy_process_group()

@pytest.mark.distbench
def test_after_destroy(distbench):
    x = torch.ones(4)
    dist.all_reduce(x)
    assert x[0].item() == distbench.world_size

@pytest.mark.distbench
def test_leaves_thread(distbench):
    os.environ["LEFTOVER_OWNER"] = str(os.getpid())
    if distbench.rank == 1:
        threading.Thread(target=spin, args=(threading.Event(),), name="spinner",
                         daemon=True).start()
    dist.barrier()

@pytest.mark.distbench
def test_after_thread(distbench):
    # A fresh rank process: neither the thread nor the environment of the last one is here.
    assert "spinner" not in [t.name for t in threading.enumerate()]
    assert os.environ.get("LEFTOVER_OWNER") is None

@pytest.mark.distbench
def test_leaves_child(distbench):
    subprocess.Popen(["sleep", "300"])
    dist.barrier()

@pytest.mark.distbench
def test_after_child(distbench):
    dist.barrier()

@pytest.mark.distbench
def test_stops_what_it_starts(distbench):
    stop = threading.Event()
    thread = threading.Thread(target=spin, args=(stop,), name="joined")
    thread.start()
    child = subprocess.Popen(["sleep", "300"])
    os.environ["CLEAN_OWNER"] = str(os.getpid())
    stop.set()
    thread.join()
    child.kill()
    child.wait()

@pytest.mark.distbench
def test_after_clean(distbench):
    # Nothing was left, so the world was kept: the same rank process runs this test.
    assert os.environ.get("CLEAN_OWNER") == str(os.getpid())
"""


def test_destroyed_group_rebuilt_leftovers_fail_their_test(pytester, distbench_run):
    pytester.makepyfile(textwrap.dedent(LEFTOVERS))
    result = distbench_run("--distbench", "--world-size=2", "--distbench-timeout=60", "-p",
                           "no:randomly", "-rA")
    result.stdout.fnmatch_lines_random([
        "PASSED *::test_destroys_group*",
        "PASSED *::test_after_destroy*",
        "FAILED *::test_leaves_thread*",
        "PASSED *::test_after_thread*",
        "FAILED *::test_leaves_child*",
        "PASSED *::test_after_child*",
        "PASSED *::test_stops_what_it_starts*",
        "PASSED *::test_after_clean*",
    ])
    result.stdout.fnmatch_lines([
        "*rank 1 passed, then:*",
        "*[[]rank 1[]] the test left running in this rank: thread 'spinner' (daemon)*",
        "*The world is rebuilt.*",
    ])
    result.stdout.fnmatch_lines(["*[[]rank 0[]] the test left running in this rank: child "
                                 "process * (sleep 300, killed)*"])
    assert "rank 0] the test left running in this rank: thread" not in result.stdout.str()
    result.assert_outcomes(passed=6, failed=2)


def test_launcher_ranks_rejoin_after_a_test_destroyed_the_group(pytester, leak_tag):
    # Rank 1 alone destroys its group: rank 0's verdict makes every rank rejoin a new one.
    pytester.makepyfile(textwrap.dedent("""
        import pytest, torch, torch.distributed as dist

        @pytest.mark.distbench
        def test_destroys_group(distbench):
            dist.barrier()
            if distbench.rank == 1:
                dist.destroy_process_group()

        @pytest.mark.distbench
        def test_after(distbench):
            x = torch.ones(4)
            dist.all_reduce(x)
            assert x[0].item() == distbench.world_size
    """))
    ranks = launch(pytester.path, "slurm", 2, ["--distbench", "--distbench-timeout=60"])
    assert [r.returncode for r in ranks] == [0, 0], ranks[0].output + ranks[1].output
    assert "2 passed" in ranks[0].output, ranks[0].output
