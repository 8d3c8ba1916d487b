"""Baselines with a history: appending runs, reading them back, and the learned-spread verdict."""

from __future__ import annotations

import json
import math
import multiprocessing
import statistics
from pathlib import Path

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from results_data import ENVIRONMENT, benchmark_record

from pytest_distbench.results import document
from pytest_distbench.results.comparison import verdict
from pytest_distbench.results.document import history
from pytest_distbench.results.statistics.runs import judge_history


def run_document(scale: float) -> dict:
    samples = [0.001 * scale * (1 + 0.01 * (i % 7)) for i in range(40)]
    return document.make_document([benchmark_record(1024, samples)], ENVIRONMENT, ["pytest"])


# Up to 15 runs into at most 12 kept: the cases of dropping the oldest, at 0.02 s a run.
@settings(max_examples=8, deadline=None)
@example(runs=15, keep=12).via("the most dropped")
@example(runs=3, keep=3).via("exactly full")
@given(st.integers(min_value=1, max_value=15), st.integers(min_value=1, max_value=12))
def test_append_keeps_the_last_runs_oldest_first(runs, keep):
    stored = None
    for i in range(runs):
        stored = history.with_history(run_document(1 + i), stored, keep)
    p50s = [next(iter(run.values())) for run in history.p50_runs(stored)]
    assert len(p50s) == min(runs, keep)
    # Oldest first, the file's own run last: the scales we wrote, in order.
    expected = [0.001 * (1 + i) * 1.03 for i in range(runs)][-len(p50s):]
    assert p50s == pytest.approx(expected, rel=0.02)


def test_append_run_is_atomic_valid_and_keeps_the_schema_version(tmp_path):
    path = tmp_path / "main.json"
    for i in range(12):
        note = history.append_run(run_document(1 + i * 0.01), path, keep=10)
    assert "10 run(s) kept, at most 10" in note
    doc = document.read_document(path)  # validates
    assert doc["distbench"]["schema_version"] == document.SCHEMA_VERSION
    assert len(doc["distbench"]["history"]) == 9
    # By default a hundred runs are kept.
    note = history.append_run(run_document(1.0), path)
    assert "11 run(s) kept, at most 100" in note
    assert not list(tmp_path.glob(".*.tmp"))
    # A file written before history existed (plain v1) reads as one run.
    plain = run_document(1.0)
    assert len(history.p50_runs(plain)) == 1


def test_a_damaged_history_names_the_field(tmp_path):
    doc = history.with_history(run_document(1.0), run_document(1.1))
    doc["distbench"]["history"][0]["p50_s"] = {"x": "fast"}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(document.ResultsFileError, match=r"distbench\.history\[0\]\.p50_s"):
        document.read_document(path)  # refused when read, before any consumer sees it
    with pytest.raises(document.ResultsFileError, match=r"history\[0\]"):
        history.append_run(run_document(1.0), path)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=1e-4, max_value=1.0), min_size=3, max_size=10),
       st.floats(min_value=0.0, max_value=1.0))
def test_history_verdict_is_scale_free_and_needs_the_threshold(stored, threshold):
    # A 50 % change exactly at a 50 % threshold is a coin toss of rounding, not a property.
    assume(abs(math.log(1.5) - math.log1p(threshold)) > 1e-9)
    median = math.exp(statistics.median(math.log(s) for s in stored))  # the verdict's centre
    v = judge_history(stored, median * (1 + threshold) * 0.999, threshold)
    # Within the threshold of the stored centre is never a regression, however tight the spread.
    assert v.kind != "regression"
    scaled = judge_history([s * 7 for s in stored], median * 7 * 1.5, threshold)
    plain = judge_history(stored, median * 1.5, threshold)
    assert scaled.kind == plain.kind
    assert scaled.detectable == pytest.approx(plain.detectable, rel=1e-6)


def test_history_verdict_against_a_quiet_and_a_noisy_history():
    quiet = [1.00, 1.01, 0.99, 1.00, 1.02]
    noisy = [1.0, 1.4, 0.7, 1.2, 0.8]
    assert judge_history(quiet, 1.25, 0.10).kind == "regression"
    assert judge_history(noisy, 1.25, 0.10).kind == "inconclusive"  # +25 %, not shown
    assert judge_history(quiet, 1.0, 0.1).detectable < 0.10 < judge_history(
        noisy, 1.0, 0.1).detectable


def test_compare_documents_uses_the_history_when_it_has_three_runs():
    stored = None
    for scale in (1.0, 1.01, 0.99, 1.0):
        stored = history.with_history(run_document(scale), stored)
    slow = run_document(1.3)
    v = verdict.compare_documents(stored, slow, threshold=0.1).verdicts[0]
    assert v.kind == "regression" and v.z is not None and v.z > 3
    assert "the 4 stored runs" in v.noise and v.gateable
    single = verdict.compare_documents(run_document(1.0), slow, threshold=0.1).verdicts[0]
    assert single.z is None and "unknown" in single.noise
    assert single.detectable is not None and math.isfinite(single.detectable)


def test_against_a_history_the_table_and_the_gate_show_one_change_and_a_p():
    """Issue 52: the table printed +23.6 % (against the latest stored run) while the gate
    judged +42.81 % (against the stored median), and its p-value column held a z."""
    from pytest_distbench.results.rendering.report import render

    stored = None
    for scale in (1.0, 1.02, 0.98, 1.01, 1.15):  # the latest stored run is the slowest
        stored = history.with_history(run_document(scale), stored)
    v = verdict.compare_documents(stored, run_document(1.3), threshold=0.1).verdicts[0]
    centre = math.exp(statistics.median(math.log(0.00103 * s) for s in
                                        (1.0, 1.02, 0.98, 1.01, 1.15)))
    assert v.baseline_p50 == pytest.approx(centre, rel=1e-3)
    assert v.metric_change == v.change == pytest.approx(v.current_p50 / v.baseline_p50 - 1)
    assert 0 < v.p_value < 0.01 and v.level == 0.01  # one benchmark judged: all of the 1 %
    table = render(verdict.compare_documents(stored, run_document(1.3), threshold=0.1))
    assert f"{v.change * 100:+.1f}%" in table and f"{v.p_value:.2g}" in table
    assert "z " not in table.split("\n\n")[0]


def _append_runs(path: str, worker: int, count: int) -> None:
    for i in range(count):
        note = history.append_run(run_document(1 + worker + i / 100), Path(path), keep=1000)
        assert "appended this run" in note, note


def test_concurrent_appends_keep_every_run(tmp_path):
    path = tmp_path / "baselines" / "main.json"
    workers, each = 4, 25
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_append_runs, args=(str(path), w, each))
                 for w in range(workers)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=300)
    assert [p.exitcode for p in processes] == [0] * workers
    stored = sorted(next(iter(run.values())) for run in history.p50_runs(
        document.read_document(path)))
    expected = sorted(run_document(1 + w + i / 100)["benchmarks"][0]["distbench"]["summary"][
        "p50"] for w in range(workers) for i in range(each))
    assert stored == pytest.approx(expected, rel=1e-12)


def test_a_stored_run_costs_its_ids_and_p50s_and_a_fixed_part(tmp_path):
    """docs/gating.md states what each stored run adds to the file: per benchmark its id and
    its p50 in JSON (quotes, key, indentation, a float of 17 digits), plus one fixed part per
    run (time, commit, fingerprint, probe)."""
    sizes = [1 << k for k in range(10)]
    path = tmp_path / "main.json"
    lengths = []
    for i in range(4):
        records = [benchmark_record(s, [0.001 * (1 + i / 100) * (1 + 0.01 * (k % 7))
                                        for k in range(40)]) for s in sizes]
        doc = document.make_document(records, {**ENVIRONMENT, "world_sizes": [3, 2]}, ["pytest"],
                                     commit_info={"id": "f" * 40, "dirty": True})
        history.append_run(doc, path)
        lengths.append(path.stat().st_size)
    ids = [f"pytest_distbench/suites/test_collectives.py::test_all_reduce[gloo-ws2-{s}]"
           for s in sizes]
    per_run = lengths[3] - lengths[2]
    assert per_run <= sum(len(b) + 40 for b in ids) + 700, per_run
    runs = history.stored_runs(document.read_document(path))
    assert runs[0]["commit"] == "f" * 40 and runs[0]["dirty"] is True
    assert runs[0]["environment"] == {**{k: ENVIRONMENT.get(k) for k in (
        "torch", "cpu_model", "cpu_count", "gpus", "cuda", "nccl")}, "world_sizes": [2, 3]}
