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


def test_suite_defaults_apply_only_where_the_user_says_nothing(pytester, distbench_run):
    pytester.makepyfile(
        """
        import pytest

        pytestmark = pytest.mark.distbench(defaults={"tensor_size": "1KiB,2KiB"})

        def test_sized(distbench, nbytes):
            # Sized, but moving nothing: no bandwidth, so no sanity rule to break.
            distbench.measure(lambda: None, family="probe", figures={"nbytes": nbytes})
        """
    )
    own = distbench_run("--distbench", "--distbench-iterations=2", "-v")
    own.assert_outcomes(passed=2)
    own.stdout.fnmatch_lines(["*test_sized*1KiB*PASSED*", "*test_sized*2KiB*PASSED*"])
    # A size the suite's defaults do not list still runs: defaults never narrow.
    asked = distbench_run("--distbench", "--distbench-iterations=2", "--tensor-size=1MiB+1B",
                          "-v")
    asked.assert_outcomes(passed=1)
    asked.stdout.fnmatch_lines(["*test_sized*PASSED*"])
    assert "1KiB" not in asked.stdout.str()


def test_unknown_suite_default_is_named(pytester, distbench_run):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.distbench(defaults={"tensor_sizes": "1KiB"})
        def test_sized(distbench):
            pass
        """
    )
    result = distbench_run("--distbench")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*unknown argument(s) tensor_sizes*"])


def test_families_register_in_one_module_each_without_torch_or_pytest():
    import subprocess
    import sys

    code = ("import sys; from pytest_distbench import registry; "
            "print(','.join(f.name for f in registry.families())); "
            "registry.table_style('x'); registry.completed_figures({'family': 'x'}); "
            "assert not {'torch', 'pytest'} & set(sys.modules), 'a registration imported them'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["collectives,message_rate,p2p,replay,rpc,store"]


def test_a_new_family_package_is_found_with_nothing_else_touched(tmp_path, monkeypatch):
    import pytest_distbench.families as families_package
    from pytest_distbench import registry
    from pytest_distbench.results.rendering import registered, table

    package = tmp_path / "zz_codec"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "family.py").write_text(
        "from pytest_distbench.registry import Family\n"
        "from pytest_distbench.results.rendering.plot_spec import default_spec\n"
        "FAMILY = Family(name='zz_codec', tables={'zz_codec': lambda rows: 'codec table'},\n"
        "                figures={'zz_codec': lambda record: {'ratio': 2}},\n"
        "                plots=(default_spec('zz_codec'),))\n")
    monkeypatch.setattr(families_package, "__path__", [*families_package.__path__, str(tmp_path)])
    registry.found.cache_clear()
    try:
        record = {"family": "zz_codec", "backend": "gloo", "world_size": 2, "device": "cpu",
                  "nbytes": 4, "id": "a", "name": "a", "figures": {"own": 1}}
        assert "codec table" in table.render_tables([record])
        assert registry.completed_figures(record) == {"own": 1, "ratio": 2}
        assert registered.spec_for(record).name == "zz_codec"
    finally:
        registry.found.cache_clear()


def test_an_invalid_record_fails_its_test_and_keeps_the_others(pytester, distbench_run):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.distbench
        def test_float_size(distbench):
            distbench.measure(lambda: None, nbytes=4096 / 1, family="probe")

        @pytest.mark.distbench
        def test_negative_time(distbench):
            distbench.record([1e-5, -1e-6, 2e-5], family="self_timed")

        @pytest.mark.distbench
        def test_good(distbench):
            # 4 bytes "moved" by a no-op: a bandwidth any machine's memory copy allows (4 KiB
            # in a microsecond could pass a loaded machine's measured copy speed).
            distbench.measure(lambda: None, nbytes=4, family="probe")
        """
    )
    out = pytester.path / "run.json"
    result = distbench_run("--distbench", "--distbench-iterations=3", f"--distbench-json={out}")
    result.assert_outcomes(passed=1, failed=2)
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines([
        "*test_float_size*nbytes: expected an integer >= 0 or null, got 4096.0*",
        "*test_negative_time*samples: expected a non-empty list of numbers*",
    ])
    (record,) = [b["distbench"] for b in json.loads(out.read_text())["benchmarks"]]
    assert record["name"].startswith("test_good") and record["nbytes"] == 4
