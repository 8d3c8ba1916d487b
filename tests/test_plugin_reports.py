"""Reports through the plugin with real ranks: -v figures, JUnit, markdown, plots, merged sizes."""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET

import pytest

from conftest import WITH_REVISITS

SUITE = """
from pytest_distbench.suites.test_collectives import (  # noqa: F401
    distbench_effective_nbytes, test_all_gather, test_barrier)
"""


def _properties(xml_path) -> dict[str, dict[str, str]]:
    root = ET.parse(xml_path).getroot()
    return {case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")}
            for case in root.iter("testcase")}


def test_verbose_lines_junit_markdown_plots_and_merged_sizes(pytester, distbench_run):
    pytest.importorskip("matplotlib")
    pytester.makepyfile(test_suite=SUITE)
    summary = pytester.path / "summary.md"
    summary.write_text("# earlier step\n")
    result = distbench_run(
        "--distbench", "--world-size=2", "--tensor-size=4B,8B,1KiB", "-v", WITH_REVISITS,
        "--distbench-iterations=8", "--distbench-warmup=1",
        "--junitxml=report.xml", f"--distbench-markdown={summary}", "--distbench-plot=plots",
        "--benchmark-json=pb.json",
    )
    # all_gather of 4 B and 8 B at 2 ranks both move 8 B (one float per rank): run once.
    result.assert_outcomes(passed=3, deselected=1)
    out = result.stdout.str()
    # pytest-benchmark's own option writes the tests that used its fixture: none here. One
    # line says which option writes these (issue 53: it wrote nothing, silently).
    assert not (pytester.path / "pb.json").exists()
    said = [line for line in out.splitlines() if "--benchmark-json" in line]
    assert said == ["distbench: --benchmark-json wrote nothing (pytest-benchmark writes tests "
                    "using its fixture): use --distbench-json=PATH"], said
    assert len(said[0]) <= 120
    number = r"[0-9][0-9,]*(\.[0-9]+)?"
    # The -v line comes before the session measured its run-to-run noise: it shows the ± known
    # so far (here the run's own) and says the tables at the end have the session's.
    pct = rf"(± {number} %|\(unstable\))"  # the latter where a loaded machine widens it
    so_far = r" \(this run, ± so far; the tables have the session's value and ±\)"
    assert re.search(rf"test_all_gather\[gloo-ws2-4B\] PASSED p50 {number} us {pct}, busbw "
                     rf"{number} [GMK]B/s {pct}.*{so_far}", out), out
    assert re.search(rf"test_barrier\[gloo-ws2\] PASSED p50 {number} us {pct}{so_far}",
                     out), out
    assert re.search(rf"barrier +ws2 +- +p50 {number} us {pct}", out), out
    assert "test_all_gather[gloo-ws2-8B]" not in out
    assert "requested sizes 4 B, 8 B all move 8 B at 2 ranks: measured once, shown once" in out
    # The session's note on what it deselected wraps to the terminal's 120 columns too.
    note = out[out.index("distbench: 1 test(s) deselected"):].splitlines()[:2]
    assert all(len(line) <= 120 for line in note) and note[1].startswith("  "), note

    props = _properties(pytester.path / "report.xml")
    gather = props["test_all_gather[gloo-ws2-4B]"]
    assert gather["family"] == "all_gather" and gather["nbytes"] == "8"
    assert gather["requested_nbytes"] == "4,8" and gather["iterations"] == "8"
    for name in ("p50_us", "p95_us", "algbw_gbps", "busbw_gbps"):
        assert float(gather[name]) > 0, name
    # Written as the test ends, before the session measured its run-to-run noise: the run's
    # own interval, and what it is.
    assert 0 < float(gather["p50_ci_low_us"]) <= float(gather["p50_us"]) <= float(
        gather["p50_ci_high_us"])
    assert gather["p50_ci_basis"] == ("so far (the run's own: no point like it ran twice "
                                      "yet); the tables at the end have the session's")
    assert float(gather["busbw_gbps"]) == pytest.approx(float(gather["algbw_gbps"]) / 2,
                                                       rel=1e-3)  # (n-1)/n at 2 ranks
    barrier = props["test_barrier[gloo-ws2]"]
    assert float(barrier["p50_us"]) > 0 and "busbw_gbps" not in barrier

    text = summary.read_text()
    assert text.startswith("# earlier step\n\n## pytest-distbench results")
    assert ("### all\\_gather · backend gloo · 2 ranks · cpu · time: p50 of the slowest rank "
            "per iteration ± 95 % CI") in text
    assert re.search(r"\|\s+8 B\s+\|\s+2\s+\|\s+float32\s+\|", text)
    assert "> requested sizes 4 B, 8 B all move 8 B" in text

    plots = sorted(p.name for p in (pytester.path / "plots").iterdir())
    assert plots == ["all_gather.png", "barrier.png"]
    assert "distbench: wrote 2 plot(s) to plots: all_gather.png, barrier.png" in out
    from PIL import Image

    for name in plots:
        with Image.open(pytester.path / "plots" / name) as image:
            image.verify()


USERS_OWN = """
import time

import pytest
from pytest_distbench.suites.test_collectives import (  # noqa: F401
    distbench_effective_nbytes, test_all_gather)


@pytest.mark.distbench
def test_ddp_step(distbench):
    distbench.measure(lambda: time.sleep(0.0002), nbytes=18720, family="ddp_step")


@pytest.mark.distbench
def test_rings(distbench):
    for name in ("ring_all_reduce", "builtin_all_reduce"):
        distbench.measure(lambda: time.sleep(0.0002), nbytes=4096, family="all_reduce",
                          name=name)


@pytest.mark.distbench
def test_diverges(distbench):
    assert distbench.rank == 1, "replicas diverged"


def test_plain(benchmark):
    benchmark(lambda: None)
"""


def test_a_users_own_files_reach_the_tables_the_verbose_lines_and_the_short_summary(
        pytester, distbench_run, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # the short summary's line is cut to the terminal
    pytester.makepyfile(test_users=USERS_OWN)
    result = distbench_run("--distbench", "--world-size=2", "--tensor-size=4B", "-v", "-rf",
                           "--distbench-iterations=8", "--distbench-warmup=1")
    result.assert_outcomes(passed=4, failed=1)
    out = result.stdout.str()
    # An odd byte count prints exactly; every table, pytest-benchmark's too, is printed.
    assert re.search(r"^# ddp_step  backend=gloo  ranks=2", out, re.M), out
    assert re.search(r"^ *18720 B +- +- +[0-9]", out, re.M), out
    assert "invalid size" not in out and "benchmark: 1 tests" in out
    # Two measurements of one test at one size: each row and the -v line say whose it is.
    for name in ("ring_all_reduce", "builtin_all_reduce"):
        assert re.search(rf"^{name} +4 KiB +- +- +[0-9]", out, re.M), out
    assert re.search(r"test_rings\[gloo-ws2\] PASSED ring_all_reduce: p50 .*; "
                     r"builtin_all_reduce: p50 ", out), out
    # -v bandwidth reads in the tables' unit: 4 KiB in about 0.2 ms is some MB/s.
    assert re.search(r"busbw [0-9.]+ MB/s", out) and "GB/s ±" not in out, out
    # The requested 4 B all_gather is 8 B at 2 ranks: the table says so.
    assert re.search(r"^ *8 B +2 +float32 ", out, re.M), out
    assert "requested size 4 B moves 8 B at 2 ranks: the row shows what was measured" in out
    # The short summary carries the rank's error, as pytest's own failures do.
    assert re.search(r"^FAILED test_users.py::test_diverges\[gloo-ws2\] - Failed: rank 0: "
                     r"AssertionError: replicas diverged$", out, re.M), out


def test_gate_verdict_in_junit_and_comparison_in_markdown(pytester, distbench_run):
    pytester.makepyfile(test_suite=SUITE)
    # 8 B merges with 4 B at 2 ranks, but -k selects 8 B only: it runs (merging comes last).
    args = ("--distbench", "--world-size=2", "--tensor-size=4B,8B", "-k", "all_gather and 8B",
            "--distbench-iterations=20", "--distbench-warmup=1")
    distbench_run(*args, "--distbench-save=base").assert_outcomes(passed=1)
    summary = pytester.path / "summary.md"
    result = distbench_run(*args, "--distbench-compare=base", "--junitxml=report.xml",
                           f"--distbench-markdown={summary}", "--distbench-threshold=500%")
    result.assert_outcomes(passed=1)
    props = _properties(pytester.path / "report.xml")["test_all_gather[gloo-ws2-8B]"]
    assert props["verdict"] in ("unchanged", "inconclusive", "improvement", "regression", "slower",
                                "faster")
    assert "change_pct" in props and float(props["p_value"]) <= 1
    # -k left one test of one point: the whole family-wise 1 % is its level.
    assert float(props["level"]) == pytest.approx(0.01)
    text = summary.read_text()
    assert "## pytest-distbench comparison" in text
    assert "test\\_all\\_gather" in text or "test_all_gather" in text


def test_plot_without_matplotlib_stops_before_any_rank(pytester, distbench_run, monkeypatch):
    fake = pytester.mkdir("fake")
    (fake / "matplotlib").mkdir()
    (fake / "matplotlib" / "__init__.py").write_text("raise ImportError('not installed')\n")
    pytester.makepyfile(test_suite=SUITE)
    monkeypatch.setenv("PYTHONPATH", f"{fake}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    result = distbench_run("--distbench", "--distbench-plot=plots")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert '--distbench-plot: plots need matplotlib' in err
    assert 'pip install "pytest-distbench[plot]"' in err
    assert "passed" not in result.stdout.str()


class _Config:
    def __init__(self, json_path: str | None, installed: bool = True) -> None:
        self.json_path, self.installed = json_path, installed

    def getoption(self, name: str):
        if not self.installed:  # what pytest says of an option no plugin added
            raise ValueError(f"no option named {name!r}")
        assert name == "benchmark_json"
        return self.json_path


class _Item:
    def __init__(self, *fixtures: str) -> None:
        self.fixturenames = list(fixtures)


def test_the_benchmark_json_line_only_where_pytest_benchmark_writes_nothing():
    from pytest_distbench.outputs import benchmark_json_note

    distbench_only = [_Item("distbench", "nbytes")]
    assert benchmark_json_note(_Config("pb.json"), distbench_only).startswith(
        "distbench: --benchmark-json wrote nothing")
    assert benchmark_json_note(_Config("pb.json"), []) is not None  # an xdist controller
    assert benchmark_json_note(_Config(None), distbench_only) is None
    assert benchmark_json_note(_Config("pb.json", installed=False), distbench_only) is None
    # a session that also runs pytest-benchmark's own tests: its file holds them
    assert benchmark_json_note(_Config("pb.json"), [*distbench_only, _Item("benchmark")]) is None
