"""The trace format, PARAM import and capture of real programs (docs/replay.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from launching import free_port
from leaks import is_running, processes_with_tag
from replay_traces import edit_json, param_trace

from pytest_distbench.families.replay import fields as fmt_fields
from pytest_distbench.families.replay import timeline
from pytest_distbench.families.replay import trace as fmt
from pytest_distbench.families.replay.reading import read
from pytest_distbench.families.replay.trace import Buffer, Call, Trace, TraceError
from pytest_distbench.units import format_size

DTYPES = sorted(fmt.DTYPE_BYTES)


def small_trace(world: int = 3) -> Trace:
    """Every kind of call, a subgroup, an overlapped call: as a capture writes them."""
    groups = {0: tuple(range(world)), 1: (0, world - 1)}
    f = (Buffer("float32", (256,)),)
    calls: dict[int, list[Call]] = {}
    for r in range(world):
        mine = [Call("all_reduce", 0, f, f, reduce_op="sum", wait_before=2),
                Call("all_gather_into_tensor", 0, f, (Buffer("float32", (256 * world,)),),
                     wait_before=2),
                Call("broadcast", 0, f, root=world - 1, wait_before=3)]
        if r in groups[1]:
            mine.append(Call("all_reduce", 1, f, f, reduce_op="max", wait_before=len(mine) + 1))
        if r == 0:
            mine.append(Call("send", 0, f, peer=1))
        if r == 1:
            mine.append(Call("recv", 0, (), f, peer=0))
        mine.append(Call("barrier", 0))
        calls[r] = mine
    return Trace(name="small", world_size=world, groups=groups, calls=calls, steps=[0])


def test_a_trace_reads_back_as_written(tmp_path):
    written = small_trace()
    fmt.write(written, tmp_path / "t")
    back = read(tmp_path / "t")
    assert back.calls == written.calls and back.groups == written.groups
    assert back.world_size == 3 and back.name == "small"
    assert back.step_bytes(0) == 1024 + 3 * 1024 + 1024 + 1024 + 1024


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(world=st.integers(1, 6), sizes=st.lists(st.tuples(st.sampled_from(DTYPES),
                                                          st.integers(0, 1 << 20)),
                                                max_size=8))
def test_collectives_of_any_dtype_and_size_survive_the_round_trip(tmp_path_factory, world,
                                                                  sizes):
    calls = [Call("all_reduce", 0, (Buffer(d, (n,)),), (Buffer(d, (n,)),), reduce_op="sum")
             for d, n in sizes]
    written = Trace("t", world, {0: tuple(range(world))}, {r: list(calls) for r in range(world)})
    out = tmp_path_factory.mktemp("rt") / "t"
    fmt.write(written, out)
    assert read(out).calls == written.calls
    assert read(out).step_bytes(0) == sum(fmt.DTYPE_BYTES[d] * n for d, n in sizes)


def _damage(tmp_path: Path, edit) -> Path:
    out = tmp_path / "t"
    fmt.write(small_trace(4), out)
    edit(out)
    return out


DAMAGES = {
    "a group naming rank 7 of a 4-rank world": (
        lambda d: edit_json(d / "manifest.json",
                             lambda m: m["groups"][1].__setitem__("ranks", [0, 7])),
        "manifest.json", "groups[1].ranks", "rank 7 is outside the 4-rank world"),
    "a missing rank file": (
        lambda d: (d / "rank2.json").unlink(), "rank2.json", "no such file", None),
    "an unknown operation": (
        lambda d: edit_json(d / "rank1.json", lambda r: r["calls"][0].__setitem__("op", "foo")),
        "rank1.json", "calls[0]", "field 'op'"),
    "a negative size": (
        lambda d: edit_json(d / "rank0.json", lambda r: r["calls"][0]["inputs"][0].__setitem__(
            "shape", [-5])), "rank0.json", "inputs[0].shape", None),
    "a world size that is not a number": (
        lambda d: edit_json(d / "manifest.json", lambda m: m.__setitem__("world_size", "4")),
        "manifest.json", "world_size", None),
    "another format's version": (
        lambda d: edit_json(d / "manifest.json", lambda m: m.__setitem__("version", 99)),
        "manifest.json", "version", None),
    "not JSON": (lambda d: (d / "rank3.json").write_text("{calls: ["), "rank3.json", "not JSON",
                 None),
    "ranks that disagree on a group's collectives": (
        lambda d: edit_json(d / "rank3.json", lambda r: r["calls"].pop(0)),
        "group 0", "differ at their collective 0", "a replay would hang"),
    "a send without its receive": (
        lambda d: edit_json(d / "rank1.json", lambda r: r["calls"].pop(-2)),
        "rank 0's sends", "do not match", None),
    "a rank file pointing outside the trace": (
        lambda d: edit_json(d / "manifest.json",
                             lambda m: m["ranks"].__setitem__("1", "../../etc/passwd")),
        "manifest.json", "ranks.1", "expected 'rank1.json', the rank's file name in the trace "
        "directory, got a string"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_trace_is_refused_in_one_line_naming_file_and_field(tmp_path, damage):
    edit, *expected = DAMAGES[damage]
    path = _damage(tmp_path, edit)
    with pytest.raises(TraceError) as caught:
        read(path)
    message = str(caught.value)
    assert "\n" not in message
    for part in expected:
        if part is not None:
            assert part in message, message


def test_an_existing_trace_is_never_overwritten(tmp_path):
    fmt.write(small_trace(), tmp_path / "t")
    with pytest.raises(TraceError, match="a trace is already there"):
        fmt.write(small_trace(), tmp_path / "t")
    with pytest.raises(TraceError, match="not a directory"):
        fmt.write(small_trace(), tmp_path / "t" / "manifest.json")


# -- hostile traces (issue 39: read as data someone else wrote) ------------------------------

SECRET = "TOP-SECRET-TOKEN-abc123"


def _set_call(rank: int, key: str, value):
    return lambda d: edit_json(d / f"rank{rank}.json",
                               lambda r: r["calls"][0].__setitem__(key, value))


def _set_manifest(key: str, value):
    return lambda d: edit_json(d / "manifest.json", lambda m: m.__setitem__(key, value))


def _fifo(d: Path) -> None:
    (d / "rank1.json").unlink()
    os.mkfifo(d / "rank1.json")


def _link(target: str, name: str = "rank1.json"):
    def make(d: Path) -> None:
        (d / name).unlink()
        (d / name).symlink_to(target)
    return make


def _outside_secret(d: Path) -> None:
    (d.parent / "secret.json").write_text(json.dumps(
        {"version": 1, "rank": 1, "calls": [{"op": SECRET}]}))
    _link(str(d.parent / "secret.json"))(d)


def _outside_manifest(d: Path) -> None:
    (d.parent / "m.json").write_text((d / "manifest.json").read_text())
    _link(str(d.parent / "m.json"), "manifest.json")(d)


def _long_int(d: Path) -> None:
    text = (d / "rank0.json").read_text()
    (d / "rank0.json").write_text(text.replace('"step": 0', '"step": ' + "7" * 5000, 1))


HOSTILE = {
    # Each of these hung, took all memory, crashed with a traceback or echoed a file (issue 39).
    "a FIFO as a rank file": (_fifo, "rank1.json: is a FIFO, not a trace file"),
    "a rank file linked to /dev/zero": (_link("/dev/zero"), "rank1.json: a link leading out"),
    "a rank file linked out of the directory": (_outside_secret, "rank1.json: a link leading out"),
    "a manifest linked out of the directory": (_outside_manifest,
                                               "manifest.json: a link leading out"),
    "a world of 10**9 ranks": (_set_manifest("world_size", 10**9),
                               "field 'world_size': expected a world size of 1..65536, got an "
                               "integer"),
    "a world of 10**30 ranks": (_set_manifest("world_size", 10**30), "field 'world_size'"),
    "a list as the op": (_set_call(1, "op", ["all_reduce"]),
                         "calls[0]: field 'op': expected one of all_reduce"),
    "a list as a dtype": (
        lambda d: edit_json(d / "rank0.json", lambda r: r["calls"][0]["inputs"][0].__setitem__(
            "dtype", ["float32"])), "field 'inputs[0].dtype': expected one of"),
    "a secret as the op": (_set_call(2, "op", SECRET), "field 'op': expected one of"),
    "a 5,000-digit integer": (_long_int, "rank0.json: not JSON a trace holds"),
    "a shape of [0, 2**70]": (
        lambda d: edit_json(d / "rank0.json", lambda r: r["calls"][0]["inputs"][0].__setitem__(
            "shape", [0, 2**70])), "field 'inputs[0].shape': expected a list of at most 16"),
    "true as a root": (
        lambda d: edit_json(d / "rank0.json", lambda r: r["calls"][2].__setitem__("root", True)),
        "calls[2]: field 'root': expected a global rank of group 0, got a boolean"),
    "a name as the ranks' file": (
        lambda d: edit_json(d / "manifest.json", lambda m: m["ranks"].__setitem__("1", [SECRET])),
        "field 'ranks.1': expected 'rank1.json', the rank's file name in the trace directory, "
        "got a list"),
    "5,000 groups": (
        lambda d: edit_json(d / "manifest.json", lambda m: m.__setitem__(
            "groups", [{"id": i, "ranks": [0, 1, 2, 3]} for i in range(5000)])),
        "field 'groups': expected a list of at most 4096 groups"),
}


@pytest.mark.parametrize("damage", list(HOSTILE))
def test_a_hostile_trace_is_refused_in_one_line_never_echoing_it(tmp_path, damage):
    edit, expected = HOSTILE[damage]
    path = _damage(tmp_path, edit)
    with pytest.raises(TraceError) as caught:
        read(path)
    message = str(caught.value)
    assert "\n" not in message and expected in message, message
    assert SECRET not in message and len(message) < 400


def _json_values():
    leaves = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.sampled_from(
        [10**30, 2**63, -1, 0, 1, 3]) | st.floats() | st.text(max_size=12) | st.just(SECRET))
    return st.recursive(leaves, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=6)


def _places(data, path=()):
    """Every place in a JSON value: (path of keys and indices)."""
    yield path
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _places(v, (*path, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _places(v, (*path, i))


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), value=_json_values())
def test_any_field_of_a_trace_changed_to_anything_reads_or_is_refused_in_one_line(
        tmp_path_factory, data, value):
    out = tmp_path_factory.mktemp("fuzz") / "t"
    fmt.write(small_trace(3), out)
    name = data.draw(st.sampled_from(["manifest.json", "rank0.json", "rank1.json"]))
    document = json.loads((out / name).read_text())
    place = data.draw(st.sampled_from(list(_places(document))[1:]))
    holder = document
    for key in place[:-1]:
        holder = holder[key]
    holder[place[-1]] = value
    (out / name).write_text(json.dumps(document))
    try:
        t = read(out)
    except TraceError as e:
        assert "\n" not in str(e) and SECRET not in str(e) and len(str(e)) < 500, str(e)
    else:
        assert t.world_size == 3 and all(c.nbytes <= 1 << 50 for c in t.calls[0])


# -- what parsing builds (issue 54, item 2: bounded by the values, not only the bytes) -------

# The peak RSS of the process's own memory (VmHWM): its ru_maxrss starts from its parent's,
# pytest's, kept across fork and exec.
PEAK = textwrap.dedent("""
    import sys
    from pytest_distbench.families.replay.reading import read
    from pytest_distbench.families.replay.trace import TraceError
    try:
        read(sys.argv[1])
        print("read")
    except TraceError as e:
        print(e)
    status = open("/proc/self/status").read()
    print(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))
""")


def test_a_rank_file_of_more_values_than_a_trace_file_holds_is_refused_unparsed(tmp_path):
    """`"calls": [{}, {}, ...]` under the byte cap: a 25 MB one peaked at 687 MiB and was
    refused only after its parse, a 250 MB one OOM-killed at 4 GiB. Now its brackets and
    commas are counted on the bytes and it is refused before anything is built."""
    fmt.write(small_trace(), tmp_path / "t")
    rank1 = tmp_path / "t" / "rank1.json"
    rank1.write_text(rank1.read_text().replace('"calls": [', '"calls": [' + "{}," * (
        fmt_fields.MAX_VALUES // 2), 1))
    done = subprocess.run([sys.executable, "-c", PEAK, str(tmp_path / "t")],
                          capture_output=True, text=True, timeout=120)
    message, peak_kib = done.stdout.splitlines()
    assert message.startswith(f"{rank1}: more than 16,777,216 JSON values (counted by its "
                              "brackets, commas and colons: 16,777,"), message
    assert message.endswith("); a trace file holds at most that many "
                            '(docs/replay-trace-format.md, "Memory")'), message
    # The file's bytes, read and counted; not the 8 million objects (over 600 MiB).
    assert int(peak_kib) < 200 * 1024, f"peak {int(peak_kib) >> 10} MiB"


@pytest.mark.parametrize(("text", "refused"), [
    ("\N{GRINNING FACE}", "U+FFFF"), ("\\ud83d\\ude00", "U+FFFF"), ("\u0100", "U+00FF"),
    ("\\u0100", "U+00FF"), ("\\u00e9", None), ("\u00e9", None), ("plain", None)])
def test_a_trace_file_whose_text_takes_more_memory_than_its_bytes_is_held_to_the_cap(
        tmp_path, monkeypatch, text, refused):
    """Python keeps a string at its widest character's width: a file of characters past U+FFFF
    (or escapes making them) takes 4 bytes a character, past U+00FF 2: such a file is held to
    a quarter or half of the byte cap."""
    fmt.write(small_trace(), tmp_path / "t")
    rank1 = tmp_path / "t" / "rank1.json"
    rank1.write_text(rank1.read_text().replace('"rank": 1', f'"note": "{text}", "rank": 1'),
                     encoding="utf-8")
    cap = max(f.stat().st_size for f in (tmp_path / "t").iterdir()) + 1
    monkeypatch.setattr(fmt_fields, "MAX_FILE_BYTES", cap)
    if refused is None:
        assert read(tmp_path / "t").calls[1]
        return
    with pytest.raises(TraceError) as caught:
        read(tmp_path / "t")
    width = 4 if refused == "U+FFFF" else 2
    assert str(caught.value) == (
        f"{rank1}: larger than {format_size(cap // width)}, the most a trace file "
        f"may be that holds characters past {refused} (Python keeps such text in {width} bytes "
        "a character)")


def _count_built(value) -> int:
    """The values and keys a parse of `value` builds."""
    if isinstance(value, dict):
        return 1 + sum(1 + _count_built(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(_count_built(v) for v in value)
    return 1


@settings(max_examples=150, deadline=None)
@given(value=st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(), lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=20), compact=st.booleans(), ascii_only=st.booleans())
def test_the_count_on_the_bytes_bounds_what_the_parse_builds(value, compact, ascii_only):
    raw = json.dumps(value, separators=(",", ":") if compact else None,
                     ensure_ascii=ascii_only).encode()
    assert fmt_fields.values_at_most(raw) >= _count_built(json.loads(raw))


def _waits_by_definition(calls: list[Call]) -> list[int | None]:
    """with_waits' rule, call by call as its docstring says (the quadratic form it replaced)."""
    n, found = len(calls), []
    for i, c in enumerate(calls):
        end = next((j for j in range(i + 1, n) if calls[j].step != c.step), n)
        if c.completed_s is not None:
            wait = next((j for j in range(i + 1, end)
                         if (calls[j].issued_s or 0.0) >= c.completed_s), None)
        elif c.op in ("send", "recv"):
            wait = next((j for j in range(i + 1, end) if calls[j].op not in ("send", "recv")),
                        None)
        else:
            wait = i + 1 if i + 1 < end else None
        found.append(end if wait is None and end < n else wait)
    return found


_TIMES = st.none() | st.integers(0, 12).map(float)


@settings(max_examples=300, deadline=None)
@given(calls=st.lists(st.builds(
    lambda op, step, issued, completed: Call(op, 0, peer=1 if op in ("send", "recv") else None,
                                             step=step, issued_s=issued, completed_s=completed),
    st.sampled_from(["all_reduce", "send", "recv", "barrier"]), st.integers(0, 2), _TIMES,
    _TIMES), max_size=30))
def test_waits_are_rebuilt_in_one_pass_as_the_rule_says(calls):
    assert [c.wait_before for c in timeline.with_waits(calls)] == _waits_by_definition(calls)


def _would_hang_roots(d: Path) -> None:
    edit_json(d / "rank1.json", lambda r: r["calls"][2].__setitem__("root", 0))


def _would_hang_dtype(d: Path) -> None:
    edit_json(d / "rank2.json", lambda r: r["calls"][0]["inputs"][0].__setitem__(
        "dtype", "int32"))


def _cross_group_order(d: Path) -> None:
    # Two groups of the same two ranks, each waited at once: rank 0 issues group 1's call
    # first, rank 3 group 2's: each waits for the other forever.
    edit_json(d / "manifest.json", lambda m: m["groups"].append({"id": 2, "ranks": [0, 3]}))
    f = {"dtype": "float32", "shape": [8]}

    def calls(first: int, second: int):
        return [{"op": "all_reduce", "group": g, "inputs": [f], "reduce_op": "sum",
                 "wait_before": i + 1} for i, g in enumerate((first, second))]
    edit_json(d / "rank0.json", lambda r: r.__setitem__("calls", calls(1, 2)))
    edit_json(d / "rank3.json", lambda r: r.__setitem__("calls", calls(2, 1)))
    for rank in (1, 2):
        edit_json(d / f"rank{rank}.json", lambda r: r.__setitem__("calls", []))


@pytest.mark.parametrize("damage, expected", [
    (_would_hang_roots, "and rank 1 differ at their collective 2 in that group (broadcast and "
                        "broadcast: op, bytes, dtype, reduce op or root; a replay would hang)"),
    (_would_hang_dtype, "and rank 2 differ at their collective 0"),
    (_cross_group_order, "a replay would hang: rank 0 waits for its call 0 (all_reduce, "
                         "collective 0 of group 1 [0, 3]), which rank 3 does not reach: it "
                         "waits first for its call 0 (all_reduce)"),
])
def test_a_trace_whose_replay_would_hang_is_refused(tmp_path, damage, expected):
    path = _damage(tmp_path, damage)
    with pytest.raises(TraceError) as caught:
        read(path)
    assert expected in str(caught.value)


def test_the_same_groups_in_opposite_orders_pass_when_both_are_waited_late(tmp_path):
    def both_async(d: Path) -> None:
        _cross_group_order(d)
        for rank in (0, 3):
            edit_json(d / f"rank{rank}.json",
                      lambda r: [c.pop("wait_before") for c in r["calls"]])
    read(_damage(tmp_path, both_async))


# -- PARAM's basic traces -------------------------------------------------------------------

def test_a_param_basic_trace_reads_as_a_trace(tmp_path):
    t = read(param_trace(tmp_path))
    assert t.world_size == 2 and t.source == "PARAM basic trace"
    ops = [c.op for c in t.calls[0]]
    assert ops == ["all_reduce", "all_gather_into_tensor", "send", "recv", "barrier"]
    first = t.calls[0][0]
    assert first.nbytes == 4096 and first.wait_before == 2  # waited where its wait stood
    assert t.calls[0][1].nbytes == 1024 and t.calls[0][1].inputs[0].dtype == "float16"
    # The exchange is waited together, before the barrier: no deadlock when both send first.
    assert [c.wait_before for c in t.calls[0][2:4]] == [4, 4]
    # Compute and uneven all_to_allv are listed, not dropped.
    assert any("compute 'gemm'" in s for s in t.skipped)
    assert any("all_to_allv with uneven splits" in s for s in t.skipped)


@pytest.mark.parametrize("change, expected", [
    (lambda e: e[0].__setitem__("dtype", "quaternion"), "[0]: field 'dtype'"),
    (lambda e: e[0].__setitem__("global_ranks", [0, 5]), "rank 5 is outside the 2-rank world"),
    (lambda e: e[0].pop("comms"), "[0]: field 'comms' is missing"),
    (lambda e: e[4].__setitem__("dst_rank", 0), "field 'dst_rank'"),
    # Each crashed pytest with a traceback (issue 39).
    (lambda e: e[0].__setitem__("req", [1]), "[0]: field 'req': expected a request id"),
    (lambda e: e[7].__setitem__("in_split", [[1], 2]), "[7]: field 'in_split': expected a list"),
    (lambda e: e.__setitem__(1, {"comms": "broadcast", "in_msg_size": 4, "out_msg_size": 4,
                                 "dtype": "Float", "root": True}),
     "[1]: field 'root': expected a rank of its group, got a boolean"),
    (lambda e: e[0].__setitem__("comms", ["all_reduce"]), "[0]: field 'comms': expected an op"),
    (lambda e: e[0].__setitem__("in_msg_size", 2**70), "[0]: field 'in_msg_size'"),
])
def test_a_damaged_param_trace_names_file_and_field(tmp_path, change, expected):
    out = param_trace(tmp_path)
    entries = json.loads((out / "0.json").read_text())
    change(entries)
    (out / "0.json").write_text(json.dumps(entries))
    with pytest.raises(TraceError) as caught:
        read(out)
    assert "0.json" in str(caught.value) and expected in str(caught.value)


def test_a_param_trace_of_a_rank_past_any_world_or_a_fifo_is_refused_unread(tmp_path):
    out = param_trace(tmp_path)
    (out / "999999999.json").write_text("[]")
    with pytest.raises(TraceError, match="a PARAM trace file for a rank above 65535"):
        read(out)
    (out / "999999999.json").unlink()
    (out / "1.json").unlink()
    os.mkfifo(out / "1.json")
    with pytest.raises(TraceError, match="1.json: is a FIFO, not a trace file"):
        read(out)


def test_a_param_trace_missing_a_rank_says_which(tmp_path):
    out = param_trace(tmp_path)
    (out / "0.json").rename(out / "2.json")
    with pytest.raises(TraceError, match="no PARAM trace file for rank 0"):
        read(out)


# -- capture, in real programs -----------------------------------------------------------------

PROGRAM = textwrap.dedent("""
    import os, sys, torch, torch.distributed as dist, torch.multiprocessing as mp
    import pytest_distbench

    def main(rank, world, out, port):
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world)
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=2, dim_feedforward=64,
                                                 batch_first=True)
        model = torch.nn.parallel.DistributedDataParallel(
            torch.nn.TransformerEncoder(layer, num_layers=2), bucket_cap_mb=0.02)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        pair = dist.new_group([0, world - 1])
        with pytest_distbench.capture(out, steps=[1, 2]):
            for _ in range(4):
                opt.zero_grad()
                model(torch.randn(4, 8, 32)).sum().backward()
                x = torch.ones(5)
                if rank in (0, world - 1):
                    dist.all_reduce(x, op=dist.ReduceOp.MAX, group=pair)
                dist.broadcast(x, src=world - 1)
                shard = torch.empty(2)
                dist.reduce_scatter_tensor(shard, torch.ones(2 * world))
                if rank == 0:
                    dist.send(x, 1)
                elif rank == 1:
                    dist.recv(x, 0)
                opt.step()
        # Then a capture whose block raises in rank 1 alone: rank 1 leaves (its process ends),
        # the others' next collective fails, and no trace is left behind.
        try:
            with pytest_distbench.capture(out + "-raising"):
                dist.all_reduce(torch.ones(2))
                if rank == 1:
                    raise RuntimeError("rank 1 fails")
                dist.all_reduce(torch.ones(2))
        except Exception as e:
            print(f"rank {rank}: {type(e).__name__}", flush=True)
            return
        dist.destroy_process_group()

    if __name__ == "__main__":
        world = int(sys.argv[2])
        # Forked ranks: the program's own torch import serves them all (spawned ones import
        # it again, 3 s of CPU each here); what the capture records is the same.
        mp.start_processes(main, args=(world, sys.argv[1], int(sys.argv[3])), nprocs=world,
                           start_method="fork")
""")


def test_capture_records_a_real_ddp_step_at_three_ranks_and_a_raising_block_leaves_none(
        tmp_path):
    script = tmp_path / "train.py"
    script.write_text(PROGRAM)
    out = tmp_path / "trace"
    done = subprocess.run([sys.executable, str(script), str(out), "3", str(free_port())],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    # The second capture's block raised in rank 1: the others' next collective failed (rank 1
    # had gone), and rank 0, which made its directory, removed it.
    assert "rank 1: RuntimeError" in done.stdout, done.stdout + done.stderr[-2000:]
    assert "rank 0: " in done.stdout and "rank 2: " in done.stdout
    assert not (tmp_path / "trace-raising").exists()
    t = read(out)
    assert t.world_size == 3 and t.steps == [1, 2] and t.skipped == []
    assert t.groups == {0: (0, 1, 2), 1: (0, 2)}
    import torch

    layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=2, dim_feedforward=64,
                                             batch_first=True)
    parameter_bytes = 2 * sum(p.numel() * 4 for p in layer.parameters())
    for r in range(3):
        steps = {c.step for c in t.calls[r]}
        assert steps == {1, 2}
        for step in (1, 2):
            mine = [c for c in t.calls[r] if c.step == step]
            reduced = [c for c in mine if c.op == "all_reduce" and c.group == 0]
            # DDP's buckets carry every gradient once per step.
            assert sum(c.nbytes for c in reduced) == parameter_bytes
            assert [c.op for c in mine if c.group == 1] == (["all_reduce"] if r != 1 else [])
            # DDP broadcasts on its own (rank 0's bucket order): the program's is the 5 floats.
            ours = [c for c in mine if c.op == "broadcast" and c.inputs[0].shape == (5,)]
            assert [(c.root, c.nbytes, c.inputs[0].dtype) for c in ours] == [(2, 20, "float32")]
        for i, c in enumerate(t.calls[r]):
            assert c.issued_s is not None and c.issued_s <= c.returned_s
            assert c.wait_before is None or c.wait_before > i
            start, end = t.spans[r][c.step]  # version 2: each call inside its step's span
            assert start <= c.issued_s <= end
        # gloo's reduce_scatter_tensor has no future: the watcher saw it complete.
        scattered = [c for c in t.calls[r] if c.op == "reduce_scatter_tensor"]
        assert len(scattered) == 2 and all(c.completed_s >= c.returned_s for c in scattered)
    assert [c.peer for c in t.calls[0] if c.op == "send"] == [1, 1]
    assert [c.peer for c in t.calls[1] if c.op == "recv"] == [0, 0]
    assert [c.reduce_op for c in t.calls[0] if c.group == 1] == ["max", "max"]


TRAIN = textwrap.dedent("""
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Linear(32, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(4):
        opt.zero_grad()
        model(torch.randn(8, 32)).sum().backward()
        opt.step()
    dist.destroy_process_group()
""")


def _capture(tmp_path: Path, *args: str,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    cli = Path(sys.executable).with_name("pytest-distbench")
    return subprocess.run([str(cli), "capture", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=240, env={**os.environ, **(env or {})})


def test_the_capture_command_records_a_torchrun_launch_at_three_ranks(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    done = _capture(tmp_path, "--out", "trace", "--steps", "1,2", "--",
                    *_torchrun(3, "train.py"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "wrote trace: 3 ranks, steps [1, 2]" in done.stdout
    t = read(tmp_path / "trace")
    for r in range(3):
        # One DDP bucket per step here (the model is small): its gradients' bytes.
        reduced = [c for c in t.calls[r] if c.op == "all_reduce"]
        assert sorted({c.step for c in reduced}) == [1, 2]
        assert sum(c.nbytes for c in reduced) == 2 * 4 * (32 * 32 + 32 + 32 * 4 + 4)
    # A second capture into the same directory is refused before anything runs.
    again = _capture(tmp_path, "--out", "trace", "--", sys.executable, "-c", "print('ran')")
    assert again.returncode == 2 and "a trace is already there" in again.stderr
    assert "ran" not in again.stdout


@pytest.mark.parametrize("args, expected", [
    (["--out", "t"], "give the launch after --"),
    (["--out", "t", "--steps", "x", "--", "true"], "invalid steps 'x'"),
    (["--out", "t", "--", sys.executable, "-c", "pass"], "no trace written"),
    (["--out", "t", "--", "/nonexistent/launcher"], "cannot start '/nonexistent/launcher'"),
])
def test_the_capture_command_says_what_is_wrong_in_one_line(tmp_path, args, expected):
    done = _capture(tmp_path, *args)
    assert done.returncode != 0 and expected in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "t").exists()  # no partial trace left behind


CRASHING = textwrap.dedent("""
    import sys, torch, torch.distributed as dist
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    w = torch.nn.Parameter(torch.ones(4))
    opt = torch.optim.SGD([w], lr=0.1)
    for step in range(3):
        if rank == 1 and step == int(sys.argv[1]):
            raise RuntimeError(f"rank 1 fails in step {step}")
        dist.all_reduce(w.data)
        dist.barrier()
        opt.step()
    dist.destroy_process_group()
""")


def _torchrun(ranks: int, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={ranks}",
            f"--master-port={free_port()}", *args]


# Extended: a rank raising inside the capture block (below) leaves no trace, and the capture
# command's failures are one line (test_the_capture_command_says_what_is_wrong_in_one_line).
@pytest.mark.extended
def test_a_rank_raising_mid_step_ends_the_capture_in_one_line_leaving_nothing(tmp_path):
    # The crashed rank's exit used to write its trace with collectives the other rank never
    # joined: the capture hung (killed at 200 s; the launch alone ends at once).
    (tmp_path / "crash.py").write_text(CRASHING)
    done = _capture(tmp_path, "--out", "t", "--steps", "1,2", "--",
                    *_torchrun(2, "crash.py", "1"))
    assert done.returncode != 0
    [line] = [x for x in done.stderr.splitlines() if x.startswith("pytest-distbench")]
    assert line.startswith("pytest-distbench: error: capture: no trace written in t (the launch "
                           "exited 1; rank 1: raised; wrote nothing"), done.stderr[-2000:]
    assert not (tmp_path / "t").exists()


def test_a_capture_of_no_call_writes_nothing_and_says_why(tmp_path):
    (tmp_path / "crash.py").write_text(CRASHING)
    # One rank (an odd world): what is asked for is missing whatever the world's size. The
    # rank is the program itself, its world in the environment as a launcher leaves it (the
    # torchrun captures above and below pay for torchrun's own start: 3 s of CPU).
    world = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
             "MASTER_PORT": str(free_port())}
    done = _capture(tmp_path, "--out", "t", "--steps", "50", "--", sys.executable, "crash.py",
                    "-1", env=world)
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == (
        "pytest-distbench: error: capture: no trace written in t (no call recorded in steps "
        "[50] (the program ended 3 step(s)); nothing written to " + str(tmp_path / "t") + ")")
    assert not (tmp_path / "t").exists()


SLOW = textwrap.dedent("""
    import time, torch, torch.distributed as dist
    dist.init_process_group("gloo")
    w = torch.nn.Parameter(torch.ones(4))
    opt = torch.optim.SGD([w], lr=0.1)
    for _ in range(2):
        dist.all_reduce(w.data)
        opt.step()
    time.sleep(3)
    dist.destroy_process_group()
""")


# Extended: a directory that holds a trace (the torchrun capture above) or another's files
# (test_an_output_directory_that_cannot_take_a_capture_is_one_line) is refused; this is the
# moment another capture is still writing there.
@pytest.mark.extended
def test_a_second_capture_into_a_claimed_directory_is_refused_and_lands_nothing(tmp_path):
    # Both "succeeded", both printing the first's trace, the second's rank2.json left in it.
    (tmp_path / "slow.py").write_text(SLOW)
    cli = Path(sys.executable).with_name("pytest-distbench")
    first = subprocess.Popen([str(cli), "capture", "--out", "same", "--",
                              *_torchrun(1, "slow.py")], cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "same" / ".capture-claim").exists():
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.05)
        second = _capture(tmp_path, "--out", "same", "--", *_torchrun(3, "slow.py"))
        assert second.returncode == 2 and second.stderr.strip() == (
            "pytest-distbench: error: capture: same: another capture is writing there; give "
            "another directory")
        out, err = first.communicate(timeout=120)
    finally:
        first.kill()
        first.wait()
    assert first.returncode == 0, err[-2000:]
    assert "wrote same: 1 rank" in out
    assert sorted(p.name for p in (tmp_path / "same").iterdir()) == [
        "manifest.json", "rank0.json"]


# A program that sleeps `argv[1]` s after its process group is up, then runs `argv[2]` steps.
SLEEPER = textwrap.dedent("""
    import sys, time, torch, torch.distributed as dist
    dist.init_process_group("gloo")
    w = torch.nn.Parameter(torch.ones(4))
    opt = torch.optim.SGD([w], lr=0.1)
    time.sleep(float(sys.argv[1]))
    for _ in range(int(sys.argv[2])):
        dist.all_reduce(w.data)
        opt.step()
    dist.destroy_process_group()
""")


def _started(cli_args: list[str], cwd: Path, output: int = subprocess.PIPE,
             env: dict[str, str] | None = None) -> subprocess.Popen:
    cli = Path(sys.executable).with_name("pytest-distbench")
    return subprocess.Popen([str(cli), "capture", *cli_args], cwd=cwd, stdout=output,
                            stderr=output, text=True, env={**os.environ, **(env or {})})


def _until_capturing(claim: Path, ranks: int, command: subprocess.Popen) -> None:
    """Until `ranks` ranks have noted in the claim file that they capture."""
    deadline = time.monotonic() + 120
    while not (claim.exists() and claim.read_text().count("capturing") >= ranks):
        assert time.monotonic() < deadline and command.poll() is None
        time.sleep(0.05)


# Extended (two torchrun launches): a capture stopped by SIGTERM left its torchrun and ranks
# running; they wrote into the directory later, and the next capture there printed "wrote
# t: 2 ranks, steps [8]" for its own 3-rank, 1-step launch.
@pytest.mark.extended
def test_a_capture_stopped_by_sigterm_stops_its_launch_and_the_next_one_is_its_own(
        tmp_path, leak_tag):
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    first = _started(["--out", "t", "--", *_torchrun(2, "sleeper.py", "8", "9")], tmp_path)
    try:
        _until_capturing(tmp_path / "t" / ".capture-claim", 2, first)
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=120)
    finally:
        first.kill()
        first.wait()
    assert first.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert err.strip().splitlines()[-1].startswith(
        "pytest-distbench: error: capture: stopped by SIGTERM: the launch was stopped (it "
        "exited "), err[-2000:]
    assert processes_with_tag(leak_tag) == [] and not (tmp_path / "t").exists()
    done = _capture(tmp_path, "--out", "t", "--", *_torchrun(3, "sleeper.py", "0", "1"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "wrote t: 3 ranks, steps [0], 3 calls" in done.stdout
    time.sleep(1)  # nothing of the first's lands later
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == [
        "manifest.json", "rank0.json", "rank1.json", "rank2.json"]


@pytest.mark.extended
def test_a_capture_killed_outright_takes_its_launch_with_it(tmp_path, leak_tag):
    # SIGKILL (the OOM killer): torchrun and its ranks, each in a session of its own, ran on.
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    # No pipes: the launch would hold them open, and reading them wait for its end.
    command = _started(["--out", "t", "--", *_torchrun(2, "sleeper.py", "60", "1")], tmp_path,
                       output=subprocess.DEVNULL)
    try:
        _until_capturing(tmp_path / "t" / ".capture-claim", 2, command)
        assert len(processes_with_tag(leak_tag)) >= 4  # the command, torchrun, its 2 ranks
    finally:
        command.kill()
        command.wait()
    deadline = time.monotonic() + 5
    while processes_with_tag(leak_tag) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [pid for pid in processes_with_tag(leak_tag) if is_running(pid)] == []


@pytest.mark.extended
def test_a_rank_that_outlives_its_killed_capture_writes_nothing_into_the_next(tmp_path,
                                                                              leak_tag):
    """A rank out of the command's reach (a shell between them outlives the command) once
    wrote its trace into the directory a later capture had claimed since; that capture
    then printed the other's trace as its own. It now writes nothing: the claim it was
    launched under is gone."""
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    one_rank = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}
    stale = _started(["--out", "t", "--", "sh", "-c", f"{sys.executable} sleeper.py 2 3; true"],
                     tmp_path, output=subprocess.DEVNULL,
                     env={**one_rank, "MASTER_PORT": str(free_port())})
    try:
        _until_capturing(tmp_path / "t" / ".capture-claim", 1, stale)
    finally:
        stale.kill()
        stale.wait()
    # The directory, left with only the dead command's claim file, is taken by the next
    # capture, whose rank starts capturing after the stale one has ended its steps.
    done = _capture(tmp_path, "--out", "t", "--", sys.executable, "-c",
                    "import time; time.sleep(4); exec(open('sleeper.py').read())", "0", "1",
                    env={**one_rank, "MASTER_PORT": str(free_port())})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "wrote t: 1 ranks, steps [0], 1 calls" in done.stdout, done.stdout
    assert read(tmp_path / "t").steps == [0]


@pytest.mark.parametrize("where, expected", [
    ("file/t", "cannot write in file/t: Not a directory"),
    ("file", "file: not a directory; a trace is a directory of JSON files"),
    ("leftovers", "leftovers: holds rank0.json (an earlier capture's?); give an empty or new "
                  "directory"),
])
def test_an_output_directory_that_cannot_take_a_capture_is_one_line(tmp_path, where,
                                                                     expected):
    (tmp_path / "file").write_text("")
    (tmp_path / "leftovers").mkdir()
    (tmp_path / "leftovers" / "rank0.json").write_text("{}")
    done = _capture(tmp_path, "--out", where, "--", sys.executable, "-c", "print('ran')")
    assert done.returncode == 2
    assert done.stderr.strip() == f"pytest-distbench: error: capture: {expected}"
    assert "ran" not in done.stdout
    assert sorted(p.name for p in (tmp_path / "leftovers").iterdir()) == ["rank0.json"]


def test_an_output_directory_on_a_file_system_refusing_writes_is_one_line(tmp_path):
    # A raw OSError traceback before (issue 39). Root writes through a directory's mode:
    # there, /sys (no directory can be made in it) stands for a read-only mount.
    if os.geteuid() == 0:
        target = "/sys/distbench-capture"
    else:
        (tmp_path / "ro").mkdir(mode=0o555)
        target = "ro/t"
    done = _capture(tmp_path, "--out", target, "--", sys.executable, "-c", "pass")
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"pytest-distbench: error: capture: cannot write in {target}: "), line


def test_a_launch_whose_python_skips_the_hook_says_so(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    done = _capture(tmp_path, "--out", "t", "--", sys.executable, "-I", "-c", "pass")
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "pytest-distbench: error: capture: no trace written in t (no rank loaded the capture hook: "
        "python -I, -E or -S in the launch skips PYTHONPATH or site, where the hook is; leave "
        "them out)")


@pytest.mark.extended
@pytest.mark.parametrize("program, ranks, ops, groups", [
    ("fsdp2", 2, {"all_gather_into_tensor", "reduce_scatter_tensor"}, 1),
    ("2d", 4, {"all_reduce"}, 5),
])
def test_real_programs_capture_and_replay_checked(pytester, distbench_run, program, ranks, ops,
                                                  groups):
    programs = Path(__file__).resolve().parent.parent / "benchmarks" / "replay_programs.py"
    out = pytester.path / "trace"
    done = _capture(pytester.path, "--out", str(out), "--steps", "1", "--",
                    sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={ranks}",
                    f"--master-port={free_port()}", str(programs), program, "--steps", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    t = read(out)
    assert {c.op for calls in t.calls.values() for c in calls} == ops
    assert len(t.groups) == groups and t.skipped == []
    result = distbench_run("--distbench", f"--world-size={ranks + 1}",
                           f"--distbench-replay={out}", "--distbench-iterations=3",
                           "--distbench-warmup=1", f"--distbench-json={pytester.path / 'r.json'}")
    result.assert_outcomes(passed=1)
    [record] = [b["distbench"] for b in
                json.loads((pytester.path / "r.json").read_text())["benchmarks"]]
    assert record["wrong"] == 0 and {b["op"] for b in record["figures"]["breakdown"]} == ops


def test_a_capture_without_steps_leaves_out_the_programs_warm_up_step(tmp_path):
    """The plain command keeps the steps after step 0 (DDP's first iteration took 1,210 ms
    against 27-33 ms after it, and its replay read 228 ms a step) and says so; a one-step
    program keeps its only step; --steps 0,... keeps step 0."""
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    one_rank = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}
    done = _capture(tmp_path, "--out", "t", "--", sys.executable, "sleeper.py", "0", "3",
                    env={**one_rank, "MASTER_PORT": str(free_port())})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "wrote t: 1 ranks, steps [1, 2], 2 calls; step 0, the program's warm-up, left " \
        "out (--steps 0,... keeps it)" in done.stdout, done.stdout
    trace = read(tmp_path / "t")
    assert trace.steps == [1, 2] and {c.step for c in trace.calls[0]} == {1, 2}
    kept = _capture(tmp_path, "--out", "k", "--steps", "0,1", "--", sys.executable,
                    "sleeper.py", "0", "3", env={**one_rank, "MASTER_PORT": str(free_port())})
    assert kept.returncode == 0 and read(tmp_path / "k").steps == [0, 1], kept.stderr[-2000:]
    assert "warm-up" not in kept.stdout
