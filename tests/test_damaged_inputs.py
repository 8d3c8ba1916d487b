"""A damaged or hostile results file through every consumer: compare (the CLI), the gate, the
history (append) and the plots either use it or refuse it with one line naming the file and the
field. A file the reader accepts must never crash a consumer later (docs/results-schema.md)."""

from __future__ import annotations

import contextlib
import copy
import io
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from results_data import ENVIRONMENT, benchmark_record

from pytest_distbench import cli
from pytest_distbench.results.comparison.gate import Gate
from pytest_distbench.results.document import (
    ResultsFileError,
    history,
    make_document,
    read_document,
    records,
    write_document,
)
from pytest_distbench.results.rendering import plot
from pytest_distbench.results.rendering.report import FORMATS, render

ID = benchmark_record(1024, [1e-5])["id"]


def _document(scale: float, n: int = 8) -> dict:
    recs = []
    for size in (1024, 4096):
        samples = [1e-5 * scale * (1 + 0.01 * i) for i in range(n)]
        record = benchmark_record(size, samples)
        record.update(placement="core", requested_nbytes=[size], figures={
            "messages_per_iteration": 1})
        recs.append(record)
    environment = dict(ENVIRONMENT, cpu_probe_s=[0.01, 0.011])
    return make_document(recs, environment, ["pytest", "--distbench"], commit_info={})


def _baseline() -> dict:
    stored = None
    for scale in (1.0, 1.02, 0.98, 1.0):  # three earlier runs and the file's own
        stored = history.with_history(_document(scale), stored)
    return stored


BASELINE = _baseline()
CURRENT = _document(1.3)


def _cli(*args: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = cli.main(list(args))
    return rc, err.getvalue()


def _one_line_naming(text: str, path: Path) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert str(path) in lines[0] and "Traceback" not in text
    return lines[0]


def _every_consumer(path: Path, tmp: Path) -> str | None:
    """Run the file through compare, gate, history and plot; the refusal line, if refused."""
    current = tmp / "current.json"
    if not current.exists():
        write_document(CURRENT, current, overwrite=True)
    try:
        read_document(path)
        refused = None
    except ResultsFileError as exc:
        refused = _one_line_naming(str(exc), path)
    for args in ((str(path), str(current)), (str(current), str(path))):
        for fmt in ("table", "json"):
            rc, err = _cli("compare", *args, "--format", fmt, "--fail-on-regression")
            if refused:
                assert rc == 2 and _one_line_naming(err, path).endswith(refused), err
            else:
                assert rc in (0, 1), err
    try:
        gate = Gate.load(str(path), tmp, strict=False)
    except pytest.UsageError as exc:
        assert refused and _one_line_naming(str(exc), path).endswith(refused)
    else:
        gate.environment_differences(CURRENT["distbench"]["environment"])
        assert gate.noise_note
        for record in records(CURRENT).values():
            verdict = gate.judge(record, 0.1)
            if verdict is not None:
                gate.failure_message(verdict, len(record["samples"]))
        for fmt in FORMATS:
            render(gate.comparison(CURRENT, 0.1), fmt)
    appended = tmp / "appended.json"
    appended.write_bytes(path.read_bytes())
    if refused:
        detail = refused.removeprefix(f"{path}: ")  # the copy has its own name
        with pytest.raises(ResultsFileError) as raised:
            history.append_run(CURRENT, appended)
        assert str(raised.value) == f"{appended}: {detail}"
    else:
        assert "appended this run" in history.append_run(CURRENT, appended)
        read_document(appended)
    return refused


def _plots(path: Path, tmp: Path) -> None:
    rc, err = _cli("plot", str(path), "--out", str(tmp / "plots"))
    assert rc in (0, 2) and (rc == 0 or _one_line_naming(err, path)), err
    if rc == 0:
        doc = read_document(path)
        comparison = Gate(path, doc, False).comparison(CURRENT, 0.1)
        plot.comparison_rows(doc, CURRENT, comparison)


def _set(doc: dict, parts: tuple, value) -> None:
    target = doc
    for part in parts[:-1]:
        target = target[part]
    target[parts[-1]] = value


# The damage issue 19 found, each once crashing a consumer after the file had been accepted.
@pytest.mark.parametrize(("parts", "value", "field"), [
    (("distbench", "history", 0, "p50_s", ID), 10**30, f"distbench.history[0].p50_s.{ID}"),
    (("distbench", "environment", "cpu_probe_s"), [10**30], "environment.cpu_probe_s[0]"),
    (("distbench", "environment", "cpu_probe_s"), "fast", "distbench.environment.cpu_probe_s"),
    (("benchmarks", 0, "distbench", "placement"), ["pack"], "benchmarks[0].distbench.placement"),
    (("distbench", "history", 1), "run", "distbench.history[1]"),
    (("distbench", "history", 0, "p50_s"), [], "distbench.history[0].p50_s"),
    (("distbench", "history"), {}, "distbench.history"),
    (("distbench", "environment", "gpus"), 3, "distbench.environment.gpus"),
    (("benchmarks", 1, "distbench", "requested_nbytes"), ["1KiB"], "requested_nbytes"),
    (("benchmarks", 1, "distbench", "figures", "x\ny"), 10**30, "figures.'x\\ny'"),
])
def test_damage_that_crashed_a_consumer_is_refused_when_read(tmp_path, parts, value, field):
    doc = copy.deepcopy(BASELINE)
    _set(doc, parts, value)
    path = tmp_path / "damaged.json"
    path.write_text(json.dumps(doc))
    refused = _every_consumer(path, tmp_path)
    assert refused is not None and field in refused
    _plots(path, tmp_path)


def test_the_undamaged_baseline_goes_through_every_consumer(tmp_path):
    path = tmp_path / "baseline.json"
    write_document(BASELINE, path, overwrite=False)
    assert _every_consumer(path, tmp_path) is None
    _plots(path, tmp_path)
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["all_reduce.png"]


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, prefix + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, prefix + (index,))


# Where the consumers read: every path but the long sample lists' elements.
_PATHS = [p for p in _paths(BASELINE) if p and not (
    len(p) > 1 and p[-2] in ("samples", "rank_samples", "data") and isinstance(p[-1], int))]
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(2**63 - 2, 2**70)
    | st.integers(-(2**70), -1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)
_DELETE = object()


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=st.lists(st.tuples(st.sampled_from(_PATHS), st.just(_DELETE) | _VALUES),
                          min_size=1, max_size=3))
# Found by this test: a torch version that is not a string was read, then appended into a
# history entry that the next read refused.
@example(mutations=[(("distbench", "environment", "torch"), [])])
def test_a_mutated_baseline_is_used_or_refused_by_every_consumer(tmp_path, mutations):
    doc = copy.deepcopy(BASELINE)
    for parts, value in mutations:
        try:
            if value is _DELETE:
                target = doc
                for part in parts[:-1]:
                    target = target[part]
                del target[parts[-1]]
            else:
                _set(doc, parts, value)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or retyped this path
    path = tmp_path / "mutated.json"
    path.write_text(json.dumps(doc))
    _every_consumer(path, tmp_path)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=st.lists(st.tuples(st.sampled_from(_PATHS), _VALUES), min_size=1, max_size=2))
def test_a_mutated_results_file_is_plotted_or_refused(tmp_path, mutations):
    pytest.importorskip("matplotlib")
    doc = copy.deepcopy(BASELINE)
    for parts, value in mutations:
        with contextlib.suppress(KeyError, IndexError, TypeError):
            _set(doc, parts, value)
    path = tmp_path / "mutated.json"
    path.write_text(json.dumps(doc))
    _plots(path, tmp_path)
