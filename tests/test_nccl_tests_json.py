"""nccl-tests' own JSON (-J, format version 3) read as a results file: the two files an H200 wrote
(docs/gpu.md, copied from shared/measured/h200-2026-11-28), compared, plotted and gated beside
the plugin's records, and damaged copies refused in one line naming the file and the field."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from results_data import DELETE, ENVIRONMENT, benchmark_record, set_at

from pytest_distbench import cli
from pytest_distbench.results.document import make_document, read_document, write_document
from pytest_distbench.results.document.io import ResultsFileError

DATA = Path(__file__).resolve().parent / "data" / "nccl_tests"
ALL_REDUCE, ALL_GATHER = DATA / "nt_all_reduce.json", DATA / "nt_all_gather.json"


def raw(path: Path) -> dict:
    return json.loads(path.read_text())


def by_size(path: Path) -> dict[int, dict]:
    return {b["distbench"]["nbytes"]: b["distbench"] for b in read_document(path)["benchmarks"]}


def test_each_size_is_a_record_of_its_collective_timed_as_the_plugin_calls_it():
    gathered, reduced = by_size(ALL_GATHER), by_size(ALL_REDUCE)
    for path, records, place in ((ALL_GATHER, gathered, "out_of_place"),
                                 (ALL_REDUCE, reduced, "in_place")):
        entries = [e for e in raw(path)["results"] if e["size"]]  # 0 B: no figure of a size
        assert sorted(records) == [e["size"] for e in entries]
        for entry in entries:
            record = records[entry["size"]]
            # nccl-tests' time is us per call: the record's one sample is that, in seconds.
            assert record["samples"] == [pytest.approx(entry[place]["time"] * 1e-6)]
            assert record["world_size"] == len(raw(path)["config"]["devices"]) == 1
            assert (record["backend"], record["device"], record["dtype"]) == (
                "nccl", "cuda", "float32")
            assert record["timing"] == "cuda-batch"
            assert record["batch_iterations"] == entry["actual_iterations"]
            assert record["wrong"] == entry[place]["nwrong"]
            assert place.replace("_", "-") in record["name"]
    # all_gather out of place at one rank is a copy: nccl-tests' own algbw, in GB/s.
    for size, record in gathered.items():
        entry = next(e for e in raw(ALL_GATHER)["results"] if e["size"] == size)
        assert record["algbw_gbps"] == pytest.approx(entry["out_of_place"]["alg_bw"], rel=2e-3,
                                                     abs=2e-3)
    # all_reduce in place at one rank moves nothing: no bandwidth (nccl-tests printed 2e+06).
    assert all(r["moves_no_data"] and r["algbw_gbps"] is None for r in reduced.values())
    environment = read_document(ALL_GATHER)["distbench"]["environment"]
    assert environment["gpus"] == ["NVIDIA H200"] and environment["nccl"] == "2.28.9"
    assert environment["world_sizes"] == [1] and environment["source"] == "nccl-tests"


def plugin_records(sizes_us: dict[int, float]) -> list[dict]:
    """all_gather records of the plugin's suite at one nccl rank, p50 as given."""
    records = []
    for size, us in sizes_us.items():
        record = benchmark_record(size, [us * 1e-6 * f for f in (0.99, 1.0, 1.01)])
        name = f"test_all_gather[nccl-ws1-{size}]"
        record.update(id=f"pytest_distbench/suites/test_collectives.py::{name}", name=name,
                      family="all_gather", backend="nccl", world_size=1, device="cuda",
                      busbw_factor=0.0, busbw_gbps=0.0, rank_samples=[record["samples"]],
                      timing="cuda-batch", batch_iterations=20)
        records.append(record)
    return records


@pytest.fixture
def plugin_file(tmp_path) -> Path:
    # The plugin's p50s of the H200 run (shared README), at three bandwidth-bound sizes.
    records = plugin_records({1 << 20: 32.0, 64 << 20: 35.1, 256 << 20: 130.0, 1 << 30: 512.0})
    environment = dict(ENVIRONMENT, gpus=["NVIDIA H200"], nccl="2.28.9", world_sizes=[1])
    path = tmp_path / "plugin.json"
    write_document(make_document(records, environment, ["pytest"], commit_info={}), path,
                   overwrite=False)
    return path


def test_compare_puts_nccl_tests_beside_the_plugin_matched_by_what_they_measured(
        plugin_file, capsys):
    code = cli.main(["compare", str(ALL_GATHER), str(plugin_file), "--format=json"])
    captured = capsys.readouterr()
    assert code == 0
    verdicts = {v["nbytes"]: v for v in json.loads(captured.out)["benchmarks"]}
    gathered = by_size(ALL_GATHER)
    for size in (64 << 20, 256 << 20, 1 << 30):
        v = verdicts[size]
        assert v["verdict"] not in ("new", "missing")  # paired across the two tools
        assert v["baseline_p50_s"] == pytest.approx(gathered[size]["samples"][0])
    assert sum(v["verdict"] == "missing" for v in verdicts.values()) == len(gathered) - 4
    # One sample a size allows no test: the change against the threshold, never gateable.
    # 1 MiB: the plugin's 32 us (PyTorch's per-call cost) against NCCL's 7.07 us from C.
    assert verdicts[1 << 20]["verdict"] == "slower" and not verdicts[1 << 20]["gateable"]
    assert all(verdicts[n]["verdict"] == "unchanged" for n in (64 << 20, 256 << 20, 1 << 30))
    assert "nccl-tests' out-of-place times (the plugin's all_gather is out-of-place)" in (
        captured.err)
    assert "all_gather_perf -b 4 -e 1G" in captured.err
    text_code = cli.main(["compare", str(plugin_file), str(ALL_GATHER)])
    table = capsys.readouterr().out
    # The name cell wraps to fit 120 columns: its words, in order, on the row and the next line.
    assert text_code == 0
    lines = table.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("all_gather_perf"))
    width = len(next(line for line in lines if line.startswith("---")).split()[0])
    assert " ".join((lines[row][:width] + " " + lines[row + 1][:width]).split()).startswith(
        "all_gather_perf out-of-place (as the plugin calls all_gather)")


def test_plot_draws_an_nccl_tests_file_and_one_beside_the_plugin(plugin_file, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert cli.main(["plot", str(ALL_GATHER), "--out", str(tmp_path / "one")]) == 0
    assert list((tmp_path / "one").glob("*.png")) or list((tmp_path / "one").glob("*.svg"))
    assert cli.main(["plot", str(ALL_GATHER), str(plugin_file), "--out",
                     str(tmp_path / "two")]) == 0
    out = capsys.readouterr().out
    assert "wrote" in out and "all_gather" in out


def test_a_session_gates_against_an_nccl_tests_file_and_says_which_timing(pytester,
                                                                        distbench_run):
    pytester.makepyfile("""
        import pytest, torch, torch.distributed as dist

        @pytest.mark.distbench(iterations=5, warmup=1)
        def test_sum(distbench):
            x = torch.zeros(4)
            distbench.measure(lambda: dist.all_reduce(x), nbytes=16)
    """)
    result = distbench_run("--distbench", "--world-size=3", "--distbench-revisits=0",
                           f"--distbench-compare={ALL_REDUCE}")
    result.assert_outcomes(passed=1)
    said = " ".join(result.stdout.str().split())  # its line wraps to 120 columns at spaces
    assert re.search(rf"baseline {re.escape(str(ALL_REDUCE))}: all_reduce_perf -b 4 .*: "
                     r"nccl-tests' in-place times \(the plugin's all_reduce is in-place\)",
                     said), said




HOSTILE = [pytest.param(*case, id=name) for name, case in {
    "type-list": (ALL_GATHER, "results.2.type", ["float"], "results[2].type",
                  "unknown type ['float']"),
    "size-400-digits": (ALL_GATHER, "results.2.size", 10**400, "results[2].size",
                        "is out of range (beyond 2**63 - 1)"),
    "time-0-in-seconds": (ALL_GATHER, "results.2.out_of_place.time", 1e-320,
                          "results[2].out_of_place.time",
                          "expected a time per call in us (> 0), got 1e-320"),
    "iterations-4000-digits": (ALL_GATHER, "results.2.actual_iterations", 10**4000,
                               "results[2].actual_iterations",
                               "is out of range (beyond 2**63 - 1)"),
    "nwrong-1e300": (ALL_GATHER, "results.3.out_of_place.nwrong", 1e300, "results[3]",
                     "its figures make a record no results file holds: wrong: integer"),
    "version-20-MB": (ALL_REDUCE, "version", "v" * 20_000_000, "version",
                      "nccl-tests JSON format 'vvvv"),
}.items()]


@pytest.mark.parametrize(("source", "change", "value", "field", "message"), [
    (ALL_REDUCE, "version", 2, "version", "nccl-tests JSON format 2: this reads format 3"),
    (ALL_REDUCE, "args.0", "sendrecv_perf", "args[0]", "'sendrecv_perf' is not one of"),
    (ALL_REDUCE, "config.devices", DELETE, "config.devices", "expected a list of the ranks"),
    (ALL_REDUCE, "config.graph", "yes", "config.graph", "expected an integer >= 0"),
    (ALL_REDUCE, "results.3.in_place.time", -1.0, "results[3].in_place.time",
     "expected a time per call in us (> 0), got -1.0"),
    (ALL_GATHER, "results.5.out_of_place", DELETE, "results[5].out_of_place",
     "expected an object with time (us)"),
    (ALL_GATHER, "results.2.type", "float13", "results[2].type", "unknown type 'float13'"),
    (ALL_GATHER, "results.4.size", "64", "results[4].size", "expected bytes"),
    (ALL_GATHER, "results.4.actual_iterations", 0, "results[4].actual_iterations",
     "expected an integer >= 1"),
    (ALL_GATHER, "results", [], "results", "no size was measured"),
    # Hostile values (issue 54, items 3 and 4): through the results schema's own checks.
    *HOSTILE,
])
def test_a_damaged_nccl_tests_file_is_one_line_naming_file_and_field(
        tmp_path, capsys, plugin_file, source, change, value, field, message):
    damaged = damaged_copy(tmp_path, source, change, value)
    with pytest.raises(ResultsFileError) as caught:
        read_document(damaged)
    assert str(caught.value).startswith(f"{damaged}: {field}: nccl-tests JSON: ")
    assert message in str(caught.value)
    assert cli.main(["compare", str(damaged), str(plugin_file)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{damaged}: {field}: " in err and "Traceback" not in err
    assert len(err) < 400  # a value is quoted short, however long it is in the file


def damaged_copy(tmp_path: Path, source: Path, change: str, value: object) -> Path:
    doc = copy.deepcopy(raw(source))
    set_at(doc, change, value)
    damaged = tmp_path / source.name
    damaged.write_text(json.dumps(doc))
    return damaged


@pytest.mark.parametrize(("source", "change", "value", "field", "message"), HOSTILE)
def test_a_hostile_nccl_tests_file_is_one_line_of_plot(tmp_path, capsys, source, change, value,
                                                       field, message):
    """Not a traceback of `plot` (issue 54, item 4)."""
    pytest.importorskip("matplotlib")
    damaged = damaged_copy(tmp_path, source, change, value)
    assert cli.main(["plot", str(damaged), "--out", str(tmp_path / "plots")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"pytest-distbench: error: {damaged}: {field}: nccl-tests JSON: ")
    assert message in err and err.count("\n") == 1 and len(err) < 400, err


@pytest.mark.parametrize(("source", "change", "value", "field", "message"),
                         [case for case in HOSTILE if case.id in ("type-list", "size-400-digits")])
def test_a_hostile_nccl_tests_file_is_a_usage_error_of_a_session(
        pytester, distbench_run, source, change, value, field, message):
    """Not an INTERNALERROR (issue 54, item 3: the session's rc was 3)."""
    damaged = damaged_copy(pytester.path, source, change, value)
    pytester.makepyfile("def test_x(): pass")
    result = distbench_run("--distbench", f"--distbench-compare={damaged}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.stderr.lines[0].startswith(f"ERROR: --distbench-compare: {damaged}: {field}: ")
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_a_foreign_files_text_reaches_the_terminal_without_its_escapes(tmp_path, capsys):
    """device_info, hostname and args of an nccl-tests file are its writer's text: the lines
    that quote them show each control character as '?' (issue 54, item 4)."""
    doc = raw(ALL_GATHER)
    device = doc["config"]["devices"][0]
    device["device_info"] = "GPU\x1b[31mRED\x1b]0;title\x07"
    device["hostname"] = "host\x1b[2J"
    doc["args"] += ["\x1b]8;;http://x\x07", "x" * 100_000]
    hostile = tmp_path / "hostile.json"
    hostile.write_text(json.dumps(doc))
    for command in (["compare", str(hostile), str(ALL_GATHER)],
                    ["compare", str(hostile), str(ALL_GATHER), "--format=markdown"]):
        assert cli.main(command) == 0
        out = "".join(capsys.readouterr())
        assert not {"\x1b", "\x07"} & set(out)
        assert "gpus: [GPU?[31mRED?]0;title?] (baseline)" in out
        assert "?]8;;http://x?" in out and max(map(len, out.splitlines())) < 600
