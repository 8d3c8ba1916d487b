"""The trace format, PARAM import and capture of real programs (docs/replay.md)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from launching import free_port
from replay_traces import edit_json, param_trace

from pytest_distbench.families.replay import trace as fmt
from pytest_distbench.families.replay.reading import read
from pytest_distbench.families.replay.trace import Buffer, Call, Trace, TraceError

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
        "manifest.json", "ranks.1", "a file name in the trace directory"),
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
])
def test_a_damaged_param_trace_names_file_and_field(tmp_path, change, expected):
    out = param_trace(tmp_path)
    entries = json.loads((out / "0.json").read_text())
    change(entries)
    (out / "0.json").write_text(json.dumps(entries))
    with pytest.raises(TraceError) as caught:
        read(out)
    assert "0.json" in str(caught.value) and expected in str(caught.value)


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
        dist.destroy_process_group()

    if __name__ == "__main__":
        world = int(sys.argv[2])
        mp.spawn(main, args=(world, sys.argv[1], int(sys.argv[3])), nprocs=world)
""")


def test_capture_records_a_real_ddp_step_with_its_subgroups_at_three_ranks(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(PROGRAM)
    out = tmp_path / "trace"
    done = subprocess.run([sys.executable, str(script), str(out), "3", str(free_port())],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
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


def _capture(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    cli = Path(sys.executable).with_name("pytest-distbench")
    return subprocess.run([str(cli), "capture", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=240)


def test_the_capture_command_records_a_torchrun_launch_at_three_ranks(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    done = _capture(tmp_path, "--out", "trace", "--steps", "1,2", "--", torchrun,
                    "--nproc-per-node=3", f"--master-port={free_port()}", "train.py")
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
