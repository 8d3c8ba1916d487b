"""Launcher mode with real processes: torchrun (one node, two nodes), simulated srun and mpirun
environments, mismatched collection, a raising rank, a hanging rank.

Every test starts the ranks itself and checks, through the leak_tag fixture, that no process
outlives it. Their sessions run with the suite's revisits off (tests/conftest.py) and, where
they measure, a fixed count (ARGS): they check what the launcher does with its ranks. What a
user runs, each launcher at the product's defaults, is tests/test_modes_at_defaults.py, and the
rank killed mid-session below runs at the defaults too.
"""

from __future__ import annotations

import re
import socket
import textwrap

import pytest
import torch
from launching import (
    PYTEST,
    TORCHRUN,
    benchmark_ids,
    free_port,
    launch,
    read_results,
    run_all,
    torchrun_node,
)

from conftest import PLUGINS_OFF

BENCH = textwrap.dedent("""
    import os, pytest, torch, torch.distributed as dist

    @pytest.mark.distbench
    def test_all_reduce(distbench, nbytes):
        x = torch.ones(nbytes // 4)
        distbench.measure(lambda: dist.all_reduce(x), nbytes=nbytes, family="all_reduce",
                          busbw_factor=2 * (distbench.world_size - 1) / distbench.world_size)

    @pytest.mark.distbench
    def test_fixtures(distbench, rank, world_size, process_group, tcp_store):
        assert dist.get_rank() == rank and dist.get_world_size() == world_size
        tcp_store.set(f"k{rank}", str(os.getpid()))
        tcp_store.wait([f"k{r}" for r in range(world_size)])
        pids = {tcp_store.get(f"k{r}") for r in range(world_size)}
        assert len(pids) == world_size  # one process per rank, each running its own body

    @pytest.mark.distbench(world_size=[3])
    def test_three_only(distbench):
        pass
""")
# A fixed count (and the suite's revisits off) where a test checks what a launcher does with
# its ranks (placement, reports, the environment, skips), not how a run stops: its timing stays
# the same under load. Each mode's run at the product's defaults, the way a user's stops, is
# its twin in tests/test_modes_at_defaults.py.
ARGS = ["--distbench", "--tensor-size=1KiB", "--distbench-iterations=10", "-rs"]


def _check_run(output: str, path, launcher: str, ranks: int) -> None:
    assert output.count("test session starts") == 1, output  # the other ranks are quiet
    assert output.count("distbench results") == 1, output
    assert f"launcher mode: {launcher} started {ranks} ranks; this test's world size is 3" in (
        output)
    document = read_results(path)
    [record] = [b["distbench"] for b in document["benchmarks"]]
    assert record["id"].endswith(f"::test_all_reduce[gloo-ws{ranks}-1KiB]")
    assert record["world_size"] == ranks and len(record["rank_samples"]) == ranks
    assert record["placement"] == "launcher"  # the launcher placed the ranks, not the plugin
    columns = zip(*record["rank_samples"], strict=True)
    assert record["samples"] == [max(column) for column in columns]
    environment = document["distbench"]["environment"]
    assert environment["launcher"]["name"] == launcher
    assert environment["launcher"]["ranks_per_host"] == {socket.gethostname(): ranks}
    assert environment["world_sizes"] == [ranks]
    # A launched session cannot run a point again: its ± is the run's own sampling interval,
    # and it says so.
    ci = record["p50_ci"]
    assert (ci["low"], ci["high"]) == (record["sampling_ci"]["low"], record["sampling_ci"]["high"])
    assert ci["noise_missing"] == "launcher" and ci["basis"] == "session"
    assert ("each ± is the run's own sampling interval: run-to-run noise not measured under a "
            "launcher") in output


# Two ranks on one node: what test_torchrun_two_nodes_on_one_machine checks (_check_run) with
# one torchrun agent instead of two, so with the extended set; four with the slow one.
@pytest.mark.parametrize("nproc", [pytest.param(2, marks=pytest.mark.extended),
                                   pytest.param(4, marks=pytest.mark.slow)])
def test_torchrun_one_node(pytester, leak_tag, nproc):
    pytester.makepyfile(BENCH)
    path = pytester.path / "run.json"
    [done] = run_all([(TORCHRUN + ["--standalone", f"--nproc-per-node={nproc}", "-m", "pytest",
                                   "-p", "no:cacheprovider", *ARGS, f"--distbench-json={path}"],
                       {})], pytester.path, timeout=400)
    assert done.returncode == 0, done.output
    assert "2 passed, 1 skipped" in done.output
    _check_run(done.output, path, "torchrun", nproc)


# Extended: tests/test_modes_report.py's launcher mode has a test fail on rank 1 under a
# launcher (its traceback in rank 0's report), and the sigkill-no-collective-3-ranks case
# below has rank 0 report after torchrun stops the others.
@pytest.mark.extended
def test_torchrun_keeps_rank_0s_report_when_a_test_fails_on_another_rank(pytester, leak_tag):
    """torchrun stops every rank once one exits non-zero: no rank may exit before rank 0 has
    printed its report, and all exit with rank 0's status."""
    pytester.makepyfile(textwrap.dedent("""
        import pytest

        @pytest.mark.distbench
        def test_fails_on_rank_1(distbench):
            if distbench.rank == 1:
                raise ValueError("boom on rank one")

        @pytest.mark.distbench
        def test_passes(distbench):
            pass
    """))
    [done] = run_all([(TORCHRUN + ["--standalone", "--nproc-per-node=2", "-m", "pytest",
                                   "-p", "no:cacheprovider", "--distbench", "-rA"], {})],
                     pytester.path, timeout=300)
    assert done.returncode != 0
    for line in ["short test summary info", "FAILED test_torchrun_keeps_rank_0s_report",
                 "PASSED test_torchrun_keeps_rank_0s_report", "1 failed, 1 passed"]:
        assert line in done.output, done.output
    # torchrun stops the ranks still running once one exits non-zero: rank 0 is not among
    # them, it exits with its own status once its report is out.
    assert re.search(r"rank\s*: 0 \(local_rank: 0\)\s*exitcode\s*: 1 ", done.output), done.output


DIES_UNDER_TORCHRUN = """
    import ctypes, os, signal, time, pytest, torch.distributed as dist

    @pytest.mark.distbench
    def test_passes(distbench):
        distbench.measure(dist.barrier, name="barrier")

    @pytest.mark.distbench
    def test_rank_1_dies(distbench):
        for i in range(60):
            time.sleep(0.5)
            if distbench.rank == 1 and i == 2:
                {death}
            if {communicate}:
                dist.barrier()

    @pytest.mark.distbench
    def test_never_reached(distbench):
        pass
"""


@pytest.mark.parametrize("nproc, death, communicate", [
    # Extended: rank 0 learns of the death from its failing barrier; the 3-rank case below is
    # told by the launcher alone, and local mode's dying ranks (tests/test_plugin_failures.py)
    # fail a collective.
    pytest.param(2, "os.kill(os.getpid(), signal.SIGKILL)", True, marks=pytest.mark.extended),
    # No collective fails on rank 0: only the launcher's SIGTERM tells it; rank 2, stopped
    # by the launcher, is not named dead.
    (3, "os.kill(os.getpid(), signal.SIGKILL)", False),
    pytest.param(2, "ctypes.string_at(0)", True, marks=pytest.mark.extended),
], ids=["sigkill", "sigkill-no-collective-3-ranks", "segfault"])
def test_torchrun_keeps_rank_0s_report_and_outputs_when_a_rank_dies(
        pytester, leak_tag, nproc, death, communicate, monkeypatch):
    """torchrun SIGTERMs the survivors about 0.1 s after a rank dies (and SIGKILLs them 30 s
    later): rank 0 reports the dead rank, keeps the test that passed and writes the results
    file before it exits, within that grace. At the product's defaults (a budget, the
    revisits on), as a user's session is: the test before the death is measured the way the
    user's would be and still reaches the file."""
    monkeypatch.setenv("PYTEST_ADDOPTS", PLUGINS_OFF)
    pytester.makepyfile(textwrap.dedent(DIES_UNDER_TORCHRUN).format(
        death=death, communicate=communicate))
    path = pytester.path / "k.json"
    [done] = run_all([(TORCHRUN + ["--standalone", f"--nproc-per-node={nproc}", "-m", "pytest",
                                   "-p", "no:cacheprovider", "--distbench", "-rA",
                                   f"--distbench-json={path}"],
                       {})], pytester.path, timeout=150)
    assert done.returncode != 0
    assert "rank 1 (" in done.output and ") died during the test: it left without posting " \
        "its outcome" in done.output, done.output
    assert "1 failed, 1 passed, 1 skipped" in done.output, done.output
    assert "not run: test_torchrun_keeps_rank_0s_report_and_outputs_when_a_rank_dies.py::" \
        "test_rank_1_dies" in done.output
    assert "rank 2 (" not in done.output  # stopped by torchrun, not dead
    assert "forcefully exiting" not in done.output  # rank 0 was done before torchrun's SIGKILL
    assert [i.split("::", 1)[-1] for i in benchmark_ids(path)] == [
        f"test_passes[gloo-ws{nproc}]::barrier"]


def test_a_child_the_body_terminates_is_not_the_launchers_sigterm(pytester, leak_tag):
    """Each rank reads the launcher's SIGTERM in a thread: a child forked by a body gets
    SIGTERM's default back, so terminate() ends it and the rank does not take it for a stop."""
    pytester.makepyfile(textwrap.dedent("""
        import multiprocessing, time, pytest, torch.distributed as dist

        @pytest.mark.distbench
        def test_terminates_a_child(distbench):
            child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
            child.start()
            time.sleep(0.3)
            child.terminate()
            child.join(10)
            assert child.exitcode == -15
            dist.barrier()

        @pytest.mark.distbench
        def test_after(distbench):
            dist.barrier()
    """))
    ranks = launch(pytester.path, "slurm", 2, ["--distbench"], timeout=100)
    assert [r.returncode for r in ranks] == [0, 0], ranks[0].output + ranks[1].output
    assert "2 passed" in ranks[0].output


# Extended: tests/test_plugin_failures.py ends xfail and a one-rank skip locally, and
# test_other_ranks_run_tests_through_pytests_runner_with_the_same_outcomes a skip under srun.
@pytest.mark.extended
def test_torchrun_ends_xfail_and_a_skip_in_one_rank_as_pytest_would(pytester, leak_tag):
    """A skip in rank 2 only is a skip naming it, not rank 0's gloo error after rank 2 released
    it; pytest.xfail is an xfail on every rank (local mode: test_plugin_failures.py)."""
    from test_plugin_failures import AFTER, RANKS_END_EARLY

    pytester.makepyfile(textwrap.dedent(RANKS_END_EARLY) + AFTER)
    [done] = run_all([(TORCHRUN + ["--standalone", "--nproc-per-node=3", "-m", "pytest",
                                   "-p", "no:cacheprovider", "--distbench", "-rsx"], {})],
                     pytester.path, timeout=150)
    assert done.returncode == 0, done.output
    assert "1 passed, 1 skipped, 1 xfailed" in done.output, done.output
    assert re.search(r"XFAIL \S+test_xfails\S* - known to fail here", done.output), done.output
    assert "this rank lacks a feature (in ranks [2] of 3 only)" in done.output, done.output


def test_a_forked_child_never_answers_for_its_rank_in_launcher_mode(pytester, leak_tag):
    from test_plugin_failures import AFTER, FORKS

    pytester.makepyfile(textwrap.dedent(FORKS) + AFTER)
    ranks = launch(pytester.path, "slurm", 2, ["--distbench", "--distbench-timeout=30"],
                   timeout=100)
    assert [r.returncode for r in ranks] == [1, 1], ranks[0].output + ranks[1].output
    assert "1 failed, 1 passed" in ranks[0].output, ranks[0].output
    assert ranks[0].output.count("test session starts") == 1  # no child ran the session
    assert "[rank 1] AssertionError: the rank's own process answers" in ranks[0].output


@pytest.mark.extended
def test_torchrun_two_nodes_on_one_machine(pytester, leak_tag):
    """Two torchrun agents, one per "node", meet at a c10d rendezvous and form one world.
    Extended: its defaults twin (tests/test_modes_at_defaults.py) runs two nodes in the
    default set; this one adds the fixtures and a world size the launch does not have."""
    pytester.makepyfile(BENCH)
    path = pytester.path / "run.json"
    port = free_port()

    args = [*ARGS, f"--distbench-json={path}"]
    nodes = run_all([(torchrun_node(port, 1, "distbench", args), {}),
                     (torchrun_node(port, 0, "distbench", args), {})], pytester.path, timeout=400)
    assert [n.returncode for n in nodes] == [0, 0], "\n".join(n.output for n in nodes)
    reporting = [n for n in nodes if "test session starts" in n.output]
    assert len(reporting) == 1  # rank 0 lives on one node; the other node prints nothing
    _check_run(nodes[0].output + nodes[1].output, path, "torchrun", 2)


@pytest.mark.parametrize("kind", ["slurm", pytest.param("openmpi", marks=pytest.mark.extended),
                                  pytest.param("mpich", marks=pytest.mark.slow)])
def test_simulated_srun_and_mpirun(pytester, leak_tag, kind):
    pytester.makepyfile(BENCH)
    path = pytester.path / "run.json"
    no_gpu = not torch.cuda.is_available()
    backends = ["--backend=gloo,nccl"] if no_gpu else []
    ranks = launch(pytester.path, kind, 2, ARGS + backends + [f"--distbench-json={path}"])
    assert [r.returncode for r in ranks] == [0, 0], ranks[0].output + ranks[1].output
    assert ranks[1].output.strip() == ""  # quiet: its results reached rank 0
    _check_run(ranks[0].output, path, kind, 2)
    if no_gpu:  # every rank skips nccl, with the reason of the first rank that cannot run it
        assert "2 passed, 4 skipped" in ranks[0].output
        assert "rank 0 (" in ranks[0].output and "backend nccl needs CUDA" in ranks[0].output


def test_ranks_that_collect_different_tests_stop_with_the_first_difference(pytester, leak_tag):
    pytester.makepyfile(textwrap.dedent("""
        import os, pytest

        @pytest.mark.distbench
        def test_a(distbench):
            pass

        if os.environ["SLURM_PROCID"] == "1":
            @pytest.mark.distbench
            def test_only_on_rank_1(distbench):
                pass

        @pytest.mark.distbench
        def test_c(distbench):
            pass
    """))
    ranks = launch(pytester.path, "slurm", 2, ["--distbench"], timeout=200)
    assert [r.returncode for r in ranks] == [4, 4], ranks[0].output + ranks[1].output
    output = ranks[0].output
    assert "the ranks collected different tests" in output
    assert ("item 1: rank 0 has 'test_ranks_that_collect_different_tests_stop_with_the_first_"
            "difference.py::test_c[gloo-ws2]', rank 1 has 'test_ranks_that_collect_different_"
            "tests_stop_with_the_first_difference.py::test_only_on_rank_1[gloo-ws2]'") in output
    assert "passed" not in output and "failed" not in output  # no test ran


AFTER = """
@pytest.mark.distbench
def test_after(distbench):
    x = torch.ones(4)
    dist.all_reduce(x)
    assert x[0].item() == distbench.world_size
"""


def test_a_raising_rank_fails_the_test_on_rank_0_and_the_session_goes_on(pytester, leak_tag):
    pytester.makepyfile(textwrap.dedent("""
        import pytest, torch, torch.distributed as dist

        @pytest.mark.distbench
        def test_raises(distbench):
            print(f"hello from {distbench.rank}")
            if distbench.rank == 1:
                raise ValueError("boom from the second rank")
            dist.barrier()  # rank 0 would wait here for rank 1 until the timeout
    """) + AFTER)
    ranks = launch(pytester.path, "slurm", 2,
                   ["--distbench", "--distbench-timeout=120", "--durations=0"])
    output = ranks[0].output
    # The same outcome on every rank: the same exit code.
    assert [r.returncode for r in ranks] == [1, 1], output + ranks[1].output
    for line in ["rank 1 raised:",
                 '[rank 1]     raise ValueError("boom from the second rank")',
                 "[rank 1] ValueError: boom from the second rank",
                 "rank 0 failed after rank 1 did (released from waiting for it):",
                 "[rank 0] hello from 0", "[rank 1] hello from 1",
                 "1 failed, 1 passed"]:
        assert line in output, output
    durations = {line.split()[-1]: float(line.split()[0][:-1]) for line in output.splitlines()
                 if " call " in line and line.split()[0].endswith("s")}
    # Released after the grace period, not after the 120 s timeout.
    assert durations["test_a_raising_rank_fails_the_test_on_rank_0_and_the_session_goes_on.py"
                     "::test_raises[gloo-ws2]"] < 30


def test_a_hanging_rank_ends_the_session_with_stacks(pytester, leak_tag):
    pytester.makepyfile(textwrap.dedent("""
        import time, pytest, torch, torch.distributed as dist

        @pytest.mark.distbench
        def test_first(distbench):
            x = torch.ones(4)
            distbench.measure(lambda: dist.all_reduce(x), nbytes=16, name="before")

        def wait_forever():
            while True:
                time.sleep(1)

        @pytest.mark.distbench
        def test_hangs(distbench):
            if distbench.rank == 1:
                wait_forever()
            dist.barrier()

        def test_plain_after():
            pass
    """) + AFTER)
    path = pytester.path / "run.json"
    ranks = launch(pytester.path, "slurm", 2,
                   ["--distbench", "--distbench-timeout=8", "--distbench-iterations=5", "-rs",
                    f"--distbench-json={path}"], timeout=200)
    output = ranks[0].output
    assert all(r.returncode != 0 for r in ranks), output
    assert max(r.seconds for r in ranks) < 150  # promptly: not the 5-minute store timeout
    for line in ["timed out after 8 s (--distbench-timeout): ranks [0, 1] did not finish",
                 "--- rank 1 (", "in wait_forever", "--- rank 0 (", "in test_hangs",
                 "not run: test_a_hanging_rank_ends_the_session_with_stacks.py::test_hangs"
                 "[gloo-ws2] hung",
                 "1 failed, 1 passed, 2 skipped"]:
        assert line in output, output
    # What was measured before the hang is kept.
    [record] = [b["distbench"] for b in read_results(path)["benchmarks"]]
    assert record["id"].endswith("test_first[gloo-ws2]::before")


def test_the_other_ranks_exit_at_once_when_rank_0_dies(pytester, leak_tag):
    pytester.makepyfile(textwrap.dedent("""
        import os, pytest

        @pytest.mark.distbench
        def test_rank_0_dies(distbench):
            if distbench.rank == 0:
                os._exit(3)

        @pytest.mark.distbench
        def test_never_reached(distbench):
            pass
    """))
    ranks = launch(pytester.path, "openmpi", 3, ["--distbench", "--distbench-timeout=120"],
                   timeout=100)
    assert ranks[0].returncode == 3
    for other in ranks[1:]:
        assert other.returncode != 0, other.output
        assert "lost rank 0 during test_the_other_ranks_exit_at_once_when_rank_0_dies.py::" \
               "test_rank_0_dies[gloo-ws3] (" in other.output, other.output
        # At once: not after the test's 120 s timeout and the verdict margin.
        assert other.seconds < 60, other.output


def test_a_rank_that_dies_is_reported_as_dead_at_once_not_as_a_hang(pytester, leak_tag):
    pytester.makepyfile(textwrap.dedent("""
        import os, signal, time, pytest

        @pytest.mark.distbench
        def test_rank_1_dies(distbench):
            if distbench.rank == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(1)

        @pytest.mark.distbench
        def test_never_reached(distbench):
            pass
    """))
    ranks = launch(pytester.path, "openmpi", 3, ["--distbench", "--distbench-timeout=120", "-rA"],
                   timeout=100)
    rank0 = ranks[0]
    assert rank0.returncode == 1, rank0.output
    assert "rank 1 (" in rank0.output and ") died during the test: it left without posting " \
        "its outcome" in rank0.output, rank0.output
    assert "timed out" not in rank0.output
    assert "1 failed, 1 skipped" in rank0.output
    # At once: not after the test's 120 s timeout.
    assert rank0.seconds < 60, rank0.output
    assert ranks[1].returncode == -9
    assert ranks[2].returncode != 0 and ranks[2].seconds < 60, ranks[2].output


def test_forced_launcher_mode_without_a_launcher_is_a_usage_error(pytester, leak_tag):
    pytester.makepyfile("def test_nothing():\n    pass\n")
    [done] = run_all([(PYTEST + ["--distbench", "--distbench-launcher=env"], {})],
                     pytester.path, timeout=120)
    assert done.returncode == 4
    assert "--distbench-launcher=env: no launcher found in the environment" in done.output
    [done] = run_all([(PYTEST + ["--distbench", "--distbench-launcher=mpi"], {})],
                     pytester.path, timeout=120)
    assert done.returncode == 4
    assert "--distbench-launcher: unknown launcher mode 'mpi'" in done.output


def test_a_failure_on_rank_0_alone_fails_every_rank_and_maxfail_stops_them_all(
        pytester, leak_tag):
    """The other ranks do not wait for rank 0's verdict after a test: a test that passes on
    rank 1 but fails on rank 0 is counted on rank 1 when it reads the verdict (before the next
    test), so the exit codes agree, and with -x rank 1 stops where rank 0 stopped."""
    pytester.makepyfile(textwrap.dedent("""
        import pytest

        @pytest.mark.distbench
        def test_fails_on_rank_0(distbench):
            assert distbench.rank != 0, "only rank 0 fails"

        @pytest.mark.distbench
        def test_next(distbench):
            open(f"ran_next_{distbench.rank}", "w").close()
    """))
    ranks = launch(pytester.path, "slurm", 2, ["--distbench"], timeout=200)
    assert [r.returncode for r in ranks] == [1, 1], ranks[0].output + ranks[1].output
    assert "1 failed, 1 passed" in ranks[0].output
    assert "[rank 0] AssertionError: only rank 0 fails" in ranks[0].output
    assert sorted(p.name for p in pytester.path.glob("ran_next_*")) == ["ran_next_0",
                                                                      "ran_next_1"]
    for p in pytester.path.glob("ran_next_*"):
        p.unlink()
    ranks = launch(pytester.path, "slurm", 2, ["--distbench", "-x"], timeout=200)
    assert [r.returncode for r in ranks] == [1, 1], ranks[0].output + ranks[1].output
    assert "1 failed" in ranks[0].output and "passed" not in ranks[0].output
    assert list(pytester.path.glob("ran_next_*")) == []  # stopped on every rank


LIVE_BENCH = textwrap.dedent("""
    import pytest, torch, torch.distributed as dist

    @pytest.mark.distbench
    def test_messages(distbench):
        x = torch.zeros(250)
        print(f"body of rank {distbench.rank}")  # captured, not on the terminal
        distbench.measure(lambda: dist.all_reduce(x), nbytes=1000,
                          figures={"messages_per_iteration": 3})
""")


# Extended: tests/test_duration_live.py times the live lines' arrival with capture on, and
# tests/test_modes_report.py's launcher mode keeps a duration run's live reports.
@pytest.mark.extended
def test_torchrun_live_reports_reach_rank_0s_terminal_while_the_test_runs(pytester, leak_tag):
    """Launcher mode: rank 0 is the reporting process; its reporter's lines appear on its
    terminal one interval apart during the test, with pytest's output capture on."""
    from test_duration_live import LINE, run_noting_live_lines, totals

    pytester.makepyfile(LIVE_BENCH)
    path = pytester.path / "run.json"
    returncode, text, arrivals, finished = run_noting_live_lines(
        TORCHRUN + ["--standalone", "--nproc-per-node=2", "-m", "pytest", "-p",
                    "no:cacheprovider", "--capture=fd", "-v", "--distbench",
                    "--distbench-duration=4s", "--distbench-report-every=1s",
                    f"--distbench-json={path}"], pytester.path, timeout=300)
    assert returncode == 0, text
    assert "  live: done: " in text  # the closing line, with the record's totals
    assert 4 <= len(arrivals) <= 5, text  # once a second for 4 s, and maybe the tail
    gaps = [b - a for a, b in zip(arrivals[:4], arrivals[1:4], strict=False)]
    assert min(gaps) > 0.5 and arrivals[3] - arrivals[0] > 2.4, gaps  # not bunched at the end
    assert finished - arrivals[0] > 2.4
    assert "body of rank" not in text  # capture stayed on for the test's own output
    lines = [m for m in map(LINE.match, text.splitlines()) if m]
    [record] = [b["distbench"] for b in read_results(path)["benchmarks"]]
    assert [3 * r["iterations"] for r in record["live_reports"]] == [totals(m)[0] for m in lines]


LEAN_FIRST = textwrap.dedent("""
    import os, pytest

    @pytest.fixture(scope="module")
    def shared():
        yield 1
        open(f"torn_down_{os.environ['SLURM_PROCID']}", "w").close()

    @pytest.mark.distbench
    def test_with_fixture(distbench, shared):
        assert shared == 1

    @pytest.mark.distbench
    @pytest.mark.parametrize("n", [1, 2])
    def test_plain(distbench, rank, n):
        assert rank == int(os.environ["SLURM_PROCID"]) and n in (1, 2)
        assert os.environ["PYTEST_CURRENT_TEST"].endswith(" (call)")

    @pytest.mark.distbench
    @pytest.mark.skipif("True", reason="skipped on every rank")
    def test_skipped(distbench):
        pass

    @pytest.mark.distbench
    def test_fails_everywhere(distbench):
        assert False, "fails on every rank"
""")
LEAN_SECOND = textwrap.dedent("""
    import os, pytest

    @pytest.mark.distbench
    def test_after_module(distbench):
        # The first module's fixture was torn down before this module's first test.
        assert os.path.exists(f"torn_down_{os.environ['SLURM_PROCID']}")
""")
def two_ranks_that_fail(pytester, args: list[str], summary: str) -> str:
    """Rank 0's output of a 2-rank session (srun's environment) that must exit 1 everywhere
    with this summary."""
    ranks = launch(pytester.path, "slurm", 2, ["--distbench", *args], timeout=200)
    output = ranks[0].output
    assert [r.returncode for r in ranks] == [1, 1], output + ranks[1].output
    assert summary in output, output
    return output


def test_other_ranks_run_tests_through_pytests_runner_with_the_same_outcomes(
        pytester, leak_tag):
    """Ranks other than 0 run each test through pytest's own runner: plain tests, a module
    fixture, a skip mark and a failure end alike on every rank (outcomes, exit codes, the
    collectors' teardowns), with or without a conftest hook in a per-test phase."""
    pytester.makepyfile(test_first=LEAN_FIRST, test_second=LEAN_SECOND)
    for hooked in (False, True):
        if hooked:
            pytester.makeconftest("def pytest_runtest_setup(item):\n    pass\n")
        for p in pytester.path.glob("torn_down_*"):
            p.unlink()
        output = two_ranks_that_fail(pytester, ["-rs"], "1 failed, 4 passed, 1 skipped")
        assert "[rank 1] AssertionError: fails on every rank" in output, output
        assert "skipped on every rank" in output


LOGGING_BODY = textwrap.dedent("""
    import logging, pytest

    @pytest.mark.distbench
    def test_logs_and_fails(distbench):
        logging.getLogger("bench").warning("warned by rank %d", distbench.rank)
        assert distbench.rank != 0, "fails on rank 0"
""")
PLAIN_LOGGING = textwrap.dedent("""

    def test_plain_logs_and_fails():
        logging.getLogger("plain").warning("warned in a plain test")
        assert False
""")


def test_rank_0_captures_logs_only_where_local_mode_would(pytester, leak_tag):
    """Every test a distbench test: no log capture on rank 0 either, and a body's warning
    reaches the report as the rank's stderr, as in local mode. A plain test in the session
    keeps rank 0's log capture, so its records are shown as pytest shows them."""
    for plain in (False, True):
        pytester.makepyfile(test_logging=LOGGING_BODY + (PLAIN_LOGGING if plain else ""))
        ranks = launch(pytester.path, "slurm", 2, ["--distbench"], timeout=200)
        output = ranks[0].output
        assert [r.returncode for r in ranks] == [1, 1], output + ranks[1].output
        assert "[rank 1] warned by rank 1" in output, output
        if plain:
            assert "WARNING  bench:test_logging.py:5 warned by rank 0" in output, output
            assert "WARNING  plain:test_logging.py:10 warned in a plain test" in output, output
        else:
            assert "[rank 0] warned by rank 0" in output, output
            assert "Captured log call" not in output, output


def test_an_outcome_over_the_size_cap_fails_the_test_with_the_rank_named(pytester, leak_tag):
    """What a rank posts to rank 0 through the store is bounded (64 MiB; lowered here): past
    it the test fails with a message that names the rank and the limit, and the run goes on."""
    pytester.makeconftest(
        "from pytest_distbench.harness.launcher import wire\nwire.OUTCOME_LIMIT = 4000\n")
    pytester.makepyfile(textwrap.dedent("""
        import pytest

        @pytest.mark.distbench
        def test_prints_a_lot(distbench):
            if distbench.rank == 1:
                print("x" * 10000)

        @pytest.mark.distbench
        def test_after(distbench):
            pass
    """))
    output = two_ranks_that_fail(pytester, ["-rA"], "1 failed, 1 passed")
    assert "rank 1's outcome of this test is 1" in output, output
    assert "over the 4000 bytes a rank may post to rank 0 through the launcher's store" in output
