"""`pytest-distbench export`: a results file (or a baseline) as the input of the trackers CI
users chart with, read back the way the trackers' own code reads it.

The two readers below are transcriptions of the trackers' parsers:
github-action-benchmark's src/extract.ts (`extractCustomBenchmarkResult`: a zod schema over
JSON.parse, then "No benchmark result was found" for an empty list) and
src/extractRangeInfo.ts; Bencher's json adapter, BMF v0 (lib/bencher_adapter/src/adapters/
json/v0.rs: serde into HashMap<BenchmarkNameId, HashMap<MeasureNameId, JsonNewMetric>>, a
benchmark name 1-1024 bytes, a measure a slug or a name of at most 64 characters, `value` a
number, `lower_value` and `upper_value` optional numbers).
"""

from __future__ import annotations

import json
import math
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from results_data import ENVIRONMENT, benchmark_record

from pytest_distbench import cli
from pytest_distbench.families.p2p.rates import message_rates
from pytest_distbench.results.document import history, make_document, write_document
from pytest_distbench.results.document.session_intervals import (
    REVISITS_OFF,
    Evidence,
    with_interval,
)
from pytest_distbench.results.rendering import export
from pytest_distbench.results.statistics.interval import p50_interval
from pytest_distbench.results.statistics.stats import summarize

REPO = Path(__file__).resolve().parents[1]


# -- the trackers' parsers, transcribed ---------------------------------------------------------

def _json_parse(text: str) -> Any:
    """JSON.parse / serde_json: NaN and Infinity are no JSON (Python's json takes them)."""
    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def _js_string(value: Any) -> str:
    """z.coerce.string(): String(value)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


def _js_number(value: Any) -> float:
    """z.coerce.number(): Number(value), and zod refuses NaN."""
    if isinstance(value, bool):
        number = float(value)
    elif isinstance(value, (int, float)):
        number = float(value)
    elif value is None:
        number = 0.0
    elif isinstance(value, str):
        try:
            number = float(value.strip() or 0)
        except ValueError:
            number = math.nan
    else:
        number = math.nan
    if math.isnan(number):
        raise ValueError(f"Expected number, received nan ({value!r})")
    return number


def github_action_benchmark(text: str) -> list[dict[str, Any]]:
    """extractCustomBenchmarkResult: BenchmarkResults.parse(JSON.parse(output)), zod's
    z.array(z.object({name: coerce.string, value: coerce.number, range: coerce.string
    .optional, unit: coerce.string, extra: coerce.string.optional})); unknown keys dropped,
    an absent optional key stays absent; then extractResult's empty-list error."""
    data = _json_parse(text)
    if not isinstance(data, list):
        raise ValueError("Expected array")
    benches = []
    for item in data:
        if not isinstance(item, dict):
            raise ValueError("Expected object")
        bench = {"name": _js_string(item.get("name")), "value": _js_number(item.get("value")),
                 "unit": _js_string(item.get("unit")) if "unit" in item else "undefined"}
        for key in ("range", "extra"):
            if key in item:
                bench[key] = _js_string(item[key])
        benches.append(bench)
    if not benches:
        raise ValueError("No benchmark result was found")
    return benches


def extract_range_info(range_text: str | None) -> float | None:
    """extractRangeInfo.ts: a `±` or `+-` range's number (which a unit change rescales), else
    undefined (the range is shown as the text it is)."""
    if not range_text:
        return None
    match = re.search(r"(\+-|±)\s*(\d.*)", range_text)
    if match is None:
        return None
    try:
        return float(match.group(2))
    except ValueError:
        return None


_SLUG = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


def bencher_bmf(text: str) -> dict[str, dict[str, dict[str, float | None]]]:
    """Bencher's json adapter, BMF v0: every benchmark an object of measures, every measure a
    metric with `value` and optional bounds; names as bencher_valid checks them."""
    data = _json_parse(text)
    if not isinstance(data, dict):
        raise ValueError("expected an object of benchmarks")
    out = {}
    for name, measures in data.items():
        if not 1 <= len(name.encode()) <= 1024:
            raise ValueError(f"invalid benchmark name {name!r}")
        if not isinstance(measures, dict):
            raise ValueError(f"{name}: expected an object of measures")
        out[name] = {}
        for measure, metric in measures.items():
            if not (_SLUG.fullmatch(measure) or 0 < len(measure) <= 64) or len(measure) > 64:
                raise ValueError(f"invalid measure {measure!r}")
            if not isinstance(metric, dict) or "value" not in metric:
                raise ValueError(f"{name}.{measure}: missing field `value`")
            parsed: dict[str, float | None] = {}
            for key in ("value", "lower_value", "upper_value"):
                value = metric.get(key)
                if key != "value" and value is None:
                    parsed[key] = None
                elif isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise ValueError(f"{name}.{measure}.{key}: expected f64")
                else:
                    parsed[key] = float(value)
            out[name][measure] = parsed
    return out


# -- a results file of every kind of record ------------------------------------------------------

def _sealed(record: dict) -> dict:
    """The record as a session ends with it: its sampling interval, then its printed one."""
    record["sampling_ci"] = p50_interval(record["samples"], record["summary"]["p50"])
    return with_interval(record, Evidence(noise_missing=REVISITS_OFF))


def _samples(median: float, seed: int, n: int = 50) -> list[float]:
    rng = random.Random(seed)
    return [median * (1 + rng.uniform(-0.05, 0.05)) * (8 if rng.random() < 0.05 else 1)
            for _ in range(n)]


def _rate_record(seed: int) -> dict:
    samples = _samples(40e-6, seed)
    name = "test_message_rate[gloo-ws2-8B-credits4]"
    return {"id": f"tests/bench_p2p.py::{name}", "name": name, "family": "message_rate",
            "backend": "gloo", "world_size": 2, "device": "cpu", "params": {"credits": 4},
            "nbytes": 8, "samples": samples, "summary": summarize(samples).as_dict(),
            "figures": message_rates(samples, 4, 8), "headline_statistic": "mean"}


def _barrier(seed: int) -> dict:
    """A record that moves no data: a time, no bandwidth."""
    record = benchmark_record(4, _samples(30e-6, seed))
    name = "test_barrier[gloo-ws2]"
    record.update(id=f"tests/bench.py::{name}", name=name, family="barrier", params={},
                  nbytes=None, count=None, dtype=None, busbw_factor=None, algbw_gbps=None,
                  busbw_gbps=None)
    return record


def _records(seed: int = 0) -> list[dict]:
    small = benchmark_record(1024, _samples(20e-6, seed + 1))
    large = benchmark_record(1 << 20, _samples(900e-6, seed + 2))
    invalid = benchmark_record(4 << 20, _samples(1e-9, seed + 3))
    invalid["invalid"] = ["busbw 4000 GB/s is faster than this machine's memory copy"]
    incomplete = benchmark_record(64 << 20, [120.0])
    incomplete["incomplete"] = {"bound_s": 120.0, "reason": "timed out"}
    sealed = [_sealed(r) for r in (small, large, _rate_record(seed + 4), _barrier(seed + 5))]
    return sealed + [invalid, incomplete]


def _document(seed: int = 0) -> dict:
    return make_document(_records(seed), ENVIRONMENT, ["pytest", "--distbench"], commit_info={})


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("export")
    run = d / "run.json"
    write_document(_document(), run, overwrite=False)
    baseline = None
    for seed in (10, 20, 30):  # a baseline: the newest run, and the p50s of two before it
        baseline = history.with_history(_document(seed), baseline)
    (d / "baselines").mkdir()
    write_document(baseline, d / "baselines" / "main.json", overwrite=False)
    return {"run": run, "baseline": d / "baselines" / "main.json", "dir": d}


# Runs the command as CI does (a process of its own) and fails if it imported torch.
_DRIVER = ("import sys; from pytest_distbench import cli; code = cli.main(sys.argv[1:]); "
           "assert 'torch' not in sys.modules, 'export imported torch'; sys.exit(code)")


def _export(files: dict[str, Path], which: str, fmt: str,
            *extra: str) -> subprocess.CompletedProcess:
    """`pytest-distbench export` of files[which], run in the folder of the run's file."""
    return subprocess.run([sys.executable, "-c", _DRIVER, "export",
                           str(files[which].relative_to(files["dir"])), "--format", fmt, *extra],
                          capture_output=True, text=True, timeout=120, cwd=files["dir"])


def _by_id(doc_records: list[dict]) -> dict[str, dict]:
    return {r["id"]: r for r in doc_records}


def test_github_action_benchmark_reads_the_p50_and_its_interval(files):
    done = _export(files, "run", "github-action-benchmark", "-o", "latency.json")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "wrote latency.json: 3 benchmark(s), github-action-benchmark\n"
    # stderr: what was left out and why, and where the rate went; each one line
    assert done.stderr.splitlines() == [
        "pytest-distbench: export: left out 2 of 6 benchmark(s): 1 incomplete, 1 invalid",
        "pytest-distbench: export: 1 rate benchmark(s) (bigger is better) are in --format "
        "github-action-benchmark-bigger",
    ]
    records = _by_id(_records())
    benches = github_action_benchmark((files["dir"] / "latency.json").read_text())
    assert len(benches) == 3  # the collectives and the barrier; not the rate
    for bench in benches:
        record = records[bench["name"]]
        p50, ci = record["summary"]["p50"], record["p50_ci"]
        assert bench["unit"] == "us"
        assert bench["value"] == pytest.approx(p50 * 1e6, rel=1e-12)
        # The range is text to the tool (no ± for it to rescale): minus and plus, in us.
        assert extract_range_info(bench["range"]) is None
        low, high = re.fullmatch(r"-([0-9.]+)/\+([0-9.]+)", bench["range"]).groups()
        assert float(low) == pytest.approx((p50 - ci["low"]) * 1e6, rel=0.01)
        assert float(high) == pytest.approx((ci["high"] - p50) * 1e6, rel=0.01)
        extra = bench["extra"].splitlines()
        assert extra[0].startswith("p50 95 % interval: ") and extra[0].endswith(" us")
        assert extra[1:3] == [f"samples: {len(record['samples'])}",
                              "timing: not recorded (a file from before it was)"]
        assert extra[3].startswith("mean: ")


def test_github_action_benchmark_bigger_reads_busbw_and_the_rate(files):
    done = _export(files, "run", "github-action-benchmark-bigger")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "pytest-distbench: export: left out 2 of 6 benchmark(s): 1 incomplete, 1 invalid",
        "pytest-distbench: export: 1 without a rate or busbw: their p50 is in --format "
        "github-action-benchmark"]
    benches = {b["name"]: b for b in github_action_benchmark(done.stdout)}
    records = _by_id(_records())
    assert len(benches) == 3  # the two sized collectives and the rate
    for name, bench in benches.items():
        record = records[name]
        if record["family"] == "message_rate":
            figures = record["figures"]
            assert (bench["unit"], bench["value"]) == ("msgs/s", figures["msgs_per_s"])
            bounds = record["rate_ci"]["low"], record["rate_ci"]["high"]  # the printed one
        else:
            p50, ci = record["summary"]["p50"], record["p50_ci"]
            assert (bench["unit"], bench["value"]) == ("GB/s", record["busbw_gbps"])
            bounds = (record["busbw_gbps"] * p50 / ci["high"],
                      record["busbw_gbps"] * p50 / ci["low"])
        low, high = re.fullmatch(r"-([0-9.,e-]+)/\+([0-9.,e-]+)", bench["range"]).groups()
        assert float(low.replace(",", "")) == pytest.approx(bench["value"] - bounds[0], rel=0.01)
        assert float(high.replace(",", "")) == pytest.approx(bounds[1] - bench["value"], rel=0.01)


def test_bencher_reads_latency_busbw_and_throughput_from_a_baseline(files):
    """A baseline (a results file with earlier runs' p50s) exports its newest run."""
    done = _export(files, "baseline", "bencher", "-o", "bmf.json")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "pytest-distbench: export: left out 2 of 6 benchmark(s): 1 incomplete, 1 invalid"]
    results = bencher_bmf((files["dir"] / "bmf.json").read_text())
    records = _by_id(_records(30))  # the newest run of the baseline
    assert set(results) == {r["id"] for r in records.values()
                            if not r.get("invalid") and not r.get("incomplete")}
    for name, measures in results.items():
        record = records[name]
        if record["family"] == "message_rate":
            f = record["figures"]
            assert measures == {"throughput": {"value": f["msgs_per_s"],
                                               "lower_value": record["rate_ci"]["low"],
                                               "upper_value": record["rate_ci"]["high"]}}
            continue
        assert set(measures) == ({"latency"} if record["busbw_gbps"] is None else
                                 {"latency", "busbw-gbps"})
        latency, ci = measures["latency"], record["p50_ci"]
        assert latency["value"] == pytest.approx(record["summary"]["p50"] * 1e9)
        assert latency["lower_value"] == pytest.approx(ci["low"] * 1e9)
        assert latency["upper_value"] == pytest.approx(ci["high"] * 1e9)
        if record["busbw_gbps"] is not None:
            busbw = measures["busbw-gbps"]
            assert busbw["lower_value"] < busbw["value"] == record["busbw_gbps"] < busbw[
                "upper_value"]


def test_the_readers_refuse_what_the_trackers_refuse():
    """The transcriptions are strict where the trackers are: the checks above mean something."""
    with pytest.raises(ValueError, match="No benchmark result"):
        github_action_benchmark("[]")
    with pytest.raises(ValueError, match="nan"):
        github_action_benchmark('[{"name": "a", "unit": "us", "value": "fast"}]')
    with pytest.raises(ValueError, match="not JSON"):
        github_action_benchmark('[{"name": "a", "unit": "us", "value": NaN}]')
    assert extract_range_info("± 3.5") == 3.5 and extract_range_info("-1/+2") is None
    with pytest.raises(ValueError, match="value"):
        bencher_bmf('{"a": {"latency": {"lower_value": 1}}}')
    with pytest.raises(ValueError, match="benchmark name"):
        bencher_bmf(json.dumps({"x" * 1025: {}}))
    with pytest.raises(ValueError, match="f64"):
        bencher_bmf('{"a": {"latency": {"value": "1"}}}')


def test_nothing_to_chart_is_said(tmp_path, capsys):
    """A file of invalid records only: an empty list, and a warning that the tool refuses it."""
    doc = make_document(_records()[-2:], ENVIRONMENT, ["pytest"], commit_info={})
    write_document(doc, tmp_path / "bad.json", overwrite=False)
    assert cli.main(["export", str(tmp_path / "bad.json"), "--format",
                     "github-action-benchmark"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == []
    assert "left out 2 of 2 benchmark(s): 1 incomplete, 1 invalid" in err
    assert "WARNING: nothing to chart: github-action-benchmark refuses an empty list" in err
    assert cli.main(["export", str(tmp_path / "bad.json"), "--format", "bencher"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == {} and "WARNING" not in err  # Bencher takes an empty report


@pytest.mark.parametrize(("args", "message"), [
    (["missing.json", "--format", "bencher"], "missing.json: no such file"),
    (["RUN", "--format", "bencher", "-o", "DIR"], "-o 'DIR' is a directory"),
    (["RUN", "--format", "bencher", "-o", "RUN"], "is the results file itself"),
    (["RUN", "--format", "csv"], "argument --format: invalid choice: 'csv'"),
    (["RUN"], "the following arguments are required: --format"),
])
def test_bad_input_is_one_line(files, capsys, args, message):
    where = str(files["dir"])
    args = [str(files["run"]) if a == "RUN" else where if a == "DIR" else a for a in args]
    try:
        code = cli.main(["export", *args])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    assert code == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1, err
    assert message.replace("DIR", where) in err and "Traceback" not in err
    assert "distbench" in json.loads(files["run"].read_text())  # the results file as it was


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.floats(min_value=1e-7, max_value=10.0), min_size=1, max_size=80),
       st.integers(min_value=1, max_value=1 << 30), st.booleans())
def test_every_export_of_any_run_is_read_by_the_trackers(samples, nbytes, rate):
    """Any samples (one to many, ties, a spread over eight decades), any size, a time or a
    rate: each format is read by its tracker, the headline inside its interval."""
    record = _rate_record(0) if rate else benchmark_record(nbytes, samples)
    if rate:
        record.update(samples=samples, summary=summarize(samples).as_dict(),
                      figures=message_rates(samples, 4, 8))
    doc = make_document([_sealed(record)], ENVIRONMENT, ["pytest"], commit_info={})
    smaller, bigger = (export.export(doc, fmt) for fmt in export.FORMATS[:2])
    assert smaller.written + bigger.written == 1 + (not rate)  # a rate is in one list
    for done in (smaller, bigger):
        for bench in github_action_benchmark(done.text) if done.written else []:
            assert bench["name"] == record["id"] and bench["value"] > 0
            assert "range" not in bench or extract_range_info(bench["range"]) is None
    for measure in bencher_bmf(export.export(doc, export.BENCHER).text)[record["id"]].values():
        low, high = measure["lower_value"], measure["upper_value"]
        assert (low is None) == (high is None)
        assert low is None or low <= measure["value"] <= high
