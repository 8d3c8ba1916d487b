"""benchmarks/bench_cuda_timing.py: what it judges (the GPU's figures only), what it reads of
nccl-tests' JSON, and its refusal on a machine without a GPU. The timings themselves need one
(docs/gpu.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from scripts import loaded

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "bench_cuda_timing.py"
DATA = Path(__file__).resolve().parent / "data" / "nccl_tests"
US = 1e-6


@pytest.fixture(scope="module")
def bench():
    with loaded(SCRIPT) as module:
        yield module


def test_only_a_figure_the_gpu_sets_is_judged(bench):
    # H200 all_gather, shared README: 64 MiB 35.1 us eager vs 33.8 us in a graph (the GPU's);
    # 1 MiB 32 us eager vs 1.46 us in a graph (the host's launches).
    assert bench.bound_by(35.1 * US, 33.8 * US, moves_no_data=False) is None
    cause = bench.bound_by(32.0 * US, 1.46 * US, moves_no_data=False)
    assert cause == "launch-bound: the host's per-call cost (22x the same calls in a graph)"
    assert "moves no data" in bench.bound_by(500 * US, 490 * US, moves_no_data=True)


def _figures(per_size: dict[int, tuple[float, float, float]]) -> dict[str, dict[int, float]]:
    return {m: {n: f[i] * US for n, f in per_size.items()} for i, m in enumerate(bench_modes())}


def bench_modes():
    return ("batch", "graph", "each")


def test_the_worst_deviation_counts_gpu_bound_rows_and_names_the_others(bench):
    sizes = [1 << 20, 64 << 20]
    hand = _figures({1 << 20: (23.0, 1.5, 33.0), 64 << 20: (35.0, 34.0, 40.0)})
    # The plugin 30 % off where the host launches (not judged), 4 % off where the GPU runs.
    plugin = _figures({1 << 20: (16.0, 1.5, 20.0), 64 << 20: (36.4, 34.0, 41.0)})
    nccl = bench.nccl_tests_figures([DATA / "nt_all_gather.json"])
    lines, rows, worst = bench.report("all_gather", sizes, hand, plugin,
                                      {n: 0.0 for n in sizes}, {}, nccl)
    assert worst == pytest.approx(0.04)
    assert [r["bound"] for r in rows] == [
        "launch-bound: the host's per-call cost (15x the same calls in a graph)", "gpu"]
    assert any(line.strip().startswith("not judged: launch-bound") for line in lines)
    # nccl-tests' out-of-place all_gather beside it, from its own JSON: 64 MiB 35.29 us.
    assert "nccl-tests batch" in lines[0]
    assert rows[1]["nccl_tests_batch"] == pytest.approx(35.29 * US, rel=1e-3)
    _, reduce_rows, none = bench.report("all_reduce", sizes, hand, plugin,
                                        {n: 0.0 for n in sizes}, {}, {})
    assert none is None and all("moves no data" in r["bound"] for r in reduce_rows)


def test_without_a_gpu_it_says_so_and_measures_nothing():
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2
    assert "needs a CUDA GPU with NCCL" in done.stderr and done.stdout == ""


def test_the_gpu_rerun_script_parses_and_keeps_under_its_deadline():
    script = ROOT / "benchmarks" / "gpu_rerun.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    text = script.read_text()
    limits = [int(line.split()[2]) for line in text.splitlines() if line.startswith("step ")]
    limits += [40, 40]  # the two sessions (one step line in a loop)
    deadline = int(text.split("DEADLINE_S:-", 1)[1].split("}", 1)[0])
    assert deadline <= 400 and len(limits) == 7  # batch, graph, 2 sessions, bench, ws2, tests
    for words in ("--tensor-size=4B:1GiB:x4", "--distbench-cuda-graph",
                  "--tensor-size=1KiB,1MiB,64MiB,1GiB", "bench_cuda_timing.py",
                  "--world-size=2", '-k "(cuda or nccl or gpu) and not docs"'):
        assert words in text, words
