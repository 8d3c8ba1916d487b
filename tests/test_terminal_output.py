"""What a terminal shows of a real session: 120 columns, a line per suite, live lines that
leave pytest's progress line alone, and a digest at the end (issue 30, items 8-10)."""

from __future__ import annotations

import json
import re
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
from tables import read_table

from pytest_distbench import units
from pytest_distbench.results.rendering import fit

WIDTH = 120  # the terminal the default output fits (fit.WIDTH; written out for the check)
ANSI = re.compile(r"\x1b\[[0-9;]*m")
SMALL = ("--distbench", "--pyargs", "pytest_distbench.suites", "--world-size=3",
         "--tensor-size=4B,1KiB", "--distbench-store-clients=4", "--distbench-episodes=2",
         "--distbench-steps=5", "--distbench-budget=0.05")
# Two store inits, three CPU transports x 2 sizes (three GPU ones skip), one agent/observer
# point, four message-rate points (credits 1 and 10, two paths): four families, four suites.
SELECTION = ("store_init or transports or agent_observer or "
             "(test_message_rate and credits1 and 4B and not rpc and to_computation)")


def _plain(text: str) -> list[str]:
    return [ANSI.sub("", line) for line in text.splitlines()]


def test_default_output_fits_120_columns_shows_suites_and_ends_with_a_digest(
        pytester, distbench_run):
    out = "run.json"  # in the session's directory: a long path's line is printed whole
    # Live reports every 10 ms: every measurement reports, and without -v none is printed.
    result = distbench_run(*SMALL, "-k", SELECTION, "--color=yes", f"--distbench-json={out}",
                           "--distbench-report-every=0.01s")
    result.assert_outcomes(passed=13, skipped=6)
    lines = _plain(result.stdout.str())
    # pytest's own header names the session's folder, however long the test runner made it.
    too_wide = [line for line in lines if len(line) > WIDTH and not line.startswith("rootdir: ")]
    assert not too_wide, "\n".join(too_wide)
    # Checks that found nothing, and the seed's block, only under -v.
    assert not any("rpc check" in line for line in lines)
    assert "Benchmark" not in lines and not any(ln.startswith("agent latency --") for ln in lines)
    # A transport that ran at no size: one line with its reason, not a row of "skipped".
    assert "# nccl: skipped, nccl is not built into this torch" in lines
    assert not any("skipped  " in line for line in lines)
    # A line per suite, and pytest's progress lines whole: no live line breaks them.
    suites = [line for line in lines if line.startswith("distbench: suite ")]
    assert suites == [
        "distbench: suite 1/4, test_agent_observer.py: 1 test, 1-1 of 19",
        "distbench: suite 2/4, test_message_rate.py: 4 tests, 2-5 of 19",
        "distbench: suite 3/4, test_rpc.py: 12 tests, 6-17 of 19",
        "distbench: suite 4/4, test_store.py: 2 tests, 18-19 of 19"]
    for suite in suites:
        name = suite.split(", ")[1].split(":")[0]
        progress = lines[lines.index(suite) + 1]
        assert re.fullmatch(rf"{re.escape(name)} [.s]+ +\[ *\d+%\]", progress), progress
    assert not any("live" in line for line in lines)
    document = json.loads((pytester.path / out).read_text())
    assert all(b["distbench"].get("live_reports") for b in document["benchmarks"]
               if b["distbench"]["family"] == "message_rate")  # reported, not printed
    # The digest ends the output: a line per family at its headline point, where the full
    # tables are, the machine's noise.
    start = lines.index(next(ln for ln in lines if "distbench digest" in ln))
    digest = [line for line in lines[start + 1:-1] if line]
    heads = [line for line in digest if not line.startswith(" ")]
    assert [line.split()[0] for line in heads[:4]] == [
        "agent_observer", "message_rate", "rpc_transports", "store_init"]
    # Rows sharing the largest point are told apart (path, credits; transport).
    assert re.match(r"message_rate +ws3 +4 B +fastest credits=\d+,path=\w+: [\d,.]+ "
                    r"msgs/s (± [\d.]+ %|\(unstable\)), [\d.]+ [KMG]B/s", heads[1]), digest
    # A latency at its smallest size, a rate at its largest.
    assert re.match(r"rpc_transports +ws2 +4 B +fastest transport=[a-z-]+: round trip ",
                    heads[2]), digest
    assert f"every sample in {out}" in " ".join(line.strip() for line in digest)
    assert any(line.startswith("machine: 3 ranks in the largest world on ") for line in digest)


def test_verbose_shows_live_lines_whose_closing_totals_are_the_tables(pytester, distbench_run):
    out = pytester.path / "run.json"
    result = distbench_run(*SMALL, "-v", "-k", "agent_observer or (test_message_rate and "
                           "credits1- and 4B and not rpc and client_to_computation)",
                           "--distbench-duration=1s", "--distbench-report-every=0.4s",
                           f"--distbench-json={out}")
    result.assert_outcomes(passed=2)
    lines = _plain(result.stdout.str())
    assert sum(line.startswith("  live: Time: ") for line in lines) >= 2
    [done] = [line for line in lines if line.startswith("  live: done: ")]
    messages, seconds, rate = re.match(
        r"  live: done: (\d+) msgs in ([\d.]+) s = ([\d,.]+) msgs/s", done).groups()
    [record] = [b["distbench"] for b in json.loads(out.read_text())["benchmarks"]
                if b["distbench"]["family"] == "message_rate"]
    f = record["figures"]
    assert int(messages) == f["total_messages"]
    # The table's own cells: the same figures, as printed.
    table_start = next(i for i, line in enumerate(lines) if line == "# transport: process_group")
    headers, [row] = read_table(lines[table_start + 1:])
    assert row[headers.index("msgs")] == messages
    assert row[headers.index("time (s)")] == seconds
    assert row[headers.index("msgs/s ± 95% CI")].split()[0] == rate
    # The agent/observer seed's own block and the checks that found nothing show under -v.
    assert "Benchmark" in lines and any(ln.startswith("agent latency -- {50: ") for ln in lines)
    assert any(line.startswith("distbench rpc check rdma_fork: ok") for line in lines)
    # pytest names the test again before its result, after the live lines.
    result.stdout.fnmatch_lines(["  live: done: *", "*test_message_rate[[]*[]] PASSED*"])


words = st.text(alphabet="abcdefghij(),.±%", min_size=1, max_size=9)
phrases = st.lists(words, min_size=1, max_size=4).map(" ".join)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=9).flatmap(lambda n: st.tuples(
    st.lists(phrases, min_size=n, max_size=n),
    st.lists(st.lists(phrases, min_size=n, max_size=n), max_size=4),
    st.lists(st.sampled_from(["right", "left"]), min_size=n, max_size=n))),
    st.integers(min_value=20, max_value=120))
def test_a_table_fits_unless_its_words_cannot_and_loses_no_word(shape, width):
    headers, rows, align = shape
    text = fit.table(rows, headers, colalign=align, width=width)
    # Every word is still there (a column's lines may interleave with the others').
    printed = Counter(text.split())
    wanted = Counter(w for phrase in headers + [c for row in rows for c in row]
                     for w in phrase.split())
    assert not wanted - printed
    # Wider than asked only where the words allow no narrower: a header's longest word, a
    # right-aligned cell broken only before a parenthesis.
    floor = 2 * (len(headers) - 1)
    for i, header in enumerate(headers):
        cells = [row[i] for row in rows]
        pieces = [p for c in cells for p in (
            re.split(r" +(?=\()", c) if align[i] == "right" else c.split())]
        floor += max([max(len(w) for w in header.split())] + [len(p) for p in pieces])
    assert fit.widest(text) <= max(width, floor), text


def test_quiet_says_no_suite_and_still_ends_with_the_digest(pytester, distbench_run):
    result = distbench_run("-q", "--distbench", "--pyargs", "pytest_distbench.suites",
                           "--world-size=2", "-k", "test_all_reduce", "--tensor-size=4B",
                           "--distbench-budget=0.05")
    result.assert_outcomes(passed=1)
    lines = _plain(result.stdout.str())
    assert not any(line.startswith("distbench: suite ") for line in lines)
    digest = lines[lines.index(next(ln for ln in lines if "distbench digest" in ln)) + 1:]
    assert re.match(r"all_reduce +ws2 +4 B +p50 ", digest[0]), digest


def test_transports_with_many_sizes_turn_to_fit_and_say_each_skipped_one_once():
    """The main job's transports table had a column per size (13) and a row of `skipped` per
    transport that never ran: 279 columns."""
    from results_data import benchmark_record

    from pytest_distbench.families.rpc.tables import render_transports

    sizes = [4 << (2 * k) for k in range(13)]  # 4 B .. 64 MiB
    records = []
    for transport in ("tensorpipe-shm", "tensorpipe-uv", "gloo"):
        for n in sizes:
            r = benchmark_record(n, [1e-4 * (1 + k / 10) for k in range(20)])
            records.append(dict(r, family="rpc_transports", figures={"transport": transport}))
    text = render_transports(records)
    assert fit.widest(text) <= WIDTH, text
    lines = text.splitlines()
    assert lines[0].split() == ["size", "tensorpipe-shm", "tensorpipe-uv", "gloo"]
    assert len([ln for ln in lines if re.match(r" *\d+ [KMG]?i?B ", ln)]) == len(sizes)
    assert "rows = sizes, columns = transports" in text
    skipped = [ln for ln in lines if "skipped" in ln]
    assert [ln.split(":")[0] for ln in skipped] == [
        "# nccl", "# tensorpipe-cuda_ipc", "# tensorpipe-cuda_basic"]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["all_reduce", "all_gather", "broadcast"]),
                          st.integers(min_value=1, max_value=2**40),
                          st.integers(min_value=1, max_value=80)), min_size=1, max_size=8))
def test_the_digest_has_one_line_per_bandwidth_family_at_its_largest_point(points):
    from results_data import benchmark_record

    from pytest_distbench.results.rendering.digest import family_lines

    records = [dict(benchmark_record(n, [1e-4, 2e-4, 3e-4]), family=f, world_size=ws,
                    name=f"test_{f}[gloo-ws{ws}-{n}B]") for f, n, ws in points]
    lines = family_lines(records)
    assert all(len(line) <= WIDTH for line in lines), lines
    heads = [line for line in lines if not line.startswith(" ")]
    assert [h.split()[0] for h in heads] == list(dict.fromkeys(f for f, _, _ in points))
    for head in heads:
        family, world, size = re.match(r"(\S+) +ws(\d+) +(\d+(?:\.\d+)? [KMGT]?i?B) ",
                                       head).groups()
        ws = max(w for f, _, w in points if f == family)
        largest = max(n for f, n, w in points if f == family and w == ws)
        assert int(world) == ws
        # The largest size at that world, exactly: a rounded label only where it is exact.
        assert size == f"{largest} B" or units.parse_size(size.replace(" ", "")) == largest


def test_the_digest_shows_a_latency_at_its_smallest_size_and_sizes_as_the_tables_do():
    """`rpc_latency ws2 64 MiB round trip 113,335 us`: a latency's headline is its smallest
    size; an odd size reads as the tables print it (the digest said 786440 B, a table 768 KiB)."""
    import plot_data

    from pytest_distbench.results.comparison.verdict import compare_documents
    from pytest_distbench.results.rendering import report, table
    from pytest_distbench.results.rendering.digest import family_lines

    sizes = (8, 1024, 786440, 64 << 20)
    made = [plot_data.record(family, nbytes=n, seconds=1e-5 + n / 1e9, busbw_factor=1.0,
                             figures=dict(figures))
            for family, figures in (("p2p_latency", {"messages_per_iteration": 2}),
                                    ("rpc_latency", {}), ("all_reduce", {}),
                                    ("p2p_bandwidth", {"messages_per_iteration": 64}))
            for n in sizes]
    lines = {line.split()[0]: line for line in family_lines(made) if not line.startswith(" ")}
    for family in ("p2p_latency", "rpc_latency"):
        assert re.match(rf"{family} +ws2 +8 B ", lines[family]), lines
    for family in ("all_reduce", "p2p_bandwidth"):
        assert re.match(rf"{family} +ws2 +64 MiB ", lines[family]), lines
    odd = [r for r in made if r["nbytes"] == 786440]
    shown = units.size_cell(786440)
    assert family_lines(odd)[0].split()[2:4] == shown.split()
    assert re.search(rf"^ *{shown} ", table.render_tables(odd[2:3]), re.M)
    document = plot_data.document(odd)
    compared = report.render(compare_documents(document, document, threshold=0.1))
    assert f" {shown} " in compared and "768 KiB" not in compared
    # The replay's own table (its bytes/rank and its breakdown's bytes) printed 768 KiB where
    # the digest printed 786440 B, for the same replayed step.
    replay = plot_data.record("replay", nbytes=786440, seconds=0.02, busbw_factor=1.0,
                              figures={"trace": "t", "trace_ranks": 4, "steps": 2, "calls": 40,
                                       "breakdown": [{"op": "all_reduce", "group_size": 2,
                                                      "bucket": 16, "calls": 8,
                                                      "bytes": 786440, "seconds": 0.01}]})
    rendered = table.render_tables([replay])
    assert family_lines([replay])[0].split()[2:4] == shown.split()
    assert len(re.findall(rf" {shown} ", rendered)) == 2 and "768 KiB" not in rendered
    # A plot's series named by that size says the same (two sizes that round alike would
    # otherwise share a legend).
    from pytest_distbench.results.rendering.plot_spec import series_label

    assert series_label(["nbytes"], replay) == shown


@given(st.lists(st.floats(0.5, 5000), min_size=1, max_size=12), st.integers(40, 120))
def test_a_wrapped_line_never_parts_a_figure_from_its_unit_or_its_interval(pcts, width):
    """The noise line broke between `± 168` and `%`."""
    groups = ", ".join(f"group{i} ws2 1,003 us ± {p:.0f} %" for i, p in enumerate(pcts))
    line = f"run-to-run noise here (95 %, measured in this session): {groups}; 64 MiB at 8 MB/s"
    lines = fit.wrap(line, width)
    assert " ".join(part.strip() for part in lines) == line
    pieces = re.findall(r"[\d,]+ us ± \d+ %|\d+ MiB|\d+ MB/s|95 %", line)
    assert len(pieces) == len(pcts) + 3
    for piece in pieces:
        assert any(piece in part for part in lines), (piece, lines)


def test_the_widest_nccl_tests_table_of_the_main_job_fits():
    """The main job's all_reduce at 8 ranks up to 64 MiB on a loaded machine: a 7-letter size,
    an 8-digit count, a 7-digit p50 and p95 with a starred interval, bandwidths in KB/s (the
    mean's header breaks after its comma: one word "nccl-tests/PARAM" held it at 121)."""
    import plot_data

    from pytest_distbench.results.rendering import table

    made = []
    for power, seconds in ((2, 0.0045), (4, 0.0116), (18, 0.023), (24, 0.268), (26, 1.2)):
        record = plot_data.record("all_reduce", nbytes=1 << power, seconds=seconds,
                                  world_size=8, n=6, busbw_factor=1.75)
        record["precision"] = {"met": False}  # the starred interval: budget ran out
        made.append(record)
    text = table.render_tables(made)
    assert "64 MiB" in text and max(map(len, text.splitlines())) <= WIDTH, text


def test_the_digest_carries_the_caveats_its_tables_note():
    """A store backend comparison that name-resolution stalls decide, and RPC rows that ran
    fewer credits than they asked for, say so on their digest line too (the table's notes
    would otherwise be lost: libuv read 136x slower than legacy with no word of the stalls)."""
    from results_data import benchmark_record

    from pytest_distbench.results.rendering.digest import family_lines

    def row(family, nbytes, figures, **params):
        r = benchmark_record(nbytes or 1, [1e-3, 2e-3, 3e-3])
        return dict(r, family=family, nbytes=nbytes, figures=figures, params=params,
                    name=f"test_{family}[gloo-ws2-{'-'.join(map(str, params.values()))}]")

    stalled = [row("store_init", None, {"slow_connects": 3, "clients": 64,
                                        "server_backend": backend}, store_backend=backend)
               for backend in ("libuv", "legacy")]
    capped = [row("rpc_throughput", 1 << 16, {"credits": 4, "credits_requested": 10,
                                              "msgs_per_s": 900.0}, credits=10)]
    said = " ".join(" ".join(family_lines(stalled + capped)).split())
    assert "CONFOUNDED: connects stalled over" in said
    assert "on name resolution (legacy 3, libuv 3)" in said
    assert "credits=10 ran 4 in flight (the byte cap)" in said
    quiet = [dict(r, figures={**r["figures"], "slow_connects": 0}) for r in stalled]
    assert "CONFOUNDED" not in " ".join(family_lines(quiet))


def test_a_digest_line_of_many_rows_spans_the_fastest_and_the_slowest():
    """rpc_transports at 40 MB: five transports from 1.3 ms to 70 ms; the digest named the two
    it met first (gloo 25 ms, cuda_basic 17 ms) and hid the fastest."""
    from results_data import benchmark_record

    from pytest_distbench.results.rendering.digest import family_lines

    rows = []
    for transport, seconds in (("gloo", 0.0254), ("tensorpipe-cuda_basic", 0.0174),
                               ("tensorpipe-shm", 0.0695), ("tensorpipe-cuda_ipc", 0.00132),
                               ("tensorpipe-uv", 0.0563)):
        r = benchmark_record(40_000_000, [seconds] * 7)
        rows.append(dict(r, family="all_reduce", params={"transport": transport},
                         name=f"test_transports[gloo-ws2-40000000B-{transport}]"))
    said = " ".join(" ".join(family_lines(rows)).split())
    assert "fastest transport=tensorpipe-cuda_ipc:" in said, said
    assert "slowest transport=tensorpipe-shm:" in said and "... 3 more" in said, said


def test_a_digest_line_of_rates_calls_the_highest_rate_the_fastest():
    """The main job printed 'fastest credits=1: 529 msgs/s; slowest credits=10: 1,646 msgs/s':
    ordered by the p50 time of an iteration, which carries more messages at more credits."""
    from results_data import benchmark_record

    from pytest_distbench.results.rendering.digest import family_lines

    rows = []
    for credits, seconds, rate in ((1, 0.0019, 529.0), (4, 0.0031, 1290.0),
                                   (10, 0.0061, 1646.0), (2, 0.0024, 833.0)):
        r = benchmark_record(1 << 20, [seconds] * 7)
        rows.append(dict(r, family="message_rate", params={"credits": credits},
                         name=f"test_rate[gloo-ws2-1MiB-{credits}]", headline_statistic="mean",
                         figures={"msgs_per_s": rate, "rate_ci_pct": 5.0}))
    said = " ".join(" ".join(family_lines(rows)).split())
    assert "fastest credits=10: 1,646 msgs/s" in said, said
    assert "slowest credits=1: 529 msgs/s" in said and "... 2 more" in said, said
