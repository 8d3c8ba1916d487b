"""Options, markers, ids and skipping, with real pytest sessions."""

from __future__ import annotations

import pytest

BENCH = """
import pytest, torch, torch.distributed as dist

@pytest.mark.distbench
def test_sum(distbench, nbytes):
    x = torch.zeros(max(nbytes // 4, 1))
    distbench.measure(lambda: dist.all_reduce(x), nbytes=nbytes)

def test_plain():
    assert True
"""


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("--world-size=0", "--world-size: invalid world size '0'"),
        ("--world-size=two", "--world-size: invalid world size"),
        ("--backend=tcp", "--backend: unknown backend 'tcp'"),
        ("--tensor-size=12QB", "--tensor-size: invalid size '12QB'"),
        ("--distbench-timeout=-1s", "--distbench-timeout:"),
        ("--distbench-dtype=float7", "--distbench-dtype: unknown dtype 'float7'"),
        # Finite but past what select(), poll() and sleep() take: every world failed with an
        # OverflowError before.
        ("--distbench-timeout=1e300", "--distbench-timeout: invalid duration '1e300': at most "
         "7 days"),
        ("--distbench-budget=1e300", "--distbench-budget: invalid duration '1e300': at most "),
        ("--distbench-duration=1e300", "--distbench-duration: invalid duration '1e300': at most "),
        ("--distbench-report-every=200h", "--distbench-report-every: invalid duration '200h': "
         "at most "),
    ],
)
def test_bad_option_is_a_usage_error_naming_it(pytester, option, message):
    pytester.makepyfile(BENCH)
    result = pytester.runpytest_subprocess("--distbench", option, timeout=120)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}*"])
    output = result.stderr.str() + result.stdout.str()
    assert "Traceback" not in output and "INTERNALERROR" not in output


def test_bad_ini_value_names_the_ini_key(pytester):
    pytester.makeini("[pytest]\ndistbench_world_size = 0\n")
    pytester.makepyfile(BENCH)
    result = pytester.runpytest_subprocess("--distbench")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: ini option distbench_world_size: invalid world size*"])


def test_bad_marker_argument_fails_collection_naming_the_test(pytester):
    pytester.makepyfile(
        """
        import pytest
        @pytest.mark.distbench(world_sise=2)
        def test_typo(distbench):
            pass
        """
    )
    result = pytester.runpytest_subprocess("--distbench")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*@pytest.mark.distbench on test_typo: unknown argument(s) "
                                 "world_sise*"])
    assert "Traceback" not in result.stdout.str()


def test_without_flag_benchmarks_skip_with_one_line_reason(pytester):
    pytester.makepyfile(BENCH)
    result = pytester.runpytest_subprocess("-rs")
    result.assert_outcomes(passed=1, skipped=1)
    assert "distbench benchmark: run with --distbench" in result.stdout.str()


def test_ids_sweep_and_marker_narrowing(pytester, leak_tag):
    pytester.makepyfile(
        BENCH
        + """
@pytest.mark.distbench(world_size=[2, 3], tensor_size="1KiB")
def test_narrowed(distbench, nbytes):
    assert distbench.world_size in (2, 3) and nbytes == 1024
"""
    )
    result = pytester.runpytest_subprocess(
        "--distbench", "--world-size=2,4", "--tensor-size=4B:64B:x4,1KiB",
        "--distbench-iterations=3", "--distbench-warmup=1", "--collect-only", "-q",
    )
    listed = result.stdout.str()
    for test_id in [
        "test_sum[gloo-ws2-4B]",
        "test_sum[gloo-ws2-16B]",
        "test_sum[gloo-ws2-64B]",
        "test_sum[gloo-ws2-1KiB]",
        "test_sum[gloo-ws4-4B]",
        "test_sum[gloo-ws4-1KiB]",
        "test_narrowed[gloo-ws2-1KiB]",
    ]:
        assert f"::{test_id}\n" in listed, test_id
    # The marker allows 2 and 3, the command line asks for 2 and 4: only 2 runs.
    assert "test_narrowed[gloo-ws4" not in result.stdout.str()
    assert "test_narrowed[gloo-ws3" not in result.stdout.str()


def test_a_smaller_test_runs_at_its_own_size_inside_a_larger_request(pytester, leak_tag):
    pytester.makepyfile(
        """
import pytest

@pytest.mark.distbench(world_size=2)
def test_pair(distbench):
    pass

@pytest.mark.distbench(world_size=[3, 5])
def test_odd(distbench):
    pass

@pytest.mark.distbench(world_size=[9])
def test_big(distbench):
    pass
"""
    )
    result = pytester.runpytest_subprocess("--distbench", "--world-size=8", "--collect-only",
                                           "-q")
    listed = result.stdout.str()
    assert "::test_pair[gloo-ws2]" in listed  # the pair runs inside the 8-rank request
    assert "::test_odd[gloo-ws5]" in listed  # the largest size that fits
    result = pytester.runpytest_subprocess("--distbench", "--world-size=8", "-rs")
    result.assert_outcomes(passed=2, skipped=1)
    # A test that fits nowhere says which sizes it supports.
    result.stdout.fnmatch_lines(["*selects no world_size this test supports (it supports "
                                 "world_size=[[]9[]]*"])


def test_unavailable_backend_skips_with_reason(pytester, leak_tag):
    pytester.makepyfile(BENCH)
    result = pytester.runpytest_subprocess(
        "--distbench", "--backend=nccl,mpi", "--tensor-size=4B", "-rs"
    )
    result.assert_outcomes(passed=1, skipped=2)
    out = result.stdout.str()
    assert "backend nccl needs CUDA: no GPU is visible" in out or "needs one GPU per rank" in out
    assert "backend mpi is not built into this torch" in out


def test_a_backend_that_cannot_run_is_skipped_before_any_world_and_not_gated(pytester,
                                                                            leak_tag):
    """Skipped at collection: the test never reaches the call phase, and the session's
    family-wise rate is shared among the tests that can run (one here, not two)."""
    pytester.makepyfile(BENCH)
    pytester.runpytest_subprocess("--distbench", "--tensor-size=4B",
                                  "--distbench-save=main").assert_outcomes(passed=2)
    result = pytester.runpytest_subprocess(
        "--distbench", "--backend=gloo,mpi", "--tensor-size=4B", "--distbench-compare=main",
        "-rs", "-v")
    result.assert_outcomes(passed=2, skipped=1)
    out = " ".join(result.stdout.str().split())
    assert "backend mpi is not built into this torch" in out
    assert "family-wise 1 % over 1 test " in out, out


def test_a_session_whose_every_point_skipped_says_why_even_with_q(pytester, leak_tag):
    """pytest -q alone said "2 skipped" (issue 41, a two-rank nccl world on one GPU): the
    session's own summary gives one line per reason with its count."""
    pytester.makepyfile("""
        import pytest, torch, torch.distributed as dist

        @pytest.mark.distbench
        def test_sum(distbench, nbytes):
            distbench.measure(lambda: dist.all_reduce(torch.zeros(1)), nbytes=4)

        @pytest.mark.distbench
        def test_max(distbench, nbytes):
            distbench.measure(lambda: dist.all_reduce(torch.zeros(1)), nbytes=4)
    """)
    result = pytester.runpytest_subprocess(
        "--distbench", "--backend=mpi", "--world-size=3", "--tensor-size=4B", "-q")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*= distbench results =*",
                                 "2 skipped: backend mpi is not built into this torch*"])
    assert "Traceback" not in result.stdout.str()


@pytest.mark.parametrize(("env", "message"), [
    ({"WORLD_SIZE": str(10**30)}, "WORLD_SIZE=1000000000000000000000000000000 is above 65536"),
    ({"WORLD_SIZE": "3000000"}, "WORLD_SIZE=3000000 is above 65536"),
    ({"RANK": "1_0", "WORLD_SIZE": "20"}, "RANK='1_0' is not an integer"),
    ({"RANK": "\u0661"}, "RANK=*is not an integer"),
    ({"MASTER_ADDR": ""}, "MASTER_ADDR is empty"),
    ({"RANK": None, "WORLD_SIZE": None, "SLURM_PROCID": "0", "SLURM_NTASKS": "1",
      "SLURM_NODELIST": "localhost", "SLURM_JOB_ID": "\u00b2"}, "SLURM_JOB_ID=*not an integer"),
])
def test_absurd_launcher_variable_is_a_usage_error_naming_it(pytester, monkeypatch, leak_tag,
                                                             env, message):
    """Before: an INTERNALERROR (OverflowError in listen, ValueError), a hang waiting for a rank
    10 that is rank 1_0, or a store at an empty address."""
    launched = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": "1", **env}
    for name, value in launched.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    pytester.makepyfile(BENCH)
    result = pytester.runpytest_subprocess("--distbench", timeout=60)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --distbench-launcher=auto: *{message}*"])
    assert "INTERNALERROR" not in result.stderr.str() + result.stdout.str()
