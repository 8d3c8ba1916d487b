"""Each bandwidth as a share of a named peak (results/peaks.py): which peak, from where, compared
with which bandwidth; then the column, the legend, the digest, markdown and the results file
of real sessions, with a declared peak from the option and from the ini key."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from results_data import benchmark_record
from tables import read_table, unwrapped

from pytest_distbench.results import peaks
from pytest_distbench.results.document import check_record
from pytest_distbench.results.rendering import markdown
from pytest_distbench.results.rendering.table import render_tables
from pytest_distbench.results.sanity import MachineBounds
from pytest_distbench.settings import BACKENDS

BOUNDS = MachineBounds(copy_gbps=12.0, device_copy_gbps=2000.0)


def record(backend="gloo", device="cpu", world_size=2, busbw=3.0, algbw=3.0) -> dict:
    r = benchmark_record(1 << 20, [1e-3, 2e-3, 3e-3])
    r.update(backend=backend, device=device, world_size=world_size, busbw_gbps=busbw,
             algbw_gbps=algbw, rank_samples=[r["samples"]] * world_size)
    return r


def parse(text: str) -> dict[str, float]:
    return peaks.parse_declared(text, BACKENDS)


def test_a_declared_peak_is_read_per_backend_or_for_all():
    assert parse("nccl:370, gloo:8") == {"nccl": 370.0, "gloo": 8.0}
    assert parse("370") == {"*": 370.0}
    assert parse("NCCL:370GB/s") == {"nccl": 370.0}
    assert parse("370,gloo:8") == {"*": 370.0, "gloo": 8.0}  # every backend but gloo


@pytest.mark.parametrize(("text", "message"), [
    ("nccl:fast", "invalid peak 'nccl:fast': expected BACKEND:GB/s"),
    ("nccl:0", "invalid peak 'nccl:0': a bus bandwidth in GB/s from 0.001 to 100000"),
    ("nccl:inf", "from 0.001 to 100000"),
    (",", "expected BACKEND:GB/s"),
    # Issue 54, item 8: an infinite share, a 300-digit one, a backend no world has, two peaks.
    ("gloo:1e-320", "invalid peak 'gloo:1e-320': a bus bandwidth in GB/s from 0.001"),
    ("gloo:1e-300", "from 0.001 to 100000"),
    ("gloo:1e300", "from 0.001 to 100000"),
    ("foo:1", "invalid peak 'foo:1': unknown backend 'foo', expected one of gloo, nccl, mpi"),
    ("gloo:5,gloo:6", "invalid peak 'gloo:6': backend gloo given twice"),
    ("5,6", "invalid peak '6': a peak for every backend given twice"),
])
def test_a_bad_declared_peak_says_what_is_expected(text, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse(text)


@given(st.floats(peaks.MIN_DECLARED_GBPS, peaks.MAX_DECLARED_GBPS), st.floats(0, 1e6))
def test_any_peak_the_option_takes_makes_a_share_a_results_file_holds(gbps, busbw):
    """Whatever the option accepts (1e-320 made every share infinite, and the session then
    wrote none of its records), the share is a finite number of a few digits."""
    [(_, declared)] = parse(f"gloo:{gbps!r}").items()
    r = record(busbw=busbw)
    r["of_peak"] = peaks.of_peak(r, peaks.Peak(declared, "busbw", "declared"))
    check_record(r)
    assert len(peaks.pct_cell(r)) <= len("100000000000 %")


def test_where_each_world_s_peak_comes_from_and_which_bandwidth_it_judges():
    def peak(r, declared=None, gpus=(), one_host=True):
        return peaks.peak_for(r, declared or {}, BOUNDS, list(gpus), one_host)

    declared = peak(record(backend="nccl", device="cuda", world_size=8), {"nccl": 370.0})
    assert (declared.gbps, declared.bandwidth) == (370.0, "busbw")
    assert "declared (--distbench-peak-busbw, nccl busbw)" == declared.source
    assert peak(record(), {"*": 5.0}).gbps == 5.0
    # A host's copy rate moves from session to session: no share of it for a CPU world.
    assert peak(record(world_size=3)) is None and peak(record(world_size=1)) is None
    one_gpu = peak(record(backend="nccl", device="cuda", world_size=1))
    assert (one_gpu.gbps, one_gpu.bandwidth) == (2000.0, "algbw")
    assert "GPU's device-to-device copy" in one_gpu.source
    eight = record(backend="nccl", device="cuda", world_size=8)
    published = peak(eight, gpus=["NVIDIA H200"] * 8)
    assert (published.gbps, published.bandwidth) == (450.0, "busbw")
    assert published.source.startswith("published: NVIDIA H200, NVLink 4 per direction")
    assert peak(eight, gpus=["NVIDIA H200"], one_host=False) is None  # NVLink stays in a box
    assert peak(eight, gpus=["NVIDIA GeForce RTX 4090"]) is None
    assert peak(eight, gpus=["NVIDIA H200", "NVIDIA A100-SXM4-80GB"]) is None
    assert peaks.peak_for(record(world_size=1, device="cuda"), {}, MachineBounds(), [],
                          True) is None
    legend = peaks.legend([dict(record(world_size=3), busbw_gbps=1.0)])
    assert "no peak known for gloo on cpu at 3 ranks (a host's copy rate moves too much" in legend


@given(st.floats(1e-6, 1e6), st.floats(1e-3, 1e4), st.sampled_from(["algbw", "busbw"]))
def test_the_share_is_the_named_bandwidth_over_the_peak(value, peak_gbps, bandwidth):
    r = record(busbw=value if bandwidth == "busbw" else 1.0,
               algbw=value if bandwidth == "algbw" else 1.0)
    share = peaks.of_peak(r, peaks.Peak(peak_gbps, bandwidth, "x"))
    assert share["pct"] == pytest.approx(100 * value / peak_gbps)
    assert share["bandwidth"] == bandwidth and share["peak_gbps"] == peak_gbps
    assert peaks.of_peak(dict(r, **{f"{bandwidth}_gbps": None}),
                         peaks.Peak(peak_gbps, bandwidth, "x")) is None


def test_the_table_shows_the_share_beside_the_bandwidths_and_names_its_peak():
    r = record(backend="nccl", device="cuda", world_size=8, busbw=369.0)
    r["of_peak"] = peaks.of_peak(r, peaks.peak_for(r, {}, BOUNDS, ["NVIDIA H200"], True))
    text = unwrapped(render_tables([r]))
    headers, [row] = read_table(render_tables([r]).splitlines()[1:])
    assert headers.index("busbw") + 1 == headers.index("% of peak")
    assert row[headers.index("% of peak")] == "82 %"  # 369 of 450 GB/s
    assert ("# % of peak = busbw / 450 GB/s (published: NVIDIA H200, NVLink 4 per direction, "
            "NVIDIA H200 datasheet)") in text
    md = markdown.render([r])
    assert "% of peak |" in md and "|        82 % |" in md
    bare = render_tables([record(backend="nccl", device="cuda", world_size=8)])
    assert "% of peak" not in read_table(bare.splitlines()[1:])[0]
    bare = unwrapped(bare)
    assert ("# % of peak: no peak known for nccl on cuda at 8 ranks; declare one with "
            "--distbench-peak-busbw=nccl:GB/s (ini distbench_peak_busbw)") in bare


BENCH = """
import pytest, torch, torch.distributed as dist

@pytest.mark.distbench(iterations=5, warmup=1)
def test_sum(distbench, nbytes):
    x = torch.zeros(max(1, nbytes // 4))
    distbench.measure(lambda: dist.all_reduce(x), nbytes=nbytes, busbw_factor=4 / 3)
"""


@pytest.mark.parametrize("where", ["option", "ini"])
def test_a_declared_peak_reaches_the_column_the_digest_and_the_file(pytester, distbench_run,
                                                                      where):
    pytester.makepyfile(BENCH)
    declared = ["--distbench-peak-busbw=gloo:0.5"]
    if where == "ini":
        pytester.makeini("[pytest]\ndistbench_peak_busbw = gloo:0.5\n")
        declared = []
    out = pytester.path / "out.json"
    result = distbench_run("--distbench", "--world-size=3", "--tensor-size=64KiB",
                           "--distbench-revisits=0", f"--distbench-json={out}", *declared)
    result.assert_outcomes(passed=1)
    [r] = [b["distbench"] for b in json.loads(out.read_text())["benchmarks"]]
    assert r["of_peak"]["pct"] == pytest.approx(100 * r["busbw_gbps"] / 0.5)
    assert r["of_peak"]["source"] == "declared (--distbench-peak-busbw, gloo busbw)"
    text = result.stdout.str()
    assert "# % of peak = busbw / 0.5 GB/s (declared (--distbench-peak-busbw, gloo busbw))" in (
        text)
    digest = text.split("distbench digest", 1)[1]
    assert f"busbw {peaks.pct_cell(r)} of peak" in digest


@pytest.mark.parametrize("value", ["nccl:fast", "gloo:1e-320"])  # the rest: the parser's test
def test_a_bad_declared_peak_is_a_usage_error_naming_the_option(pytester, value):
    pytester.makepyfile(BENCH)
    result = pytester.runpytest_subprocess("--distbench", f"--distbench-peak-busbw={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --distbench-peak-busbw: invalid peak '{value}'*"])
    assert "Traceback" not in result.stderr.str()
