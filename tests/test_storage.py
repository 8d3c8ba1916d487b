"""The results file: round trip, atomic writes, pytest-benchmark compatibility, hostile input."""

from __future__ import annotations

import copy
import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from results_data import DELETE, ENVIRONMENT, benchmark_record, set_at

from pytest_distbench.results.comparison.verdict import compare_documents
from pytest_distbench.results.document import (
    SCHEMA_VERSION,
    DroppedRecordWarning,
    RecordError,
    ResultsFileError,
    ResultsFileExistsError,
    check_record,
    io,
    make_document,
    read_document,
    records,
    resolve_baseline,
    write_document,
)
from pytest_distbench.results.rendering.report import FORMATS, render

REPO = Path(__file__).resolve().parents[1]

COMMIT = {"id": "abc123", "dirty": False, "branch": "main"}

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)


def make_record(size: int = 1 << 20, scale: float = 1.0, seed: int = 0, n: int = 40) -> dict:
    rng = random.Random(seed)
    ranks = [[50e-6 * scale * (1 + 0.02 * rng.random()) for _ in range(n)] for _ in range(2)]
    samples = [max(per_rank) for per_rank in zip(*ranks, strict=True)]
    return benchmark_record(size, samples, ranks)


def make_doc(*recs: dict) -> dict:
    recs = recs or (make_record(1024, seed=1), make_record(1 << 20, seed=2))
    return make_document(list(recs), ENVIRONMENT, ["pytest", "--distbench"], commit_info=COMMIT)


def write_json(path: Path, value) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- build and round trip


def test_round_trip(tmp_path):
    doc = make_doc()
    path = tmp_path / "run.json"
    write_document(doc, path, overwrite=False)
    back = read_document(path)
    assert back == doc
    recs = records(back)
    assert list(recs) == [b["distbench"]["id"] for b in doc["benchmarks"]]
    first = next(iter(recs.values()))
    assert first["samples"] == doc["benchmarks"][0]["distbench"]["samples"]
    assert back["distbench"]["schema_version"] == SCHEMA_VERSION
    assert back["distbench"]["environment"]["torch"] == "2.13.0+cpu"
    assert back["distbench"]["command_line"] == ["pytest", "--distbench"]


def test_document_is_a_pytest_benchmark_document():
    record = make_record(4096, seed=3)
    doc = make_doc(record)
    for key in ("machine_info", "commit_info", "benchmarks", "datetime", "version"):
        assert key in doc
    bench = doc["benchmarks"][0]
    assert bench["group"] == "all_reduce gloo ws2"
    assert bench["name"] == record["name"]
    assert bench["fullname"] == record["id"]
    assert bench["param"] == "gloo-ws2-4096"
    stats = bench["stats"]
    assert stats["median"] == pytest.approx(statistics.median(record["samples"]))
    assert stats["min"] == min(record["samples"])
    assert stats["rounds"] == len(record["samples"])
    assert stats["data"] == record["samples"]
    assert stats["iterations"] == 1
    for key in ("stddev", "iqr", "q1", "q3", "iqr_outliers", "stddev_outliers", "outliers"):
        assert key in stats
    for key in ("ld15iqr", "hd15iqr", "ops", "total", "mean", "max"):
        assert key in stats


def test_make_document_converts_numpy_and_odd_params():
    np = pytest.importorskip("numpy")
    record = make_record(seed=4)
    record["samples"] = np.array(record["samples"])
    record["rank_samples"] = [np.array(r) for r in record["rank_samples"]]
    record["world_size"] = np.int64(2)
    record["params"] = {"nbytes": 1024, "dtype": object(), "shape": (2, 3), "x": float("nan")}
    doc = make_doc(record)
    rec = doc["benchmarks"][0]["distbench"]
    assert all(type(x) is float for x in rec["samples"])
    assert type(rec["world_size"]) is int
    assert rec["params"]["shape"] == [2, 3]
    assert isinstance(rec["params"]["dtype"], str) and rec["params"]["x"] == "nan"
    json.dumps(doc, allow_nan=False)


def test_make_document_fills_nullable_fields():
    record = make_record(seed=5)
    for key in ("skew", "threshold", "wrong", "algbw_gbps"):
        del record[key]
    rec = make_doc(record)["benchmarks"][0]["distbench"]
    assert rec["skew"] is None and rec["threshold"] is None and rec["wrong"] is None


# A field, a value the schema refuses there, and the field the error must name.
BAD_FIELDS = [
    ("samples", [], "samples"),
    ("samples", [1e-5, -1e-6, 2e-5], "samples"),  # distbench.record() of a negative time
    ("nbytes", 1024.0, "nbytes"),  # measure(nbytes=x.numel() * x.element_size() / 1)
    ("world_size", 0, "world_size"),
    ("id", "", "id"),
    ("placement", ["pack"], "placement"),
    ("requested_nbytes", [4, "8"], "requested_nbytes"),
    ("peak_rss_bytes", [1, 2**64], "peak_rss_bytes"),
    ("figures", [1], "figures"),
    ("ab", {"ratio_high": float("inf")}, "ab"),  # a field the schema does not know: JSON still
]


@pytest.mark.parametrize(("field", "value", "named"), BAD_FIELDS)
def test_check_record_names_the_field(field, value, named):
    record = make_record()
    check_record(record)
    record[field] = value
    with pytest.raises(RecordError) as info:
        check_record(record)
    assert info.value.field.startswith(named)
    assert f": {named}" in str(info.value) and (record["id"] or "record") in str(info.value)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 30), seed=st.integers(0, 2**32 - 1), size=st.integers(0, 2**40),
       scale=st.floats(1e-9, 1e3), params=st.dictionaries(st.text(max_size=5), json_values))
def test_records_as_the_harness_builds_them_pass(n, seed, size, scale, params):
    record = make_record(size, scale, seed, n)
    record["params"] = params
    record["placement"] = "core"
    check_record(record)
    assert [b["distbench"]["id"] for b in make_doc(record)["benchmarks"]] == [record["id"]]


@settings(max_examples=60, deadline=None)
@given(bad=st.sampled_from(BAD_FIELDS), position=st.integers(0, 2), seed=st.integers(0, 99))
def test_one_bad_record_never_takes_the_others_down(bad, position, seed):
    field, value, named = bad
    good = [make_record(1 << k, seed=seed + k) for k in range(2)]
    broken = make_record(1 << 9, seed=seed)
    broken[field] = value
    recs = good[:position] + [broken] + good[position:]
    with pytest.warns(DroppedRecordWarning, match=f": {named}"):
        doc = make_doc(*recs)
    assert [b["distbench"]["id"] for b in doc["benchmarks"]] == [r["id"] for r in good]


_ODD = st.sampled_from([float("nan"), object(), (1, 2), {1: 2}, {"k": {3: "v"}}, 2**70])


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=st.dictionaries(st.sampled_from(sorted(make_record())) | st.text(max_size=6)
                               | st.integers(0, 3), json_values | _ODD, min_size=1, max_size=4))
def test_check_record_refuses_anything_only_with_a_record_error(tmp_path, changes):
    record = make_record(n=5)
    record.update(changes)
    try:
        check_record(record)
    except RecordError as exc:
        assert exc.field
        return
    # What passes can be written and read back.
    write_document(make_doc(record), tmp_path / "ok.json", overwrite=True)
    assert len(read_document(tmp_path / "ok.json")["benchmarks"]) == 1


def test_a_repeated_id_is_left_out_not_fatal():
    first, second = make_record(seed=1), make_record(seed=2)
    with pytest.warns(DroppedRecordWarning, match="duplicate id"):
        doc = make_doc(first, second)
    assert doc["benchmarks"][0]["distbench"]["samples"] == first["samples"]
    assert len(doc["benchmarks"]) == 1


# --------------------------------------------------------------------------------------- writing


def test_write_refuses_to_overwrite_and_keeps_old_file(tmp_path):
    path = tmp_path / "baselines" / "main.json"
    old = make_doc(make_record(seed=1))
    write_document(old, path, overwrite=False)  # creates the parent directory too
    before = path.read_bytes()

    with pytest.raises(ResultsFileExistsError) as info:
        write_document(make_doc(make_record(seed=2)), path, overwrite=False)
    assert isinstance(info.value, ResultsFileError)
    assert "main.json" in str(info.value) and "overwrit" in str(info.value)
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["main.json"]

    new = make_doc(make_record(seed=3))
    write_document(new, path, overwrite=True)
    assert read_document(path) == new
    assert sorted(p.name for p in path.parent.iterdir()) == ["main.json"]


def test_written_file_is_readable_by_others(tmp_path):
    # A baseline a teammate or CI user cannot read is no baseline; the temp file must not
    # leak its private mode into the published file.
    old_umask = os.umask(0o022)
    try:
        path = tmp_path / "run.json"
        write_document(make_doc(), path, overwrite=False)
    finally:
        os.umask(old_umask)
    assert path.stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("overwrite", [False, True])
def test_failed_write_leaves_old_file_and_no_temp(tmp_path, monkeypatch, overwrite):
    path = tmp_path / "run.json"
    path.write_text("old contents")

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(io.os, "replace", broken)
    monkeypatch.setattr(io.os, "link", broken)
    if not overwrite:
        path.unlink()
    with pytest.raises(ResultsFileError, match="No space left"):
        write_document(make_doc(), path, overwrite=overwrite)
    remaining = sorted(p.name for p in tmp_path.iterdir())
    assert remaining == (["run.json"] if overwrite else [])
    if overwrite:
        assert path.read_text() == "old contents"


def test_unserializable_document_writes_nothing(tmp_path):
    doc = make_doc()
    doc["benchmarks"][0]["distbench"]["samples"][0] = float("nan")
    path = tmp_path / "run.json"
    with pytest.raises(ResultsFileError, match="run.json"):
        write_document(doc, path, overwrite=False)
    assert list(tmp_path.iterdir()) == []


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(points=st.lists(st.integers(min_value=6, max_value=400), min_size=1, max_size=6))
def test_the_writer_never_writes_a_file_its_reader_refuses(tmp_path, monkeypatch, points):
    """At the reader's bound on values (lowered here from 2**25, which one duration-bound
    point at its 3,000,000-sample cap passes at 8 ranks: each sample stored 2 + ranks times),
    a document is written and read back whole, or refused naming the file and its longest
    sample lists, and the file it would have replaced stays as it was."""
    monkeypatch.setattr(io, "MAX_RESULTS_VALUES", 2000)
    path = tmp_path / "run.json"
    path.write_text("old contents")
    doc = make_doc(*(make_record(1 << i, seed=i, n=n) for i, n in enumerate(points)))
    try:
        write_document(doc, path, overwrite=True)
    except ResultsFileError as exc:
        assert "run.json" in str(exc) and "not written" in str(exc)
        assert "more than 2,000 JSON values" in str(exc)
        assert f"({max(points):,} samples at 2 ranks)" in str(exc)
        assert "--distbench-duration" in str(exc)
        assert path.read_text() == "old contents"
    else:
        assert read_document(path) == doc
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def test_pytest_benchmark_compare_lists_our_benchmarks(tmp_path):
    record = make_record(1 << 20, seed=7)
    path = tmp_path / "0001_run.json"
    write_document(make_doc(record), path, overwrite=False)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_benchmark", "compare", str(path), "--time-unit", "us"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Failed to load" not in out
    assert record["name"] in out
    assert "Median" in out
    # pytest-benchmark prints times with 4 decimals in the unit we asked for
    assert f"{min(record['samples']) * 1e6:,.4f}" in out


def test_pytest_benchmark_view_names_what_outside_charts_must_keep_apart(tmp_path):
    """Issue 53: `params` carry the backend and world size (pytest-benchmark compare
    --group-by=param:backend raised KeyError), a CUDA batch record's round is its batch
    (`iterations`: its samples average that many calls), and an invalid or incomplete entry
    is named apart, in `name` (pytest-benchmark) and `fullname` (github-action-benchmark,
    Bencher), so a chart keyed by name starts a series of its own for it."""
    plain = make_record(1024, seed=8)
    batch = make_record(1 << 20, seed=9)
    batch.update(timing="cuda-batch", batch_iterations=16)
    invalid = make_record(4 << 20, seed=10)
    invalid["invalid"] = ["faster than this machine's memory copy"]
    incomplete = make_record(8 << 20, seed=11)
    incomplete["incomplete"] = {"bound_s": 120.0, "reason": "timed out"}
    doc = make_doc(plain, batch, invalid, incomplete)
    entries = {bench["distbench"]["id"]: bench for bench in doc["benchmarks"]}
    for record in (plain, batch, invalid, incomplete):
        params = entries[record["id"]]["params"]
        assert params == {"backend": "gloo", "world_size": 2, **record["params"]}
    assert entries[plain["id"]]["stats"]["iterations"] == 1
    assert entries[batch["id"]]["stats"]["iterations"] == 16
    assert entries[plain["id"]]["name"] == plain["name"]
    assert entries[plain["id"]]["fullname"] == plain["id"]
    for record, mark in ((invalid, " (invalid)"), (incomplete, " (incomplete)")):
        entry = entries[record["id"]]
        assert (entry["name"], entry["fullname"]) == (record["name"] + mark, record["id"] + mark)
        assert entry["param"] == record["name"][record["name"].index("[") + 1:-1]
    path = tmp_path / "0001_run.json"
    write_document(doc, path, overwrite=False)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_benchmark", "compare", "--group-by=param:backend",
         str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in out, out
    assert "backend=gloo" in out
    assert f"{incomplete['name']} (incomplete)" in out and f"{invalid['name']} (invalid)" in out


# --------------------------------------------------------------------------------------- reading


def test_missing_file(tmp_path):
    with pytest.raises(ResultsFileError, match="nope.json: no such file"):
        read_document(tmp_path / "nope.json")


def test_directory_is_not_a_file(tmp_path):
    with pytest.raises(ResultsFileError, match="directory"):
        read_document(tmp_path)


def test_not_json_names_line_and_column(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{\n  "distbench": {,\n}')
    with pytest.raises(ResultsFileError, match=r"broken.json: not valid JSON: .*line 2, column"):
        read_document(path)


def test_truncated_file(tmp_path):
    path = tmp_path / "cut.json"
    write_document(make_doc(), path, overwrite=False)
    path.write_bytes(path.read_bytes()[:-200])
    with pytest.raises(ResultsFileError, match="cut.json: not valid JSON"):
        read_document(path)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([1, 2, 3], "not a pytest-distbench results file"),
        ("hello", "not a pytest-distbench results file"),
        ({"benchmarks": [], "machine_info": {}}, "plain pytest-benchmark file"),
        ({"name": "package.json"}, "not a pytest-distbench results file"),
    ],
)
def test_foreign_files(tmp_path, value, message):
    path = write_json(tmp_path / "foreign.json", value)
    with pytest.raises(ResultsFileError, match=message) as info:
        read_document(path)
    assert "foreign.json" in str(info.value)


def test_newer_schema_is_refused(tmp_path):
    doc = make_doc()
    doc["distbench"]["schema_version"] = SCHEMA_VERSION + 1
    path = write_json(tmp_path / "future.json", doc)
    with pytest.raises(ResultsFileError, match="newer.*upgrade pytest-distbench"):
        read_document(path)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers_are_refused(tmp_path, literal):
    doc = make_doc()
    text = json.dumps(doc).replace('"wrong": 0', f'"wrong": {literal}', 1)
    path = tmp_path / "nan.json"
    path.write_text(text)
    with pytest.raises(ResultsFileError, match="nan.json"):
        read_document(path)


def test_deep_nesting_is_an_error_not_a_crash(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ResultsFileError, match="deep.json"):
        read_document(path)
    doc = make_doc()
    deep: list = []
    for _ in range(100):
        deep = [deep]
    doc["distbench"]["environment"]["deep"] = deep
    path = write_json(tmp_path / "deep2.json", doc)
    with pytest.raises(ResultsFileError, match="nested"):
        read_document(path)


def test_checking_a_files_values_holds_memory_of_its_depth_not_of_its_values(tmp_path):
    """The check of every value (nesting, integer sizes) kept a stack entry for every object
    and list met: 1.8 GiB more than the parse for a file of 11 million objects (issue 54 item
    2). 200,000 of them now cost it no more than a few of them."""
    import tracemalloc

    from pytest_distbench.results.document.schema import validate_document

    doc = make_doc()
    doc["distbench"]["environment"]["many"] = [{"a": [0]} for _ in range(200_000)]
    path = write_json(tmp_path / "many.json", doc)
    doc = json.loads(path.read_text())
    tracemalloc.start()
    try:
        validate_document(doc)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak  # was 31 MB




@pytest.mark.parametrize(
    ("dotted", "value", "field"),
    [
        ("benchmarks.1.distbench.samples", [], "benchmarks[1].distbench.samples"),
        ("benchmarks.1.distbench.samples", [1.0, "x"], "benchmarks[1].distbench.samples"),
        ("benchmarks.0.distbench.samples", [-1.0] * 40, "benchmarks[0].distbench.samples"),
        ("benchmarks.0.distbench.rank_samples.1", [1e-5] * 39, "rank_samples[1]"),
        ("benchmarks.0.distbench.rank_samples", [[1e-5] * 40] * 3, "rank_samples"),
        ("benchmarks.0.distbench.summary.n", 39, "benchmarks[0].distbench.summary.n"),
        ("benchmarks.0.distbench.summary.p99", "fast", "summary.p99"),
        ("benchmarks.0.distbench.summary.p90", DELETE, "summary: missing 'p90'"),
        ("benchmarks.0.distbench.world_size", True, "benchmarks[0].distbench.world_size"),
        ("benchmarks.0.distbench.nbytes", 2**70, "benchmarks[0].distbench.nbytes"),
        ("benchmarks.0.distbench.threshold", -0.1, "benchmarks[0].distbench.threshold"),
        ("benchmarks.0.distbench.id", DELETE, "benchmarks[0].distbench.id: missing"),
        ("benchmarks.0.distbench.params", [1], "benchmarks[0].distbench.params"),
        ("benchmarks.0.distbench", "x", "benchmarks[0].distbench"),
        ("benchmarks.1", 7, "benchmarks[1]"),
        ("benchmarks", {}, "benchmarks"),
        ("distbench.environment", [], "distbench.environment"),
        ("distbench.schema_version", "1", "distbench.schema_version"),
        ("distbench.command_line", ["pytest", 3], "distbench.command_line"),
    ],
)
def test_malformed_fields_are_named(tmp_path, dotted, value, field):
    doc = make_doc()
    set_at(doc, dotted, value)
    path = write_json(tmp_path / "bad.json", doc)
    with pytest.raises(ResultsFileError) as info:
        read_document(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert field in message


def test_duplicate_ids_are_refused(tmp_path):
    doc = make_doc()
    doc["benchmarks"][1]["distbench"]["id"] = doc["benchmarks"][0]["distbench"]["id"]
    path = write_json(tmp_path / "dup.json", doc)
    with pytest.raises(ResultsFileError, match=r"benchmarks\[1\].distbench.id: duplicate"):
        read_document(path)


def test_unknown_extra_fields_are_accepted(tmp_path):
    # Additive fields do not bump the schema version, so readers must tolerate them.
    doc = make_doc()
    doc["benchmarks"][0]["distbench"]["future_field"] = {"x": 1}
    doc["distbench"]["future_top"] = 1
    path = write_json(tmp_path / "extra.json", doc)
    assert read_document(path)["distbench"]["future_top"] == 1


# ------------------------------------------------------------------------------ baseline names


def test_resolve_baseline(tmp_path):
    assert resolve_baseline("nightly", tmp_path) == tmp_path / "nightly.json"
    assert resolve_baseline("v2.13_rc-1", tmp_path) == tmp_path / "v2.13_rc-1.json"
    assert resolve_baseline("other/dir/x.json", tmp_path) == Path("other/dir/x.json")
    assert resolve_baseline("x.json", tmp_path) == Path("x.json")
    assert resolve_baseline("./nightly", tmp_path) == Path("./nightly")


@pytest.mark.parametrize("name", ["", "..", ".hidden", "-flag", "a b", "a;rm", "ü"])
def test_resolve_baseline_rejects_bad_names(tmp_path, name):
    with pytest.raises(ValueError, match="invalid baseline name"):
        resolve_baseline(name, tmp_path)


# ----------------------------------------------------------------------------- hostile input

def _accepts_or_refuses_cleanly(path: Path) -> None:
    try:
        doc = read_document(path)
    except ResultsFileError as exc:
        assert str(path) in str(exc)
        return
    # Whatever is accepted must be usable all the way to every report format.
    comparison = compare_documents(doc, doc, threshold=0.1)
    for fmt in FORMATS:
        render(comparison, fmt)


_FUZZ = settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@_FUZZ
@given(value=json_values)
def test_arbitrary_json_is_refused_cleanly(tmp_path, value):
    _accepts_or_refuses_cleanly(write_json(tmp_path / "any.json", value))


@_FUZZ
@given(data=st.binary(max_size=200))
def test_random_bytes_are_refused_cleanly(tmp_path, data):
    path = tmp_path / "bytes.json"
    path.write_bytes(data)
    _accepts_or_refuses_cleanly(path)


_VALID = make_doc(make_record(1024, seed=1, n=8), make_record(4096, seed=2, n=8))


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, prefix + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, prefix + (index,))


_ALL_PATHS = [p for p in _paths(_VALID) if p]


@_FUZZ
@given(
    mutations=st.lists(
        st.tuples(st.sampled_from(_ALL_PATHS), st.one_of(st.just(DELETE), json_values)),
        min_size=1,
        max_size=3,
    )
)
def test_mutated_documents_are_refused_or_usable(tmp_path, mutations):
    doc = copy.deepcopy(_VALID)
    for path_parts, value in mutations:
        target = doc
        try:
            for part in path_parts[:-1]:
                target = target[part]
            if value is DELETE:
                del target[path_parts[-1]]
            else:
                target[path_parts[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed or retyped this path
    _accepts_or_refuses_cleanly(write_json(tmp_path / "mutated.json", doc))


@_FUZZ
@given(cut=st.integers(min_value=0, max_value=10_000), junk=st.binary(max_size=8))
def test_damaged_bytes_of_a_valid_file_are_refused_cleanly(tmp_path, cut, junk):
    raw = json.dumps(_VALID).encode()
    cut %= len(raw)
    path = tmp_path / "damaged.json"
    path.write_bytes(raw[:cut] + junk + raw[cut + len(junk) :])
    _accepts_or_refuses_cleanly(path)
