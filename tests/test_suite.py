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


def test_a_call_that_moves_no_data_prints_no_bandwidth(pytester, distbench_run):
    """One rank in place moves nothing (issue 41: 5,099,682 GB/s printed for an H200's
    all_reduce): its record says why and has no bandwidth; at 3 ranks the same call has one,
    and one rank's out-of-place all_gather (a copy) keeps its own."""
    out = pytester.path / "out.json"
    result = distbench_run(
        "--distbench", "--pyargs", "pytest_distbench.suites.test_collectives",
        "--world-size=1,3", "-k", "all_reduce or all_gather or broadcast",
        "--tensor-size=64KiB", "--distbench-iterations=5", "--distbench-warmup=1",
        "--distbench-revisits=0", f"--distbench-json={out}")
    result.assert_outcomes(passed=6)
    import json

    records = {(b["distbench"]["family"], b["distbench"]["world_size"]): b["distbench"]
               for b in json.loads(out.read_text())["benchmarks"]}
    for family in ("all_reduce", "broadcast"):
        alone, three = records[(family, 1)], records[(family, 3)]
        assert alone["moves_no_data"] == "one rank, in place: the output is the input"
        assert alone["algbw_gbps"] is None and alone["busbw_gbps"] is None
        assert three["moves_no_data"] is None and three["algbw_gbps"] > 0
    assert records[("all_gather", 1)]["moves_no_data"] is None
    assert records[("all_gather", 1)]["algbw_gbps"] > 0
    text = result.stdout.str()
    assert text.count("# algbw/busbw - = no data moved (one rank, in place: the output is the "
                      "input)") == 2
    result.stdout.fnmatch_lines(["# all_reduce  backend=gloo  ranks=1  device=cpu*", "*", "*",
                                 "*", "*64 KiB*16384*float32*-*-*"])
