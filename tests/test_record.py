"""The typed record (results/document/record.py) against what the schema checks and what
docs/results-schema.md documents: the same keys, the same required keys, the same nullability
and the same JSON kind per key. Adding a key to one of them and not the others fails here."""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from results_data import benchmark_record

from pytest_distbench.results.document.normalize import NULLABLE_RECORD_FIELDS, normalize_record
from pytest_distbench.results.document.record import RECORD_KEYS, REQUIRED_KEYS, Record
from pytest_distbench.results.document.schema import SUMMARY_KEYS, SchemaError, validate_record
from pytest_distbench.results.statistics.stats import Summary

DOC = Path(__file__).resolve().parents[1] / "docs" / "results-schema.md"
HINTS = typing.get_type_hints(Record)
# Keys the schema leaves as any JSON (their readers take what they find): A/B mode's verdict
# and a precision run's outcome, both written by this package only.
FREE_FORM = {"ab", "precision"}


def documented() -> dict[str, str]:
    """The record table of docs/results-schema.md: field -> its "required" column."""
    text = DOC.read_text(encoding="utf-8")
    table = text.split("the benchmark record\n", 1)[1].split("\n####", 1)[0]
    return {m[1]: m[2] for m in re.finditer(r"^\| `(\w+)` \| [^|]+ \| (yes|no[^|]*) \|",
                                             table, re.M)}


def full_record() -> Record:
    """A valid record with every key of Record set to a value that is not null."""
    record: Record = benchmark_record(64, [1e-5, 2e-5, 3e-5])
    record.update(
        placement="pack", figures={"messages_per_iteration": 1},
        p50_ci={"level": 0.95, "method": "order statistics", "low": None, "high": None,
                "half_width_pct": None, "run_noise": None, "why": "noise not measured"},
        sampling_ci={"level": 0.95, "method": "order statistics", "low": None, "high": None,
                     "half_width_pct": None},
        revisits=[2e-5],
        requested_nbytes=[64], ab={"ratio": 1.0}, peak_rss_bytes=[1, 2], timing="host-each",
        headline_statistic="mean", stopped_at_sample_cap=False,
        rate_ci={"level": 0.95, "low": 9.0, "high": 11.0, "half_width_pct": 10.0,
                 "mbps_low": 0.1, "mbps_high": 0.2},
        batch_iterations=1, peak_gpu_allocated_bytes=[0, 0], peak_gpu_reserved_bytes=[0, 0],
        timed_ranks=[0, 1], elapsed_s=[6e-5, None], invalid=["a rule"], duration_s=1.0,
        precision={"target": 0.05, "achieved": None, "met": False, "stopped_by": "budget",
                   "statistic": "p50"},
        incomplete={"bound_s": 1.0, "reason": "timeout"},
        pressure={"ranks": [0], "cpu_threads": 1},
        live_reports=[{"time_s": 1.0, "iterations": 3, "delay_s": 0.0}],
        moves_no_data="one rank, in place: the output is the input",
        of_peak={"pct": 12.5, "bandwidth": "busbw", "peak_gbps": 400.0, "source": "declared"},
    )
    return record


class Reads(dict):
    """A record that notes every key the schema looks up."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self.read.add(str(key))
        return super().__contains__(key)


def kinds(hint: Any) -> set[type]:
    """The JSON kinds a key's annotation allows: str, int, float, bool, list, dict, None."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return set().union(*(kinds(arm) for arm in typing.get_args(hint)))
    if hint is type(None):
        return {type(None)}
    origin = typing.get_origin(hint) or hint
    if typing.is_typeddict(origin):
        return {dict}
    if origin is float:
        return {float, int}
    return {origin}


def test_the_record_type_has_the_documented_keys():
    table = documented()
    assert set(table) == RECORD_KEYS
    assert {key for key, required in table.items() if required == "yes"} == REQUIRED_KEYS


def test_the_fixture_sets_every_key_and_is_valid():
    record = full_record()
    assert set(record) == RECORD_KEYS
    validate_record(record, "")


def test_the_schema_reads_no_key_outside_the_record_type():
    record = Reads(full_record())
    validate_record(record, "")
    assert record.read <= RECORD_KEYS
    assert record.read == RECORD_KEYS - FREE_FORM  # and checks every key it does not leave free


@pytest.mark.parametrize("key", sorted(RECORD_KEYS - REQUIRED_KEYS))
def test_a_key_the_type_makes_optional_may_be_absent(key):
    record = full_record()
    del record[key]
    validate_record(record, "")


@pytest.mark.parametrize("key", sorted(REQUIRED_KEYS))
def test_a_key_the_type_requires_is_required(key):
    record = full_record()
    del record[key]
    with pytest.raises(SchemaError) as info:
        validate_record(record, "")
    assert info.value.field == key


@pytest.mark.parametrize("key", sorted(RECORD_KEYS - FREE_FORM))
def test_null_is_accepted_exactly_where_the_type_allows_it(key):
    record = full_record()
    record[key] = None
    if type(None) in kinds(HINTS[key]):
        validate_record(record, "")
    else:
        with pytest.raises(SchemaError) as info:
            validate_record(record, "")
        assert info.value.field == key


@pytest.mark.parametrize("key", sorted(RECORD_KEYS - FREE_FORM))
def test_a_value_of_another_kind_than_the_type_says_is_refused(key):
    allowed = kinds(HINTS[key])
    for wrong in ({"k": 1}, ["x"], "x", 1.5):
        if type(wrong) in allowed:
            continue
        record = full_record()
        record[key] = wrong
        with pytest.raises(SchemaError) as info:
            validate_record(record, "")
        assert info.value.field == key


@pytest.mark.parametrize("key", sorted(k for k in RECORD_KEYS if kinds(HINTS[k]) & {float}))
def test_a_fraction_is_accepted_where_the_type_says_float(key):
    record = full_record()
    record[key] = 1.5
    validate_record(record, "")


def test_normalize_fills_only_nullable_keys_of_the_type():
    assert set(NULLABLE_RECORD_FIELDS) <= RECORD_KEYS - REQUIRED_KEYS
    assert all(type(None) in kinds(HINTS[key]) for key in NULLABLE_RECORD_FIELDS)
    normal = normalize_record(benchmark_record(64, [1e-5]))
    assert set(normal) <= RECORD_KEYS


def test_the_summary_the_schema_checks_is_the_one_statistics_makes():
    assert tuple(f.name for f in dataclasses.fields(Summary)) == SUMMARY_KEYS


def test_a_schema_2_rate_record_is_read_in_schema_3s_layout(tmp_path):
    """Schema 3 took the harness's keys out of a family's figures (issue 51): a file of
    schema 2 is still read, its printed rate interval as `rate_ci`, the run's own back in
    `figures`, the headline statistic and the sample-cap stop as the record's own."""
    import json

    from results_data import ENVIRONMENT, benchmark_record

    from pytest_distbench.results.document.build import make_document
    from pytest_distbench.results.document.io import read_document

    record = benchmark_record(1000, [1e-3] * 10)
    record["figures"] = {"msgs_per_s": 1000.0, "msgs_per_s_ci_low": 900.0,
                         "msgs_per_s_ci_high": 1100.0, "mbps_ci_low": 0.9,
                         "mbps_ci_high": 1.1, "rate_ci_pct": 10.0,
                         "headline_statistic": "mean", "stopped_at_sample_cap": True,
                         "sampling_rate_ci": {"low": 990.0, "high": 1010.0, "pct": 1.0}}
    doc = make_document([record], ENVIRONMENT, ["pytest"])
    doc["distbench"]["schema_version"] = 2
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc))
    [bench] = read_document(path)["benchmarks"]
    read = bench["distbench"]
    assert read["figures"] == {"msgs_per_s": 1000.0, "msgs_per_s_ci_low": 990.0,
                               "msgs_per_s_ci_high": 1010.0, "mbps_ci_low": 0.99,
                               "mbps_ci_high": 1.01, "rate_ci_pct": 1.0}
    assert read["rate_ci"] == {"level": 0.95, "low": 900.0, "high": 1100.0,
                               "half_width_pct": 10.0, "mbps_low": 0.9, "mbps_high": 1.1}
    assert (read["headline_statistic"], read["stopped_at_sample_cap"]) == ("mean", True)
    validate_record(read, "")
