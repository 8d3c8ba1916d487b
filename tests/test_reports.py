"""Plots, headlines, JUnit properties and markdown from records (no ranks needed)."""

from __future__ import annotations

import copy
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import plot_data
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tables import read_table, unwrapped

from pytest_distbench.results.comparison.verdict import compare_documents
from pytest_distbench.results.document import write_document
from pytest_distbench.results.rendering import (
    ci,
    fit,
    junit,
    markdown,
    plot,
    plot_spec,
    registered,
    report,
    table,
)
from pytest_distbench.results.statistics.ratio import ratio_interval

matplotlib = pytest.importorskip("matplotlib")
REPO = Path(__file__).resolve().parents[1]


def _png_ok(path: Path) -> None:
    import matplotlib.image  # not imported by `import matplotlib`: only after a plot was drawn
    from PIL import Image

    with Image.open(path) as image:
        image.verify()  # a truncated or corrupt PNG raises here
    pixels = matplotlib.image.imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 200 and pixels.shape[1] > 300
    assert pixels.std() > 0.01  # not a blank canvas


def test_every_family_of_the_contract_has_a_plot_with_its_series(tmp_path):
    doc = plot_data.document(plot_data.every_family())
    rendered = {r.path.name: r for r in plot.plot_document(doc, tmp_path)}
    expected = {
        # file: (series, lines per panel)
        "all_reduce.png": (("gloo, 2 ranks", "gloo, 4 ranks"), (2, 2)),
        "all_gather.png": (("gloo, 2 ranks", "gloo, 4 ranks"), (2, 2)),
        "barrier.png": (("gloo",), (1,)),
        "p2p_latency.png": (("gloo, 2 ranks",), (1,)),
        "p2p_bandwidth.png": (("gloo, 2 ranks",), (1,)),
        "message_rate-gloo-ws4.png": (("client_to_computation", "computation_to_client",
                                       "computation_to_computation"), (3, 3)),
        "rpc_transports-ws2.png": (("gloo_send_recv", "tensorpipe_shm", "tensorpipe_uv"), (3,)),
        "agent_observer.png": (("gloo",), (4, 4, 4, 4)),  # p50/p75/p90/p95 in four panels
        "store_init-ws2.png": (("legacy", "libuv"), (2,)),
        "store_barrier-ws2.png": (("legacy", "libuv"), (2,)),
    }
    assert set(rendered) == set(expected)
    for name, (series, lines) in expected.items():
        assert (rendered[name].series, rendered[name].lines_per_panel) == (series, lines), name
        _png_ok(tmp_path / name)


def test_contract_family_names_all_have_a_spec():
    families = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
                "all_to_all", "barrier", "p2p_latency", "p2p_bandwidth", "p2p_bibw",
                "p2p_message_rate_pairs", "message_rate", "rpc_latency", "rpc_throughput",
                "rpc_transports", "agent_observer", "store_init", "store_barrier", "store_ops"]
    missing = [f for f in families if registered.spec_for({"family": f}) is None]
    assert missing == []


def test_a_parameter_that_varies_besides_x_and_series_splits_the_files(tmp_path):
    records = plot_data.collectives(world_sizes=(2,))
    for record in [r for r in records if r["family"] == "all_reduce"]:
        twin = copy.deepcopy(record)
        twin["id"] += "-fp16"
        twin["params"]["dtype_name"] = "float16"
        record["params"]["dtype_name"] = "float32"
        records.append(twin)
    names = sorted(r.path.name for r in plot.plot_records(records, {}, tmp_path))
    assert names == ["all_gather.png", "all_reduce-dtype_namefloat16.png",
                     "all_reduce-dtype_namefloat32.png", "barrier.png"]


def test_a_users_own_sized_benchmark_gets_time_against_size(tmp_path):
    mine = [plot_data.record("my_codec", nbytes=n, seconds=1e-5 * (1 + n / 1e6))
            for n in plot_data.SIZES[:5]]
    unsized = plot_data.record("my_setup", seconds=1e-3)
    [rendered] = plot.plot_records(mine + [unsized], {}, tmp_path)
    assert rendered.path.name == "my_codec.png" and rendered.lines_per_panel == (1,)
    _png_ok(rendered.path)


def test_names_from_a_foreign_file_stay_text_and_inside_the_directory(tmp_path):
    hostile = "../../$\\frac{x$/evil"
    records = [plot_data.record(hostile, nbytes=n, seconds=1e-5, backend="$\\alpha")
               for n in plot_data.SIZES[:3]]
    [rendered] = plot.plot_records(records, {"torch": "$x", "cpu_model": "a\nb"}, tmp_path)
    assert rendered.path.parent == tmp_path and "/" not in rendered.path.name
    _png_ok(rendered.path)


def test_caption_names_torch_backend_cpu_and_world_sizes():
    records = plot_data.collectives(world_sizes=(2, 4))
    text = plot.caption(plot_data.ENVIRONMENT, records)
    for part in ("torch 2.13.0+cpu", "backend gloo", "world size 2,4", "CPU Test CPU"):
        assert part in text


def test_band_is_p5_to_p95_of_the_times_and_inverted_for_rates():
    record = plot_data.record("all_reduce", nbytes=1 << 20, seconds=1e-3, busbw_factor=1.0)
    ordered = sorted(record["samples"])
    from pytest_distbench.results.statistics.stats import percentile

    time_low, time_high = plot_spec.Value("t", of_time=plot_spec.time_us).band(record)
    assert time_low == pytest.approx(percentile(ordered, 5) * 1e6)
    assert time_high == pytest.approx(percentile(ordered, 95) * 1e6)
    from pytest_distbench.families.collectives.family import BUSBW

    bw_low, bw_high = BUSBW.band(record)
    assert bw_low == pytest.approx((1 << 20) / percentile(ordered, 95) / 1e9)
    assert bw_high == pytest.approx((1 << 20) / percentile(ordered, 5) / 1e9)


def test_comparison_plot_has_one_point_per_judged_benchmark(tmp_path):
    records = plot_data.collectives(world_sizes=(2,))
    base = plot_data.document(records)
    changed = copy.deepcopy(records)
    for i, record in enumerate(changed):
        factor = (1.0, 1.5, 0.6)[i % 3]
        record["samples"] = [s * factor for s in record["samples"]]
    cur = plot_data.document(changed[1:])  # one benchmark missing: not drawn
    comparison = compare_documents(base, cur, threshold=0.1)
    [rendered] = plot.plot_comparison(base, cur, comparison, tmp_path)
    assert rendered.path.name == "comparison.png"
    assert rendered.lines_per_panel == (len(records) - 1,)
    # One stored run cannot gate: changes are "slower" / "faster", never a regression.
    assert set(rendered.series) == {"slower", "faster", "unchanged"}
    _png_ok(rendered.path)
    rows = plot.comparison_rows(base, cur, comparison)
    kinds = {row.name: row.kind for row in rows}
    assert {v.name: v.kind for v in comparison.verdicts if v.kind not in ("missing",)} == kinds


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(1e-6, 1.0), min_size=1, max_size=80),
       st.lists(st.floats(1e-6, 1.0), min_size=1, max_size=80),
       st.floats(0.1, 10.0))
def test_ratio_interval_holds_the_ratio_and_scales_with_the_current_run(base, cur, factor):
    ratio, low, high = ratio_interval(base, cur)
    assert low <= ratio <= high
    scaled, scaled_low, scaled_high = ratio_interval(base, [x * factor for x in cur])
    assert scaled == pytest.approx(ratio * factor, rel=1e-9)
    assert scaled_low == pytest.approx(low * factor, rel=1e-9)
    assert scaled_high == pytest.approx(high * factor, rel=1e-9)


@given(st.floats(1e-12, 1e12))
def test_significant_keeps_three_digits_and_never_prints_zero(value):
    text = plot_spec.significant(value)
    assert "e" not in text
    back = float(text.replace(",", ""))
    assert back > 0
    assert math.isclose(back, value, rel_tol=5.01e-3)


def test_headlines_per_family():
    busbw = plot_data.record("all_reduce", nbytes=1 << 20, seconds=1e-3, busbw_factor=1.0)
    p50 = busbw["summary"]["p50"]
    low, high = ci.p50_bounds(busbw)
    time_pct = ci.pct_text(100 * (high - low) / 2 / p50)
    rate_pct = ci.pct_text(ci.rate_pct(busbw))
    assert registered.headline([busbw]) == (
        f"p50 {plot_spec.significant(p50 * 1e6)} us {time_pct}, "
        f"busbw {plot_spec.significant((1 << 20) / p50 / 1e9)} GB/s {rate_pct}")
    rate = plot_data.message_rate()[0]
    assert re.search(r"MB/s ± [\d.]+ %$", registered.headline([rate]))
    assert "msgs/s ± " in registered.headline([rate])
    p2p = plot_data.p2p()[0]
    one_way = p2p["summary"]["p50"] / 2 * 1e6
    assert registered.headline([p2p]) == (f"one-way {plot_spec.significant(one_way)} us "
                                         f"{ci.pct_text(ci.p50_pct(p2p))}")
    custom = dict(busbw, family="my_own_benchmark")
    assert registered.headline([custom]) == f"p50 {plot_spec.significant(p50 * 1e6)} us {time_pct}"


def test_junit_properties_hold_the_figures_and_the_verdict():
    record = plot_data.record("message_rate", nbytes=1024, seconds=1e-3,
                              params={"path": "client_to_computation", "credits": 10},
                              figures={"messages_per_iteration": 100,
                                       "connect": {"p95_s": 0.25}, "per_rank": [1, 2]})
    verdict = compare_documents(plot_data.document([record]), plot_data.document([record]),
                                threshold=0.1).verdicts[0]
    props = dict(junit.properties([record], {record["id"]: verdict}))
    assert props["p50_us"] == pytest.approx(record["summary"]["p50"] * 1e6)
    assert props["p95_us"] == pytest.approx(record["summary"]["p95"] * 1e6)
    assert props["algbw_gbps"] == pytest.approx(record["algbw_gbps"], rel=1e-5)
    # 100 messages per iteration of about 1 ms: the family's derived rate, about 1e5 msgs/s.
    assert props["msgs_per_s"] == pytest.approx(record["figures"]["msgs_per_s"], rel=1e-4)
    assert 5e4 < props["msgs_per_s"] < 1e5 and props["messages_per_iteration"] == 100
    assert props["connect.p95_s"] == 0.25 and "per_rank" not in props
    assert props["verdict"] == "unchanged" and props["change_pct"] == 0


def test_markdown_has_a_github_table_per_group_notes_and_the_comparison():
    records = plot_data.collectives(world_sizes=(2,))
    records[0]["requested_nbytes"] = [4, 2]
    comparison = compare_documents(plot_data.document(records), plot_data.document(records),
                                   threshold=0.1)
    text = markdown.render(records, plot_data.ENVIRONMENT, comparison)
    assert "### all\\_reduce · backend gloo · 2 ranks · cpu" in text
    headers = [ln for ln in text.splitlines() if re.match(r"\|\s+size\s+\|", ln)]
    assert len(headers) == 3  # all_reduce, all_gather, barrier
    assert all(re.search(r"\|\s+busbw\s+\|", ln) for ln in headers)
    assert re.search(r"\n\|-+\|-+", text)  # the GitHub header separator
    assert "> requested sizes 4 B, 2 B all move 4 B at 2 ranks: measured once" in text
    assert "\n# " not in text  # footers became notes, not headings
    assert "## pytest-distbench comparison" in text and "| benchmark" in text


def test_markdown_appends(tmp_path):
    path = tmp_path / "summary.md"
    path.write_text("earlier step\n")
    markdown.append(path, "## ours\n")
    assert path.read_text() == "earlier step\n\n## ours\n"


def test_small_bandwidths_print_in_a_unit_they_read_in_with_three_significant_digits():
    small = plot_data.record("all_reduce", nbytes=4, seconds=2.5e-4, busbw_factor=1.0)
    large = plot_data.record("all_reduce", nbytes=64 << 20, seconds=0.2, busbw_factor=1.0)
    text = table.render_tables([small, large])
    line = [ln for ln in text.splitlines() if ln.strip().startswith("4 B")][0]
    # 4 B in about 270 us (the p50 of the samples) = 0.0000148 GB/s: the cell says 14.8 KB/s,
    # labelled, not 0.0000148, while the 64 MiB row of the same table reads in GB/s.
    expected = plot_spec.significant(4 / small["summary"]["p50"] / 1e3)
    assert expected == "14.8" and f" {expected} KB/s " in line and "0.0000" not in line
    big = [ln for ln in text.splitlines() if ln.strip().startswith("64 MiB")][0]
    assert re.search(r" 0\.\d+ GB/s ", big), big


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    code = ("import sys; from pytest_distbench.cli import main; rc = main(sys.argv[1:]); "
            "assert 'torch' not in sys.modules, 'the plot command imported torch'; "
            "sys.exit(rc)")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=180, env=env, cwd=REPO)


def test_cli_plots_a_run_and_a_comparison_without_torch(tmp_path):
    run = tmp_path / "run.json"
    write_document(plot_data.document(plot_data.collectives()), run, overwrite=False)
    done = _cli("plot", str(run), "--out", str(tmp_path / "plots"))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "all_gather.png", "all_reduce.png", "barrier.png"]
    assert "wrote" in done.stdout
    done = _cli("plot", str(run), str(run), "--out", str(tmp_path / "cmp"))
    assert done.returncode == 0, done.stderr
    _png_ok(tmp_path / "cmp" / "comparison.png")


def test_cli_plot_errors_are_one_line(tmp_path):
    done = _cli("plot", str(tmp_path / "missing.json"), "--out", str(tmp_path))
    assert done.returncode == 2 and "missing.json" in done.stderr
    assert "Traceback" not in done.stderr
    done = _cli("plot", "a.json", "b.json", "c.json", "--out", str(tmp_path))
    assert done.returncode == 2 and "one results file, or two" in done.stderr


def test_cli_plot_shows_names_from_a_file_without_control_characters(tmp_path):
    """A hostile file's names reach the terminal as `compare` shows them: an escape sequence
    in a backend (a plot's title) or a file name (a comparison's title) is not sent raw."""
    # One family's plot: the names are the point, not how many plots are drawn.
    records = [r for r in plot_data.collectives() if r["family"] == "all_reduce"]
    for record in records:
        record["backend"] = "gloo\x1b]0;owned\x07\x1b[2J"
    run = tmp_path / "run\x1b[31m.json"
    write_document(plot_data.document(records), run, overwrite=False)
    for files in ([run], [run, run]):
        done = _cli("plot", *map(str, files), "--out", str(tmp_path / "plots"))
        assert done.returncode == 0, done.stderr
        assert "wrote" in done.stdout and "\x1b" not in done.stdout, done.stdout
        assert "\x07" not in done.stdout


def test_missing_matplotlib_names_the_extra(tmp_path):
    # A matplotlib that cannot be imported, first on the path: as if it were not installed.
    fake = tmp_path / "fake"
    (fake / "matplotlib").mkdir(parents=True)
    (fake / "matplotlib" / "__init__.py").write_text("raise ImportError('not installed')\n")
    run = tmp_path / "run.json"
    write_document(plot_data.document(plot_data.collectives()), run, overwrite=False)
    env = dict(os.environ, PYTHONPATH=f"{fake}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    done = _cli("plot", str(run), "--out", str(tmp_path / "plots"), env=env)
    assert done.returncode == 2
    assert 'pip install "pytest-distbench[plot]"' in done.stderr
    assert not (tmp_path / "plots").exists()


def _stalling_all_reduce() -> dict:
    # ws2 64 KiB on a stalling VM: most iterations ~360 us, one in five a 6 ms stall, so the
    # mean (what nccl-tests and PARAM print) is ~4x the p50 (issue 18, defect 9).
    record = plot_data.record("all_reduce", nbytes=64 << 10, seconds=360e-6, busbw_factor=1.0)
    samples = [6e-3 if i % 5 == 0 else 360e-6 * (1 + 0.01 * (i % 7)) for i in range(100)]
    summary = plot_data.summarize(samples).as_dict()
    record.update(samples=samples, rank_samples=[samples, samples], summary=summary,
                  iterations=100, algbw_gbps=(64 << 10) / summary["p50"] / 1e9)
    record["busbw_gbps"] = record["algbw_gbps"]
    return record


def test_the_table_says_its_headline_is_a_p50_and_shows_the_mean_nccl_tests_print():
    record = _stalling_all_reduce()
    text = table.render_tables([record])
    title, *lines = text.splitlines()
    assert title.endswith("| time: p50 of the slowest rank per iteration ± 95 % CI")
    columns, (cells,) = read_table(lines)
    p50_cell = cells[columns.index("p50 (us) ± 95% CI")]
    mean_cell = cells[columns.index("mean (us) nccl-tests, PARAM")]
    value, pct = re.fullmatch(r"([\d,.]+) ± ([\d.]+) %", p50_cell).groups()
    assert float(value.replace(",", "")) == pytest.approx(record["summary"]["p50"] * 1e6, rel=0.01)
    assert float(mean_cell.replace(",", "")) == pytest.approx(record["summary"]["mean"] * 1e6,
                                                              rel=0.01)
    assert float(mean_cell.replace(",", "")) > 3 * float(value.replace(",", ""))
    assert "p50_ci" not in record  # as in an older file: the interval comes from the samples
    assert 0 < float(pct) < 5
    assert "mean = what nccl-tests and PARAM comms print" in table.LEGEND


def test_every_output_carries_the_p50_interval():
    record = _stalling_all_reduce()
    props = dict(junit.properties([record]))
    assert props["p50_ci_low_us"] <= props["p50_us"] <= props["p50_ci_high_us"]
    assert props["p50_ci_pct"] > 0
    assert re.fullmatch(r"p50 [\d,.]+ us ± [\d.]+ %, busbw [\d.]+ GB/s ± [\d.]+ %",
                        registered.headline([record]))
    text = markdown.render([record])
    assert ("### all\\_reduce · backend gloo · 2 ranks · cpu · time: p50 of the slowest rank "
            "per iteration ± 95 % CI") in text
    assert re.search(r"\| +[\d,]+ ± [\d.]+ % +\|", text)
    few = plot_data.record("all_reduce", nbytes=4, seconds=1e-4, n=5, busbw_factor=1.0)
    assert dict(junit.properties([few]))["p50_ci"] == "no CI: n too small"
    assert "(no CI: n too small)" in table.render_tables([few])


def test_a_plot_draws_the_p50_interval_as_error_bars(tmp_path):
    record = _stalling_all_reduce()
    (spec,) = [s for s in registered.specs() if s.name == "collectives"]
    time_value = spec.panels[1].values[0]
    low, high = time_value.interval(record)
    assert low < time_value.at(record) < high
    rendered = plot.plot_records([record], plot_data.ENVIRONMENT, tmp_path)
    _png_ok(rendered[0].path)


@given(st.floats(1e-12, 1e4))
def test_a_bandwidth_cell_reads_in_the_largest_unit_it_reads_at_least_0_1_in(value):
    from pytest_distbench.results.rendering.table import bandwidth_cell

    number, unit = bandwidth_cell(value).split()
    scale = {"GB/s": 1, "MB/s": 1e3, "KB/s": 1e6}[unit]
    shown = float(number.replace(",", ""))
    assert shown == pytest.approx(value * scale, rel=6e-3)  # three significant digits
    if unit != "KB/s":
        assert shown >= 0.0995  # else a smaller unit would read better
    if unit != "GB/s":
        assert value * scale / 1e3 < 0.1  # the larger unit would read below 0.1


def test_rpc_throughput_is_one_plot_with_a_line_per_payload_size(tmp_path):
    from pytest_distbench.results.rendering.plot import plot_records

    records = []
    for nbytes in (4, 1024, 65536):
        for credits in (1, 16):
            record = plot_data.record("rpc_throughput", nbytes=nbytes, seconds=1e-3 * (
                1 + nbytes / 65536) / credits ** 0.5, busbw_factor=1.0)
            record["params"] = {"credits": credits, "nbytes": nbytes}
            record["figures"] = {"messages_per_iteration": credits, "credits": credits,
                                 "msgs_per_s": credits / record["summary"]["p50"]}
            records.append(record)
    written = plot_records(records, {}, tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["rpc_throughput.png"]
    assert len(written) == 1


def test_a_narrow_log_axis_gets_several_labelled_ticks_and_banded_lines_their_own_swatch():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pytest_distbench.results.rendering.plot import _legend, _style_axes

    (spec,) = [s for s in registered.specs() if s.name == "agent_observer"]
    fig, ax = plt.subplots()
    line = ax.plot([8, 8, 8, 8], [1.39, 1.49, 1.94, 2.65], "o", label="p50")[0]
    ax.fill_between([8, 8], [1.3, 1.3], [2.7, 2.7], color=line.get_color(), alpha=0.18)
    _style_axes(ax, spec, spec.panels[0], [8])
    _legend(ax, {"p50"})
    fig.canvas.draw()
    labelled = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    # 1.39 to 2.65 ms: a log axis would label only "2"; the plot labels several ticks.
    assert len(labelled) >= 3, labelled
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["p50"]  # no grey band entry
    plt.close(fig)


def test_every_plot_footer_cites_only_files_of_the_repository():
    root = Path(__file__).resolve().parent.parent
    for spec in registered.specs():
        for cited in re.findall(r"[\w./-]+\.md", spec.note):
            assert (root / cited).is_file(), f"{spec.name} cites {cited}"


def _named(name: str, **kwargs) -> dict:
    """A user's own measurement: `name` as distbench.measure(..., name=...) gives it."""
    made = plot_data.record(**kwargs)
    made["name"] = f"test_mine[gloo-ws2]::{name}"
    made["id"] = f"suite.py::{made['name']}"
    return made


_TEXT = st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=20)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1 << 50), _TEXT, st.booleans()), min_size=1,
                max_size=6))
def test_any_byte_count_and_name_reach_the_tables_and_a_row_that_fails_loses_only_itself(rows):
    records = []
    for i, (nbytes, name, damaged) in enumerate(rows):
        made = _named(name, family="all_reduce", nbytes=nbytes, seconds=1e-4, n=8, seed=i,
                      busbw_factor=1.0)
        if damaged:  # a record from a file written by hand: the renderer raises on it
            del made["summary"]["mean"]
        records.append(made)
    text = table.render_tables(records)
    md = markdown.render(records)
    for made, (nbytes, _, damaged) in zip(records, rows, strict=True):
        if damaged:
            assert f"{made['name']}: not shown, the table could not render it (KeyError" in text
            assert f"{made['name']}: not shown" in md
            continue
        p50 = ci.with_pct(table.units.format_duration_us(made["summary"]["p50"]),
                          ci.p50_pct(made), made)
        size = f" {table.units.format_size_exact(nbytes)} "
        # Its row: two rows may share a p50 (the same samples), never a size and a p50.
        assert any(f" {p50} " in ln and size in f" {ln}" for ln in text.splitlines()), text
        assert f" {table.units.format_size_exact(nbytes)} |" in md


def test_a_title_that_fails_to_render_keeps_its_rows_and_the_other_tables():
    odd, even = (plot_data.record("all_reduce", nbytes=n, seconds=1e-4, busbw_factor=1.0)
                 for n in (3000, 4096))
    for made, batch in ((odd, "x"), (even, 4)):  # a file edited by hand: a text batch size
        made.update(timing="cuda-batch", batch_iterations=batch)
    other = plot_data.record("all_gather", nbytes=18720, seconds=1e-4, busbw_factor=0.5)
    lines = table.render_tables([odd, even, other]).splitlines()
    assert lines[0].startswith("# all_reduce  backend=gloo  ranks=2: not shown, the table could "
                               "not render it (TypeError")
    _, rows = read_table(lines[1:])  # the headers may take two lines (120 columns)
    assert [row[0] for row in rows] == ["3000 B", "4 KiB"]
    assert any(re.match(r" *18720 B ", line) for line in lines)


def test_a_users_named_measurements_are_told_apart_in_the_rows_and_the_verbose_line():
    ring = _named("ring_all_reduce", family="all_reduce", nbytes=4096, seconds=3e-4,
                  busbw_factor=1.0)
    builtin = _named("builtin_all_reduce", family="all_reduce", nbytes=4096, seconds=4e-4,
                     busbw_factor=1.0, seed=1)
    other = plot_data.record("all_reduce", nbytes=8192, seconds=5e-4, busbw_factor=1.0)
    text = table.render_tables([ring, builtin, other])
    for made, name in ((ring, "ring_all_reduce"), (builtin, "builtin_all_reduce")):
        p50 = table.units.format_duration_us(made["summary"]["p50"])
        (line,) = [ln for ln in text.splitlines() if ln.startswith(f"test_mine::{name} ")]
        assert f" {p50} ± " in line
    assert text.splitlines()[1].startswith("name ")
    # Rows a size tells apart need no name column.
    assert "name" not in table.render_tables([ring, other]).splitlines()[1]
    # A test's own parameter that differs between rows that share a size says which is which.
    fast, slow = (plot_data.record("my_step", nbytes=4096, seconds=s, params={"lr": lr})
                  for s, lr in ((1e-4, 0.1), (2e-4, 1.0)))
    _, rows = read_table(table.render_tables([fast, slow]).splitlines()[1:])
    assert [row[0] for row in rows] == ["lr=0.1", "lr=1.0"]
    verbose = registered.headline([ring, builtin])
    assert re.fullmatch(r"ring_all_reduce: p50 .*; builtin_all_reduce: p50 .*", verbose)
    assert not registered.headline([ring]).startswith("ring_all_reduce")  # one: no name needed


@given(st.integers(1, 1 << 34), st.floats(1e-6, 1.0))
def test_a_verbose_line_prints_bandwidth_as_the_tables_do(nbytes, seconds):
    from pytest_distbench.families.collectives.family import BUSBW

    made = plot_data.record("all_reduce", nbytes=nbytes, seconds=seconds, n=8,
                            busbw_factor=1.0)
    assert f"busbw {table.bandwidth_cell(BUSBW.at(made))} ± " in registered.headline([made])


def test_a_requested_size_other_than_the_measured_one_is_noted_with_the_definition():
    made = plot_data.record("all_gather", nbytes=8, seconds=1e-4, busbw_factor=0.5)
    made["requested_nbytes"] = [4]
    text = unwrapped(table.render_tables([made]))  # notes wrap at 120 columns
    assert "# requested size 4 B moves 8 B at 2 ranks: the row shows what was measured" in text
    assert f"# {table.SIZE_DEFINITION}" in text
    made["requested_nbytes"] = [8]  # what was asked is what is shown: nothing to say
    assert "requested" not in table.render_tables([made])


def test_the_rpc_throughput_note_explains_the_rows_of_its_own_table():
    def throughput(credits: int, ran: int) -> dict:
        return plot_data.record("rpc_throughput", nbytes=64 << 20, seconds=0.1,
                                params={"credits": credits},
                                figures={"credits": ran, "credits_requested": credits,
                                         "messages_per_iteration": ran})

    text = table.render_tables([throughput(10, 4)])
    assert re.search(r"64 MiB +4 \(of 10\) ", text), text
    assert "'4 (of 10)': 10 requested, 4 ran in flight" in text and "256)" not in text
    assert "(of" not in table.render_tables([throughput(2, 2)]).split("\n# ", 1)[1]


def test_a_record_that_did_not_complete_is_a_row_never_a_figure(tmp_path):
    """Issue 30: a measurement that did not finish within its bound (the TCPStore legacy
    backend at 4096 clients) is kept with its one sample, the bound; tables and -v lines say
    'did not complete in 120 s', and no comparison, gate or plot reads the bound as a time."""
    from pytest_distbench.results.document import read_document, schema

    records = plot_data.collectives(world_sizes=(2,))
    late = dict(copy.deepcopy(records[0]), samples=[120.0],
                incomplete={"bound_s": 120.0, "reason": "wait timeout after 120000ms"})
    from pytest_distbench.results.statistics.stats import summarize

    late["summary"] = summarize([120.0]).as_dict()
    late["rank_samples"] = [[120.0], [120.0]]
    late.pop("p50_ci", None)
    doc = plot_data.document([late] + records[1:])
    path = tmp_path / "late.json"
    write_document(doc, path, overwrite=False)
    stored = read_document(path)  # kept, and valid
    [kept] = [b["distbench"] for b in stored["benchmarks"] if b["distbench"].get("incomplete")]
    assert kept["incomplete"]["bound_s"] == 120.0 and kept["samples"] == [120.0]
    assert late["id"] not in schema.records(stored)
    verdict = compare_documents(plot_data.document(records), stored, threshold=0.1).get(late["id"])
    assert verdict.kind == "missing"  # never "slower" by the bound
    row = next(line for line in table.render_tables([late]).splitlines()
               if "did not complete" in line)
    assert "did not complete in 120 s" in row and "120000000" not in row
    assert registered.headline([late]) == "did not complete in 120 s"
    assert dict(junit.record_properties(late))["incomplete"].startswith(
        "did not complete in 120 s: wait timeout")
    bad = copy.deepcopy(stored)
    bad["benchmarks"][0]["distbench"]["incomplete"] = {"bound_s": "long"}
    with pytest.raises(schema.SchemaError, match="expected an object with bound_s") as info:
        schema.validate_document(bad)
    assert info.value.field == "benchmarks[0].distbench.incomplete"


def test_a_users_parametrized_label_stays_on_its_rows_line_in_a_table_fitted_to_120():
    """`test_rings impl=ring` wrapped onto a line of its own, unindented, under every row."""
    def rings(world_size: int, nbytes: int, seconds: float, starred: bool) -> list[dict]:
        made = []
        for impl in ("ring", "builtin"):
            record = plot_data.record("all_reduce", nbytes=nbytes, seconds=seconds,
                                      world_size=world_size, n=20, busbw_factor=1.0,
                                      params={"impl": impl})
            record["name"] = f"test_rings[gloo-ws{world_size}-{impl}-{nbytes}]"
            record["count"] = record["dtype"] = None  # measure(nbytes=...) of their own
            if starred:  # the starred interval: the widest p50 cell
                record["precision"] = {"met": False}
            made.append(record)
        return made

    # As a user's run printed it (2 ranks, 1 KiB and 64 KiB), and the widest table there is
    # (8 ranks at 64 MiB, starred: 120 columns without a name), which then stays wider.
    for made, fits in ((rings(2, 1024, 2e-3, False) + rings(2, 64 << 10, 1e-3, False), True),
                       (rings(8, 64 << 20, 0.3, True), False)):
        lines = table.render_tables(made).splitlines()
        assert max(map(len, lines)) <= fit.WIDTH or not fits, lines
        for impl in ("ring", "builtin"):
            named = [ln for ln in lines if f"impl={impl}" in ln]
            assert named and all(ln.startswith(f"impl={impl} ") and "iB " in ln
                                 for ln in named), lines


def _alike(family: str, figures: dict, **kwargs) -> list[dict]:
    """A user's two measurements of one family at one point, named as measure(name=...)."""
    return [_named(name, family=family, figures=dict(figures), seed=k, **kwargs)
            for k, name in enumerate(("mine_eager", "mine_lazy"))]


@pytest.mark.parametrize("family, figures, kwargs", [
    ("p2p_latency", {"messages_per_iteration": 2}, {"nbytes": 1024, "seconds": 4e-5}),
    ("p2p_bandwidth", {"messages_per_iteration": 64, "window": 64, "pairs": 1},
     {"nbytes": 1024, "seconds": 1e-3}),
    ("message_rate", {"messages_per_iteration": 100, "path": "client_to_computation",
                      "credits": 1, "transport": "process_group"},
     {"nbytes": 1024, "seconds": 3e-3, "world_size": 4}),
    ("rpc_latency", {}, {"nbytes": 1024, "seconds": 2e-4}),
    ("rpc_throughput", {"credits": 10}, {"nbytes": 1024, "seconds": 2e-3}),
    ("store_barrier", {"server_backend": "libuv", "clients": 64, "rounds": 10},
     {"seconds": 2e-3}),
    ("store_ops", {"server_backend": "libuv", "clients": 64, "op": "get",
                   "latency_p50_s": 1e-4}, {"seconds": 1e-4}),
])
def test_the_family_styled_tables_name_a_users_own_measurements(family, figures, kwargs):
    """The OSU, message rate, RPC and store tables had no name column: two measurements of a
    user's own at one point printed as two identical-looking rows."""
    text = table.render_tables(_alike(family, figures, **kwargs))
    lines = text.splitlines()
    assert max(map(len, lines)) <= fit.WIDTH, text
    header = next(ln for ln in lines if not ln.startswith("#"))
    assert header.startswith("name "), text
    for name in ("mine_eager", "mine_lazy"):
        assert sum(ln.startswith(f"{name} ") for ln in lines) == 1, text
    # One measurement at a point needs no name column.
    assert "name" not in table.render_tables(_alike(family, figures, **kwargs)[:1])


def test_a_comparison_fits_the_terminal_as_the_tables_do():
    """`pytest-distbench compare` rows were 175 characters and its legend 361."""
    document = plot_data.document(plot_data.every_family())
    compared = compare_documents(document, document, threshold=0.1)
    text = report.render(compared)
    assert max(map(len, text.splitlines())) <= fit.WIDTH, text
    # Nothing lost: every benchmark's row and the whole legend, once unwrapped.
    assert all(v.name.split("[", 1)[0] in text for v in compared.verdicts)
    assert report.rule_line(compared) in unwrapped(text)
    assert report.render(compared, "markdown").count("\n|") > len(compared.verdicts)


@given(st.floats(100.0, 5000.0), st.floats(0.5, 99.4))
def test_no_interval_of_100_percent_or_more_is_printed_as_a_figure(wide, narrow):
    """A point whose 95 % interval is as wide as its value reads `unstable`, defined once above
    the tables, in its row, its -v line and its stratum's noise; a narrower one keeps its ±."""
    from pytest_distbench.results.rendering import noise, registered

    rows = []
    for pct, nbytes, group in ((wide, 1024, "collectives gloo ws2"),
                               (narrow, 2048, "collectives gloo ws2 large")):
        record = _stalling_all_reduce()
        p50 = record["summary"]["p50"]
        record.update(nbytes=nbytes, id=f"t::all_reduce[{nbytes}]", p50_ci={
            "level": 0.95, "low": max(p50 * (1 - pct / 100), 1e-9), "high": p50 * (1 + pct / 100),
            "basis": "session", "half_width_pct": pct,
            "run_noise": {"group": group, "half_width_pct": pct}})
        rows.append(record)
    text = table.render_tables(rows)
    columns, cells = read_table(text.splitlines()[1:])
    wide_cell, narrow_cell = (c[columns.index("p50 (us) ± 95% CI")] for c in cells)
    assert wide_cell.endswith("(unstable)") and "±" not in wide_cell
    assert re.fullmatch(r"[\d,.]+ ± [\d.]+ %\*?", narrow_cell), narrow_cell
    said = noise.noise_lines(rows)
    assert noise.UNSTABLE_NOTE in said
    assert "collectives gloo ws2 unstable" in said[0] and not re.search(r"± \d{3,}", said[0])
    assert "collectives gloo ws2 large ±" in said[0]
    assert "(unstable)" in registered.headline([rows[0]])
    assert noise.UNSTABLE_NOTE not in noise.noise_lines(rows[1:])


def test_a_row_named_by_its_measurement_does_not_say_its_parameter_again():
    """`bucketed` and `per_tensor`, not `bucketed[mode=bucketed]` (which a fitted table wrapped
    after its `[`); a parameter that differs from the name still shows."""
    from results_data import benchmark_record

    from pytest_distbench.results.rendering import names

    rows = []
    for mode in ("bucketed", "per_tensor"):
        r = benchmark_record(1024, [1e-3, 2e-3, 3e-3])
        r.update(name=f"test_ddp[gloo-ws2-{mode}]::{mode}", params={"mode": mode})
        rows.append(r)
    assert names.row_labels(rows, key=lambda r: None) == ["bucketed", "per_tensor"]
    rows[1]["params"] = {"mode": "per_tensor", "buckets": 2}
    rows[0]["params"] = {"mode": "bucketed", "buckets": 1}
    assert names.row_labels(rows, key=lambda r: None) == ["bucketed[buckets=1]",
                                                          "per_tensor[buckets=2]"]
