"""The built-in collectives suite through the plugin, with real ranks."""

from __future__ import annotations


def test_builtin_suite_runs_checks_and_prints_seven_tables(pytester, distbench_run):
    result = distbench_run(
        "--distbench", "--pyargs", "pytest_distbench.suites.test_collectives", "--world-size=3",
        "--tensor-size=4B,1KiB", "--distbench-iterations=5", "--distbench-warmup=1",
    )
    result.assert_outcomes(passed=13)
    out = result.stdout.str()
    for family in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
                   "all_to_all", "barrier"):
        assert f"# {family}  backend=gloo  ranks=3  device=cpu" in out, family
    # nccl-tests byte accounting: 4 B requested, all_gather moves one float per rank = 12 B.
    result.stdout.fnmatch_lines([
        "# all_gather  backend=gloo  ranks=3  device=cpu  | time: p50 of the slowest "
        "rank per iteration ± 95 % CI",
        "*",
        "*",
        "*12 B*3*float32*0*",
    ])


def test_wrong_result_fails_the_test_and_shows_in_wrong_column(pytester, distbench_run):
    pytester.makepyfile(
        """
        import pytest, torch, torch.distributed as dist

        @pytest.mark.distbench(iterations=3)
        def test_lies(distbench):
            x = torch.zeros(4)
            def check():
                x.fill_(distbench.rank)
                dist.all_reduce(x)
                return int((x != 99).sum())  # never 99: every element is wrong
            distbench.measure(lambda: dist.all_reduce(x), nbytes=16, family="lies", check=check)
        """
    )
    result = distbench_run("--distbench", "--world-size=2")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*8 wrong element(s) in the checked result*a collective that computes the wrong "
        "answer is a failure, not a fast number*",
        "# lies  backend=gloo  ranks=2  device=cpu  | time: p50 of the slowest "
        "rank per iteration ± 95 % CI",
        "*",
        "*",
        "*16 B*-*-*8*",
    ])
