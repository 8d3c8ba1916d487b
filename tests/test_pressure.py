"""Pressure during the timed region and per-rank peak RSS, with real ranks."""

from __future__ import annotations

import json
import re
import textwrap

import pytest

MIB = 2**20


def _records(path) -> dict[str, dict]:
    doc = json.loads(path.read_text())
    return {b["distbench"]["name"].split("[")[0]: b["distbench"] for b in doc["benchmarks"]}


def test_pressure_is_real_and_gone_before_the_next_test(pytester, distbench_run, leak_tag):
    out = pytester.path / "out.json"
    after = pytester.path / "after.txt"
    pytester.makepyfile(
        textwrap.dedent(f"""
        import threading, pytest, torch, torch.distributed as dist

        def step():
            x = torch.ones(4)
            return lambda: dist.all_reduce(x)

        @pytest.mark.distbench(touch="192MiB", touch_once=True, cpu_threads=1, log_lines=40,
                               log_threads=4, print_env=True)
        def test_touched_once(distbench):
            distbench.measure(step(), nbytes=16, pressure_ranks=[1])

        @pytest.mark.distbench(touch="128MiB", cpu_threads=2, duration="1s")
        def test_touched_continuously(distbench):
            distbench.measure(step(), nbytes=16, pressure_ranks=[1])

        @pytest.mark.distbench
        def test_after(distbench):
            names = [t.name for t in threading.enumerate() if t.name.startswith(
                ("distbench-busy", "distbench-touch", "distbench-log", "distbench-reporter"))]
            rss = [line for line in open("/proc/self/status") if line.startswith("VmRSS")]
            if distbench.rank == 1:
                with open({str(after)!r}, "w") as f:
                    f.write(f"{{int(rss[0].split()[1]) * 1024}} {{','.join(names)}}")
            distbench.measure(step(), nbytes=16)
        """)
    )
    result = distbench_run("--distbench", "--world-size=2", "--distbench-iterations=50",
                           f"--distbench-json={out}", "-rA")
    result.assert_outcomes(passed=3)
    records = _records(out)
    once, continuously = records["test_touched_once"], records["test_touched_continuously"]
    for record, touched in ((once, 192 * MIB), (continuously, 128 * MIB)):
        rank0, rank1 = record["peak_rss_bytes"]
        assert rank1 - rank0 >= 0.9 * touched, record["peak_rss_bytes"]
        assert record["pressure"]["ranks"] == [1]
    assert once["pressure"]["cpu_threads"] == 1 and once["pressure"]["touch_once"] is True
    assert once["pressure"]["log_lines_written"] == 40
    assert once["pressure"]["env"]["1"]["DISTBENCH_TEST_TAG"] == leak_tag
    assert continuously["pressure"]["cpu_threads"] == 2 and continuously["duration_s"] == 1.0
    assert records["test_after"]["pressure"] is None
    # The table shows the memory column for the pressured tests, in MiB, rank 0 first.
    text = result.stdout.str()
    assert "peak RSS/rank (MiB)" in text
    cell = "/".join(f"{p / MIB:.0f}" for p in once["peak_rss_bytes"])
    assert re.search(rf"\s{re.escape(cell)}\s*$", text, re.MULTILINE), cell
    result.stdout.fnmatch_lines([
        "*Captured environment of the pressured ranks call*",
        "--- test_touched_once[[]gloo-ws2[]]: environment of rank 1 ---",
    ])
    assert f"DISTBENCH_TEST_TAG={leak_tag}" in text
    # The next test in the same world: no pressure thread left, the memory given back.
    rss_after, threads = after.read_text().partition(" ")[::2]
    assert threads == ""
    assert int(rss_after) < once["peak_rss_bytes"][1] - 150 * MIB


def test_memory_that_cannot_be_had_is_a_clear_error_and_the_session_goes_on(
    pytester, distbench_run
):
    available = 0
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            available = int(line.split()[1]) * 1024
    # Each of two ranks could touch this, both together cannot: the ranks must agree to stop.
    each = int(available * 0.6) // MIB
    pytester.makepyfile(
        textwrap.dedent(f"""
        import pytest, torch, torch.distributed as dist

        def step():
            x = torch.ones(4)
            return lambda: dist.all_reduce(x)

        @pytest.mark.distbench(allocate="1024TiB")
        def test_impossible(distbench):
            distbench.measure(step(), nbytes=16)

        @pytest.mark.distbench(touch="{each}MiB")
        def test_too_much_together(distbench):
            distbench.measure(step(), nbytes=16)

        @pytest.mark.distbench
        def test_after(distbench):
            distbench.measure(step(), nbytes=16)
        """)
    )
    result = distbench_run("--distbench", "--world-size=2", "--distbench-iterations=20")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines([
        "*--distbench-allocate=1024TiB: cannot allocate 1024 TiB in a rank: this host has *",
    ])
    result.stdout.fnmatch_lines([
        "*rank 0 raised:*",
        "*PressureError: --distbench-touch=*: 2 pressured rank(s) x *to touch, but only * is "
        "available*",
    ])
    assert "live report" not in result.stdout.str()  # no duration, no report option: no lines
    # The impossible size never reached a rank: one world, rebuilt once after the ranks' error.
    starts = re.search(r"worlds started: (.*)", result.stdout.str()).group(1)
    assert "gloo ws2 cpu x2 (" in starts, starts


@pytest.mark.extended
def test_failures_under_pressure_keep_the_foundations_guarantees(pytester, distbench_run):
    pytester.makepyfile(
        textwrap.dedent("""
        import time, pytest, torch, torch.distributed as dist

        def hang_forever():
            while True:
                time.sleep(1)

        def mid_run(rank, action, after=30):
            x, calls = torch.ones(4), [0]
            def step():
                calls[0] += 1
                if calls[0] > after:
                    action()
                dist.all_reduce(x)
            return step

        @pytest.mark.distbench
        def test_raises_mid_run(distbench):
            def boom():
                if distbench.rank == 1:
                    raise ValueError("boom mid-run under pressure")
            distbench.measure(mid_run(distbench.rank, boom), nbytes=16)

        @pytest.mark.distbench(timeout="6s")
        def test_hangs_mid_run(distbench):
            def stall():
                if distbench.rank == 0:
                    hang_forever()
            distbench.measure(mid_run(distbench.rank, stall), nbytes=16)

        @pytest.mark.distbench
        def test_bad_pressure_ranks(distbench):
            distbench.measure(lambda: None, pressure_ranks=[0, 5])

        @pytest.mark.distbench
        def test_after(distbench):
            x = torch.ones(4)
            distbench.measure(lambda: dist.all_reduce(x), nbytes=16)
        """)
    )
    result = distbench_run("--distbench", "--world-size=2", "--distbench-iterations=400",
                           "--distbench-cpu-threads=2", "--distbench-touch=64MiB",
                           "--distbench-touch-once", "--distbench-log-lines=200",
                           "--distbench-timeout=120")
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines([
        "*rank 1 raised:*",
        "*[[]rank 1[]] ValueError: boom mid-run under pressure*",
    ])
    result.stdout.fnmatch_lines([
        "*timed out after 6 s (--distbench-timeout): ranks [[]0, 1[]] did not finish*",
        "*--- rank 0 ---*",
        "*[[]rank 0[]] *in hang_forever*",
    ])
    result.stdout.fnmatch_lines([
        "*ValueError: distbench.measure: pressure_ranks [[]5[]] are not ranks of a world of 2*",
    ])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--distbench-allocate=1GiB", "--distbench-touch=2GiB"],
         "--distbench-touch (2 GiB) is larger than --distbench-allocate (1 GiB)*"),
        (["--distbench-touch-once"], "--distbench-touch-once needs --distbench-touch*"),
        (["--distbench-allocate=lots"], "--distbench-allocate: invalid size 'lots'*"),
        (["--distbench-cpu-threads=-1"], "--distbench-cpu-threads: invalid count '-1'*"),
        # A switch takes no value on the command line (tests/test_settings_table.py): its
        # ini key (or -o) does.
        (["-o", "distbench_print_env=maybe"],
         "ini option distbench_print_env: invalid switch 'maybe'*"),
    ],
)
def test_bad_pressure_options_are_usage_errors(pytester, options, message):
    pytester.makepyfile("import pytest\n@pytest.mark.distbench\ndef test_x(distbench):\n"
                        "    pass\n")
    result = pytester.runpytest_subprocess("--distbench", *options)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
