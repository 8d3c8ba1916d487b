"""Captured traces replayed as tests: real sessions with real ranks, and the pure parts."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from replay_traces import (
    edit_json,
    four_rank_trace,
    huge_trace,
    param_trace,
    three_rank_trace,
    two_rank_trace,
    written,
)

from pytest_distbench.families.replay import options, trace
from pytest_distbench.families.replay.breakdown import Timed, aggregate, bucket
from pytest_distbench.families.replay.family import render_replay, size_bucket
from pytest_distbench.families.replay.step import SHIPPED, waits_at
from pytest_distbench.results.rendering import ci, fit
from pytest_distbench.suites.traces import make_shipped
from pytest_distbench.suites.traces.make_shipped import NAME, shipped_trace

ROOT = Path(__file__).resolve().parent.parent

SUITE = ("--distbench", "--pyargs", "pytest_distbench.suites", "-k", "replay")
SMALL = ("--distbench-warmup=1", "--distbench-timeout=120s")


def _records(path):
    return [b["distbench"] for b in json.loads(path.read_text())["benchmarks"]]


def _user_test(*tests: tuple[str, object]) -> str:
    """A user's own test file replaying each (name, trace directory) with the public helper."""
    head = "import pytest\nfrom pytest_distbench.families.replay.step import replay\n"
    return head + "".join(f"""
@pytest.mark.distbench
def test_{name}(distbench):
    replay(distbench, {str(path)!r})
""" for name, path in tests)


# -- real sessions --------------------------------------------------------------------------

def test_a_three_rank_trace_replays_checked_with_its_breakdown_and_a_larger_trace_skips(
        pytester, distbench_run):
    three = written(three_rank_trace(), pytester.path / "traces" / "three")
    # The trace's groups are gone after each replay: the persistent world gathers none.
    pytester.makepyfile(test_groups=f"""
        import pytest
        from torch.distributed import distributed_c10d
        from pytest_distbench.families.replay.step import replay

        @pytest.mark.distbench
        def test_replay_leaves_no_group(distbench):
            before = len(distributed_c10d._world.pg_map)
            replay(distbench, {str(three)!r}, name="first")
            replay(distbench, {str(three)!r}, name="second")
            assert len(distributed_c10d._world.pg_map) == before
        """)
    written(four_rank_trace(), pytester.path / "traces" / "four")
    out = pytester.path / "out.json"
    result = distbench_run(*SUITE, "test_groups.py", "--world-size=3",
                           f"--distbench-replay={pytester.path}/traces", "--distbench-iterations=5",
                           *SMALL, f"--distbench-json={out}", "-rs")
    # The 4-rank trace is skipped with both sizes; the 3-rank one passes.
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED*trace four needs 4 ranks; this world has 3*"])
    result.stdout.fnmatch_lines(["worlds started: gloo ws3 cpu *"])  # one world for all
    records = _records(out)
    assert sorted(r["name"] for r in records if r["id"].startswith("test_groups.py")) == [
        "test_replay_leaves_no_group[gloo-ws3]::first",
        "test_replay_leaves_no_group[gloo-ws3]::second"]
    [record] = [r for r in records if "test_replay.py" in r["id"]]
    assert record["family"] == "replay" and record["wrong"] == 0
    assert record["iterations"] == 5
    f = record["figures"]
    assert (f["trace"], f["trace_ranks"], f["steps"], f["calls"]) == ("three", 3, 2, 32)
    # The busiest rank's (rank 0: in the subgroup, and the sender).
    assert record["nbytes"] == f["bytes"] == 2 * (4096 + 3072 + 16384 + 1024 + 512)
    assert f["skipped"] == ["rank 1 call 9: c10d.foo"] and f["unchecked"] == ["barrier"]
    rows = {(b["op"], b["group_size"], b["bucket"]): (b["calls"], b["bytes"])
            for b in f["breakdown"]}
    assert rows == {
        ("all_gather_into_tensor", 3, 1024): (6, 6 * 3072),
        ("all_reduce", 2, 16384): (4, 4 * 16384),
        ("all_reduce", 3, 4096): (6, 6 * 4096),
        ("barrier", 3, 0): (6, 0),
        ("broadcast", 3, 1024): (6, 6 * 1024),
        ("recv", 3, 256): (2, 2 * 512),
        ("send", 3, 256): (2, 2 * 512),
    }
    assert math.isclose(sum(b["share"] for b in f["breakdown"]), 1.0)
    assert all(b["seconds"] > 0 for b in f["breakdown"])
    text = result.stdout.str()
    assert "# replay  backend=gloo  ranks=3" in text
    result.stdout.fnmatch_lines([
        "trace*ranks used*steps*calls*bytes/rank*p50 (ms)*#wrong",
        "*three*3*2*32*49 KiB*",
        # The original's columns: "-" where the trace has no times; the headers wrap to fit.
        "op*group*size*calls*bytes*us/call*original*ratio*time %*algbw*busbw (GB/s)",
        "*us/call*(GB/s)",
        "*",
        "all_gather_into_tensor*3*1 KiB-4 KiB*6*18 KiB* - * - *",
        "# gaps between the calls: none: the trace has no issue times*",
        "*not replayed (ops the capture could not record): rank 1 call 9: c10d.foo",
        "# results not checked: barrier"])
    assert fit.widest(text.split("# replay", 1)[1].split("worlds started")[0]) <= fit.WIDTH


def test_traces_of_fewer_ranks_replay_in_a_larger_world(pytester, distbench_run):
    """Budget mode; the 3-rank trace and the shipped 4-rank one in a 4-rank world (rank 3 idle
    in the first)."""
    written(three_rank_trace(steps=1), pytester.path / "three")
    out = pytester.path / "out.json"
    result = distbench_run(*SUITE, "--world-size=4",
                           f"--distbench-replay={pytester.path}/three,{SHIPPED / NAME}",
                           "--distbench-budget=0.2s", *SMALL, f"--distbench-json={out}")
    result.assert_outcomes(passed=2)
    records = {r["figures"]["trace"]: r for r in _records(out)}
    assert set(records) == {"three", NAME}
    assert all(r["wrong"] == 0 and r["world_size"] == 4 for r in records.values())
    assert records["three"]["figures"]["trace_ranks"] == 3
    # Rank 3 only keeps in step with the 3-rank trace: its times are not the replay's.
    assert records["three"]["timed_ranks"] == [0, 1, 2]
    assert records[NAME].get("timed_ranks") is None


def test_the_helper_in_a_user_test_duration_mode_and_a_damaged_trace_fails_alone(
        pytester, distbench_run):
    good = written(three_rank_trace(steps=1), pytester.path / "good")
    bad = written(three_rank_trace(steps=1), pytester.path / "bad")
    edit_json(bad / "rank1.json", lambda d: d["calls"][0].update(op="all_reduce_ish"))
    huge = written(huge_trace(), pytester.path / "huge")
    pytester.makepyfile(test_mine=_user_test(("damaged", bad), ("huge", huge), ("good", good)))
    out = pytester.path / "out.json"
    result = distbench_run("--distbench", "--world-size=3", "--distbench-duration=0.3s",
                           *SMALL, f"--distbench-json={out}")
    result.assert_outcomes(passed=1, failed=2)
    # Refused in every rank before any allocates, the world fit for the next test.
    result.stdout.fnmatch_lines(["rank 0: Failed: trace huge: its buffers need up to 4 TiB per "
                                 "rank, 8 TiB for its 2 rank(s) on this host, and * of memory "
                                 "is available"])
    # The failure's first line names the file and the field (the ranks' frames follow, as
    # for any failure in a rank).
    result.stdout.fnmatch_lines(["*_ test_damaged[[]gloo-ws3[]] _*",
                                 f"rank 0: Failed: {bad}/rank1.json: calls[[]0[]]: field 'op': "
                                 "expected one of *, got a string"])
    [record] = _records(out)
    assert record["figures"]["trace"] == "three" and record["wrong"] == 0
    # Every rank ran for the duration, within the sanity rule's 10 %: the stop is predicted at
    # the fastest pace seen, and a chunk faster still ends just short (0.298 s seen).
    assert min(record["elapsed_s"]) >= 0.3 * 0.9


def _bad_field(d):
    trace.write(three_rank_trace(), d)
    edit_json(d / "rank2.json", lambda data: data["calls"][3].update(root="two"))
    return "rank2.json: calls[3]: field 'root': expected a global rank of group 0, got a string"


def _missing_rank_file(d):
    trace.write(three_rank_trace(), d)
    (d / "rank1.json").unlink()
    return "rank1.json: no such file (is the directory a trace?)"


def _group_outside(d):
    trace.write(four_rank_trace(), d)
    edit_json(d / trace.MANIFEST, lambda data: data["groups"].append({"id": 1, "ranks": [0, 7]}))
    return "manifest.json: field 'groups[1].ranks': rank 7 is outside the 4-rank world"


def _fifo_rank_file(d):
    # Hung the session in pytest_configure (issue 39).
    trace.write(three_rank_trace(), d)
    (d / "rank1.json").unlink()
    os.mkfifo(d / "rank1.json")
    return "rank1.json: is a FIFO, not a trace file"


def _list_as_op(d):
    # INTERNALERROR> TypeError: unhashable type: 'list' (issue 39).
    trace.write(three_rank_trace(), d)
    edit_json(d / "rank0.json", lambda data: data["calls"][0].update(op=["all_reduce"]))
    return "rank0.json: calls[0]: field 'op': expected one of " + ", ".join(trace.OPS) + \
        ", got a list"


@pytest.mark.parametrize("damage", [_bad_field, _missing_rank_file, _group_outside,
                                    _fifo_rank_file, _list_as_op])
def test_a_damaged_trace_is_a_usage_error_naming_file_and_field(pytester, distbench_run,
                                                                damage):
    problem = damage(pytester.path / "t")
    result = distbench_run(*SUITE, "--world-size=3", "--distbench-replay=t")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    [line] = [line for line in result.stderr.lines if line.strip()]
    assert line == f"ERROR: --distbench-replay: t/{problem}"  # the path as the user gave it
    assert "passed" not in result.stdout.str()  # nothing ran


def test_a_replay_option_naming_no_trace_is_a_usage_error(pytester, distbench_run):
    (pytester.path / "empty").mkdir()
    result = distbench_run(*SUITE, "--distbench-replay=empty,nowhere")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --distbench-replay: empty: neither a trace "
                                 "(manifest.json, or PARAM's <rank>.json files) nor a "
                                 "directory of traces"])


def test_a_param_basic_trace_replays_in_a_larger_world(pytester, distbench_run):
    # PARAM's per-rank lists (2 ranks), in a 3-rank world: rank 2 idles.
    param = param_trace(pytester.path)
    out = pytester.path / "out.json"
    # The option alone collects the replay suite, which then runs the given traces only.
    result = distbench_run("--distbench", "--world-size=3", f"--distbench-replay={param}",
                           "--distbench-iterations=5", *SMALL, f"--distbench-json={out}")
    result.assert_outcomes(passed=1)
    [record] = [r for r in _records(out) if r["figures"].get("trace") == "param"]
    f = record["figures"]
    assert record["wrong"] == 0 and f["source"] == "PARAM basic trace"
    assert f["trace_ranks"] == 2 and f["calls"] == 10
    assert {b["op"] for b in f["breakdown"]} == {"all_reduce", "all_gather_into_tensor",
                                                 "send", "recv", "barrier"}
    assert any("compute 'gemm'" in s for s in f["skipped"])


def test_the_replay_option_alone_collects_the_replay_test_alone_wherever_pytest_runs(
        pytester, monkeypatch):
    """In the checkout's root, pyproject's testpaths added every suite to it (271 items, the
    whole main job), and out of the tree the node id had no file part (`::test_replay[...]`)."""
    trace_dir = written(two_rank_trace(), pytester.path / "trace")
    mine = "import pytest\n\n@pytest.mark.distbench\ndef test_mine(distbench):\n    pass\n"
    args = ("--distbench", "--world-size=2", f"--distbench-replay={trace_dir}", "--co", "-q",
            "-p", "no:cacheprovider")
    elsewhere = pytester.mkdir("elsewhere")
    (elsewhere / "test_mine.py").write_text(mine)  # the current folder's tests are not asked for
    # The checkout's root: pyproject's testpaths (tests, the suites) and its conftest.py.
    for where, prefix in ((elsewhere, ""), (ROOT, "pytest_distbench/suites/replay/")):
        monkeypatch.chdir(where)
        result = pytester.runpytest_subprocess(*args)
        assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()
        collected = [line for line in result.stdout.lines if "::" in line]
        assert collected == [f"{prefix}test_replay.py::test_replay[gloo-ws2-trace]"], where


# -- the pure parts -------------------------------------------------------------------------

def test_the_shipped_trace_is_what_its_script_writes():
    assert trace.load(SHIPPED / NAME) == shipped_trace()


def test_the_shipped_trace_script_writes_it_again(tmp_path, capsys):
    assert make_shipped.main([str(tmp_path / "again")]) == 0
    assert trace.load(tmp_path / "again") == trace.load(SHIPPED / NAME)
    assert capsys.readouterr().out.strip() == str(tmp_path / "again")


def test_a_directory_of_traces_stands_for_each(tmp_path):
    written(four_rank_trace("b"), tmp_path / "all" / "b")
    written(three_rank_trace("a"), tmp_path / "all" / "a")
    (tmp_path / "all" / "notes").mkdir()
    one = written(four_rank_trace(), tmp_path / "one")
    found = options.trace_directories(f"{tmp_path}/all,{one},{one}")
    assert found == [str(tmp_path / "all" / "a"), str(tmp_path / "all" / "b"), str(one)]
    with pytest.raises(ValueError, match=r"nowhere: no such directory"):
        options.trace_directories(f"{one},{tmp_path}/nowhere")


@given(st.integers(0, 1 << 50))
def test_a_size_falls_in_its_power_of_four_bucket(nbytes):
    low = bucket(nbytes)
    if nbytes == 0:
        assert low == 0
    else:
        assert low <= nbytes < 4 * low and 4 ** round(math.log(low, 4)) == low


TIMED = st.builds(Timed, st.sampled_from(sorted(trace.OPS)), st.integers(1, 16),
                  # 0 or at least a clock tick: perf_counter differences are no finer.
                  st.integers(0, 1 << 30), st.one_of(st.just(0.0), st.floats(1e-9, 10)))


@given(st.lists(TIMED, max_size=60))
def test_the_breakdown_keeps_every_call_byte_and_second(calls):
    rows = aggregate(calls)
    assert sum(r["calls"] for r in rows) == len(calls)
    assert sum(r["bytes"] for r in rows) == sum(c.nbytes for c in calls)
    assert math.isclose(sum(r["seconds"] for r in rows), sum(c.seconds for c in calls),
                        abs_tol=1e-9)
    keys = [(r["op"], r["group_size"], r["bucket"]) for r in rows]
    assert keys == sorted(set(keys))
    for r in rows:
        key = (r["op"], r["group_size"], r["bucket"])
        assert r["calls"] == sum((c.op, c.group_size, bucket(c.nbytes)) == key for c in calls)
        if r["group_size"] == 1 and r["op"] in ("all_reduce", "broadcast", "reduce"):
            assert r["algbw_gbps"] is None  # in place in a group of one: no data moved
        if r["algbw_gbps"] is not None:
            assert math.isclose(r["algbw_gbps"], r["bytes"] / r["seconds"] / 1e9)
            assert math.isclose(r["busbw_gbps"], r["algbw_gbps"] * trace.bus_factor(
                r["op"], r["group_size"]))
    if any(r["seconds"] > 0 for r in rows):
        assert math.isclose(sum(r["share"] for r in rows), 1.0)


CALLS = st.lists(st.sampled_from(["all_reduce", "send", "recv", "barrier"]), max_size=12)


@given(CALLS, st.data())
def test_every_call_is_waited_once_after_its_issue_and_a_send_run_is_issued_whole(ops, data):
    n = len(ops)
    calls = [trace.Call(op, 0, peer=1 if op in trace.POINT_TO_POINT else None,
                        wait_before=data.draw(st.one_of(st.none(), st.integers(i + 1, n))))
             for i, op in enumerate(ops)]
    waits = waits_at(calls)
    assert sorted(k for at in waits for k in at) == list(range(n))
    for at, ks in enumerate(waits):
        for k in ks:
            recorded = n if calls[k].wait_before is None else calls[k].wait_before
            assert k < at and at >= recorded
            if at > recorded:  # moved: only a send/recv, to the end of its run
                assert ops[k] in trace.POINT_TO_POINT
                assert all(o in trace.POINT_TO_POINT for o in ops[k:at])
                assert at == n or ops[at] not in trace.POINT_TO_POINT


def test_the_table_fits_and_says_what_a_bucket_is():
    assert size_bucket(0) == "0 B" and size_bucket(64 << 10) == "64 KiB-256 KiB"
    breakdown = aggregate([Timed("all_gather_into_tensor", 16, 3 << 30, 0.5),
                           Timed("barrier", 16, 0, 1e-5), Timed("all_reduce", 2, 4, 2e-3)])
    record = {"id": "x", "nbytes": 3 << 30, "wrong": 0, "samples": [0.5] * 10,
              "summary": {"p50": 0.5}, "precision": {"met": False},
              "figures": {"trace": "a_long_trace_name_from_a_real_job", "trace_ranks": 16,
                          "steps": 2, "calls": 3, "breakdown": breakdown,
                          "skipped": ["rank 3 call 12: c10d.foo"], "unchecked": ["barrier"]}}
    text = render_replay([record])
    assert fit.widest(fit.wrap_text(text)) <= fit.WIDTH  # the notes wrap as every table's
    assert "500 ± 0 %*" in text and ci.SHORT_NOTE in text
    assert re.search(r"all_reduce +2 +4 B-16 B +1 +4 B +2000 +- +- +0\.4 +<0\.001 +<0\.001",
                     text), text


def test_names_from_a_trace_reach_the_table_without_escape_sequences():
    # A trace named to clear the screen, set the title and break the row (issue 39).
    hostile = "\x1b]0;owned\x07\x1b[2Jname\nnext row\r"
    record = {"id": "x", "nbytes": 4, "wrong": 0, "samples": [0.5] * 10,
              "summary": {"p50": 0.5}, "precision": {"met": True},
              "figures": {"trace": hostile, "trace_ranks": 2, "steps": 1, "calls": 1,
                          "breakdown": aggregate([Timed("all_reduce", 2, 4, 2e-3)]),
                          "skipped": [f"rank 0 [3]: {hostile}"], "source": hostile,
                          "captured_backend": "gloo\x1b[31m", "unchecked": []}}
    text = render_replay([record])
    assert not any(c in text for c in "\x1b\x07\r"), repr(text)
    assert "?]0;owned??[2Jname?next row?" in text
    # As many lines as a plain name of the same width gives (a wide name wraps the headers).
    plain = "t" * len("?]0;owned??[2Jname?next row?")
    assert len(text.splitlines()) == len(render_replay([dict(record, figures=dict(
        record["figures"], trace=plain, skipped=["s"], source="s",
        captured_backend="gloo"))]).splitlines())


# Extended: tests/test_plugin_gate.py fails a real slowdown against stored runs, and
# docs/replay.md's save and compare commands run a replay against its baseline.
@pytest.mark.extended
def test_a_slower_step_fails_its_replay_against_the_stored_runs(pytester, distbench_run):
    """The issue's whole path in CI: three stored runs of a trace, then the same step with
    256 times the bytes (as a change that made it slower would) fails its own test, or,
    where the stored runs spread too far to gate, is reported slower and fails nothing."""
    def step(elements: int) -> trace.Trace:
        calls = [trace.Call("all_reduce", 0, inputs=(trace.Buffer("float32", (elements,)),),
                            reduce_op="sum", wait_before=i + 1 if i < 3 else None)
                 for i in range(4)]
        return trace.Trace("step", 2, {0: (0, 1)}, {0: calls, 1: list(calls)}, steps=[0])

    trace.write(step(16384), pytester.path / "step")
    # The threshold above this machine's run-to-run spread of such a replay: under CI's load
    # three stored runs spread so that only a slowdown past 179 % was detectable, and 16x the
    # bytes took only 2.6x the time.
    run = ("--distbench", "--world-size=2", "--distbench-replay=step",
           "--distbench-iterations=30", "--distbench-warmup=2", "--distbench-threshold=500%")
    for _ in range(3):
        distbench_run(*run, "--distbench-save=main", "--distbench-append").assert_outcomes(
            passed=1)
    result = distbench_run(*run, "--distbench-compare=main")
    result.assert_outcomes(passed=1)  # the same step: no regression
    shutil.rmtree(pytester.path / "step")
    trace.write(step(16384 * 256), pytester.path / "step")
    slower = distbench_run(*run, "--distbench-compare=main", "-rf")
    [line] = [x for x in slower.stdout.lines if re.match(r"test_replay\[gloo-ws2-step\] ", x)]
    assert "+" in line.split("replay", 1)[1]  # the change column: slower
    if line.endswith(("slower, not gateable", "inconclusive")):
        # Three stored runs that spread widely (a slow regime of this VM in one of them:
        # 2578 % and 15340 % detectable seen) may not show the change beyond the threshold:
        # "slower, not gateable" (shown, not beyond it) or "inconclusive" (not shown), and
        # nothing fails.
        slower.assert_outcomes(passed=1)
    else:
        assert line.endswith("regression"), line
        slower.assert_outcomes(failed=1)
        slower.stdout.fnmatch_lines(["*performance regression against *main.json*"])
