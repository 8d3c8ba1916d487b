"""One outcome pipeline: local, launcher and A/B mode show a test's outcome the same way.

The same benchmark file runs in each mode, and each report must carry what the pipeline adds
(harness/controller/outcome.py): the pressured ranks' environment section, a failing rank's
traceback tagged with its rank, the memory check before any rank is disturbed, and the live reports
of a duration run kept in the record.
"""

from __future__ import annotations

import json
import re

from launching import launch

BENCH = """
import time, pytest

@pytest.mark.distbench(print_env=True, cpu_threads=1, iterations=5)
def test_pressured(distbench):
    distbench.measure(lambda: time.sleep(0.001))

def test_raises_on_rank_1(distbench):
    if distbench.rank == 1:
        raise ValueError("boom from rank one")
    distbench.measure(lambda: time.sleep(0.001))

@pytest.mark.distbench(allocate="1000000GiB", iterations=5)
def test_asks_for_too_much(distbench):
    distbench.measure(lambda: time.sleep(0.001))

@pytest.mark.distbench(duration="1s", report_every="0.25s")
def test_live(distbench):
    distbench.measure(lambda: time.sleep(0.002))
"""


def _check(text: str, records: dict[str, dict]) -> None:
    assert "environment of the pressured ranks" in text
    assert "--- test_pressured[gloo-ws2]: environment of rank" in text
    assert "rank 1 raised:" in text and "[rank 1] ValueError: boom from rank one" in text
    assert re.search(r"--distbench-allocate=\S+: cannot allocate", text), text
    assert "test_asks_for_too_much" not in records
    assert len(records["test_live"].get("live_reports") or []) >= 2


def _records(path) -> dict[str, dict]:
    doc = json.loads(path.read_text())
    return {b["name"].split("[")[0]: b["distbench"] for b in doc["benchmarks"]}


ARGS = ["--distbench", "--world-size=2", "-rA", "-p", "no:randomly"]


def test_local_mode(pytester, distbench_run):
    pytester.makepyfile(test_bench=BENCH)
    out = pytester.path / "out.json"
    result = distbench_run(*ARGS, f"--distbench-json={out}")
    result.assert_outcomes(passed=2, failed=2)
    _check(result.stdout.str(), _records(out))


def test_launcher_mode(pytester, leak_tag):
    pytester.makepyfile(test_bench=BENCH)
    out = pytester.path / "out.json"
    ranks = launch(pytester.path, "slurm", 2, ARGS + [f"--distbench-json={out}"])
    assert [r.returncode for r in ranks] == [1, 1], ranks[0].output
    _check(ranks[0].output, _records(out))


def test_ab_mode(pytester, distbench_run):
    pytester.makepyfile(test_bench=BENCH)
    out = pytester.path / "out.json"
    result = distbench_run(*ARGS, f"--distbench-json={out}",
                           "--distbench-baseline-env=DISTBENCH_UNUSED=1", "--distbench-rounds=2")
    result.assert_outcomes(passed=2, failed=2)
    text = result.stdout.str()
    # A/B names the variant whose ranks failed; the rest reads as in every mode.
    assert "variant: rank 1: ValueError: boom from rank one\nrank 1 raised:" in text
    _check(text, _records(out))


def test_ab_mode_under_a_launcher_is_refused(pytester, leak_tag):
    pytester.makepyfile(test_bench=BENCH)
    ranks = launch(pytester.path, "slurm", 2,
                   ["--distbench", "--distbench-baseline-env=X=1"], timeout=120)
    for rank in ranks:
        assert rank.returncode == 4, rank.output  # pytest's usage error
    assert "A/B mode starts both variants' worlds itself and cannot run under a launcher" \
        in ranks[0].output


def test_xdist_workers_under_a_launcher_are_refused_and_a_dist_option_alone_is_not(pytester,
                                                                                  leak_tag):
    """`-n` under a launcher is refused (one pytest per rank already); `--dist=loadgroup`
    alone, as a project's addopts carry it, starts no worker and runs (it was refused: this
    repository's own addopts broke its README's torchrun command)."""
    pytester.makepyfile(test_quick="""
        import pytest

        @pytest.mark.distbench(iterations=3)
        def test_quick(distbench):
            distbench.measure(lambda: None)
    """)
    refused = launch(pytester.path, "slurm", 2, ["--distbench", "-n", "2"], timeout=120)
    assert [r.returncode for r in refused] == [4, 4], refused[0].output  # a usage error
    assert ("launcher mode (slurm, 2 processes) and pytest-xdist (-n) cannot be combined"
            in refused[0].output), refused[0].output
    ran = launch(pytester.path, "slurm", 2, ["--distbench", "--dist=loadgroup"], timeout=120)
    assert [r.returncode for r in ran] == [0, 0], ran[0].output
    assert "1 passed" in ran[0].output
