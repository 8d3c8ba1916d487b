"""What new families build on: list settings that parametrize an argument, family figures, and
samples a test times itself (distbench.record)."""

from __future__ import annotations

import json


def test_credits_parametrize_and_narrow(pytester, distbench_run):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.distbench
        def test_any(distbench, credits):
            distbench.measure(lambda: None, family="probe", figures={"credits_seen": credits})

        @pytest.mark.distbench(credits=[4])
        def test_only_four(distbench, credits):
            assert credits == 4
            distbench.measure(lambda: None, family="probe")
        """
    )
    out = pytester.path / "run.json"
    result = distbench_run("--distbench", "--distbench-credits=1,4", "--distbench-iterations=3",
                           f"--distbench-json={out}", "-v")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*test_any*credits1*PASSED*", "*test_any*credits4*PASSED*",
                                 "*test_only_four*credits4*PASSED*"])
    records = [b["distbench"] for b in json.loads(out.read_text())["benchmarks"]]
    seen = sorted(r["figures"]["credits_seen"] for r in records if r["figures"])
    assert seen == [1, 4]
    assert sorted(r["params"]["credits"] for r in records) == [1, 4, 4]


def test_bad_credits_is_a_usage_error(pytester, distbench_run):
    pytester.makepyfile("def test_x(): pass")
    result = distbench_run("--distbench", "--distbench-credits=0")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*--distbench-credits*"])
    assert "Traceback" not in result.stderr.str()


def test_record_takes_slowest_rank_per_sample(pytester, distbench_run):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.distbench
        def test_self_timed(distbench, rank):
            # rank 1 is the slower one in the second sample only
            samples = [0.001, 0.002 if rank == 0 else 0.005, 0.003]
            distbench.record(samples, family="self_timed", nbytes=1000,
                             figures={"rank": rank, "note": "from rank 0"})
        """
    )
    out = pytester.path / "run.json"
    result = distbench_run("--distbench", "--world-size=2", f"--distbench-json={out}")
    result.assert_outcomes(passed=1)
    (record,) = [b["distbench"] for b in json.loads(out.read_text())["benchmarks"]]
    assert record["family"] == "self_timed"
    assert record["samples"] == [0.001, 0.005, 0.003]
    assert record["rank_samples"] == [[0.001, 0.002, 0.003], [0.001, 0.005, 0.003]]
    assert record["figures"] == {"rank": 0, "note": "from rank 0"}
    assert record["warmup"] == 0
    assert abs(record["algbw_gbps"] - 1000 / 0.003 / 1e9) < 1e-12


def test_record_with_unequal_sample_counts_fails(pytester, distbench_run):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.distbench
        def test_uneven(distbench, rank):
            distbench.record([0.001] * (rank + 1), family="self_timed")
        """
    )
    result = distbench_run("--distbench", "--world-size=2")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*different distbench.measure() calls*"])
