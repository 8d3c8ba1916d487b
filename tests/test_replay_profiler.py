"""torch.profiler Chrome traces as a way in (docs/replay.md, "From a profiler trace"): real ones
recorded here from a 2-rank gloo DDP step, NCCL-style record_param_comms ones written by hand
(no GPU here), and damaged ones."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
import replay_traces
from launching import free_port
from replay_traces import gloo_event, gloo_files, nccl_files

from pytest_distbench.families.replay import command, profiler, timeline
from pytest_distbench.families.replay.fields import MAX_VALUES
from pytest_distbench.families.replay.reading import read
from pytest_distbench.families.replay.trace import TraceError

# One xdist worker runs the module (--dist=loadgroup, pyproject.toml): its module fixture
# (a real profiled DDP step, 10-14 s) would run again in each worker.
pytestmark = pytest.mark.xdist_group("test_replay_profiler")

PROFILED = textwrap.dedent("""
    import sys, torch, torch.distributed as dist, torch.multiprocessing as mp
    from torch.profiler import ProfilerActivity, profile, schedule

    def main(rank, out, port):
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=2)
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(
            torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 4)), bucket_cap_mb=0.01)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        def export(p):
            p.export_chrome_trace(f"{out}/rank{rank}.json")
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                     schedule=schedule(wait=1, warmup=0, active=2),
                     on_trace_ready=export) as p:
            for _ in range(3):
                opt.zero_grad()
                model(torch.randn(8, 64)).sum().backward()
                opt.step()
                p.step()
        dist.destroy_process_group()

    if __name__ == "__main__":
        # Forked ranks share the program's torch import (spawned ones import it again).
        mp.start_processes(main, args=(sys.argv[1], int(sys.argv[2])), nprocs=2,
                           start_method="fork")
""")
GRADIENT_BYTES = 4 * (64 * 64 + 64 + 64 * 4 + 4)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory) -> Path:
    """rank0.json and rank1.json: two profiled DDP steps of a real 2-rank gloo run."""
    out = tmp_path_factory.mktemp("profiled")
    (out / "train.py").write_text(PROFILED)
    done = subprocess.run([sys.executable, str(out / "train.py"), str(out), str(free_port())],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest_distbench.cli", "capture", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=120)


def test_a_profiled_ddp_step_becomes_a_trace_with_its_gaps_and_replays(profiled, tmp_path,
                                                                       pytester, distbench_run):
    files = [str(profiled / "rank0.json"), str(profiled / "rank1.json")]
    done = _cli(tmp_path, "--from-profiler", *files, "--out", "trace")
    assert done.returncode == 0, done.stderr
    assert "wrote trace: 2 ranks, steps [1, 2]" in done.stdout
    t = read(tmp_path / "trace")
    assert t.source == profiler.SOURCE and t.backend == "gloo" and t.skipped == []
    for r in (0, 1):
        assert set(t.spans[r]) == {1, 2}
        for step in (1, 2):
            mine = [c for c in t.calls[r] if c.step == step]
            # DDP's buckets carry every gradient once per step, all their completions seen.
            assert sum(c.nbytes for c in mine if c.op == "all_reduce") == GRADIENT_BYTES
            start, end = t.spans[r][step]
            assert all(start <= c.issued_s <= c.returned_s <= end for c in mine)
            assert all(c.completed_s is not None and c.completed_s >= c.issued_s for c in mine)
    gaps = timeline.trace_gaps(t)
    assert not isinstance(gaps, str) and all(g.blind == () for g in gaps.values())
    # The forward and backward before the first bucket: work, in every rank.
    assert all(g.before[0] > 0 for g in gaps.values())
    # The same files twice: refused before anything is written.
    again = _cli(tmp_path, "--from-profiler", *files, "--out", "trace")
    assert again.returncode == 2 and "a trace is already there" in again.stderr
    # It replays, at an odd world size (rank 2 keeps in step).
    result = distbench_run("--distbench", "--world-size=3",
                           f"--distbench-replay={tmp_path / 'trace'}", "--distbench-iterations=3",
                           "--distbench-warmup=1", "--distbench-revisits=0",
                           f"--distbench-json={pytester.path / 'r.json'}")
    result.assert_outcomes(passed=1)
    [record] = [b["distbench"] for b in json.loads((pytester.path / "r.json").read_text())[
        "benchmarks"]]
    f = record["figures"]
    assert record["wrong"] == 0 and f["gaps"] == "cpu" and f["original_how"] == "step spans"
    assert f["gap_s"] > 0 and f["source"] == profiler.SOURCE


def test_record_param_comms_events_read_as_a_trace_at_three_ranks(tmp_path):
    t = profiler.load(nccl_files(tmp_path))
    assert t.world_size == 3 and t.device == "cuda" and t.steps == [1, 2]
    assert [(c.op, c.nbytes, c.step) for c in t.calls[2]] == [
        ("all_reduce", 4096, 1), ("all_gather_into_tensor", 2048, 1),
        ("all_reduce", 4096, 2), ("all_gather_into_tensor", 2048, 2)]
    assert t.spans[0] == {1: (0.0, 0.0009), 2: (0.001, 0.0019)}
    assert [c.issued_s for c in t.calls[0][:2]] == [0.0001, 0.0003]
    # Listed, not dropped: the sends (no peer in the event); waits are not calls.
    assert len(t.skipped) == 6 and all(s.endswith(": send") for s in t.skipped)


DAMAGES = {
    "no distributedInfo": (lambda d: d.pop("distributedInfo"), "field 'distributedInfo'"),
    "a rank outside the world": (lambda d: d["distributedInfo"].update(rank=7),
                                 "field 'distributedInfo.rank'"),
    "events not a list": (lambda d: d.update(traceEvents={}), "field 'traceEvents'"),
    "a timestamp not a number": (lambda d: d["traceEvents"][3].update(ts="late"),
                                 "traceEvents[3]: field 'ts'"),
    "an unknown dtype": (lambda d: d["traceEvents"][2]["args"].update(dtype="Quaternion"),
                         "traceEvents[2]: field 'args.dtype'"),
    "a negative size": (lambda d: d["traceEvents"][2]["args"].update({"In msg nelems": -1}),
                        "traceEvents[2]: field 'args.In msg nelems'"),
    "a group outside the world": (
        lambda d: d["traceEvents"][2]["args"].update({"Process Group Ranks": "[0, 9]"}),
        "traceEvents[2]: field 'args.Process Group Ranks'"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_profiler_file_is_refused_in_one_line_naming_file_and_field(tmp_path, damage):
    change, expected = DAMAGES[damage]
    files = nccl_files(tmp_path)
    data = json.loads(files[1].read_text())
    change(data)
    files[1].write_text(json.dumps(data))
    done = _cli(tmp_path, "--from-profiler", *map(str, files), "--out", "t")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [line] = done.stderr.splitlines()
    assert "rank1.json" in line and expected in line, line
    assert not (tmp_path / "t").exists()  # nothing written


def test_a_damaged_real_profile_names_its_field(profiled, tmp_path):
    data = json.loads((profiled / "rank1.json").read_text())
    at = next(i for i, e in enumerate(data["traceEvents"])
              if str(e.get("name")).startswith("c10d::allreduce_"))
    del data["traceEvents"][at]["args"]["Input Dims"]
    (tmp_path / "rank1.json").write_text(json.dumps(data))
    with pytest.raises(TraceError, match=rf"rank1.json: traceEvents\[{at}\]: field "
                                         r"'args.Input Dims'"):
        profiler.load([profiled / "rank0.json", tmp_path / "rank1.json"])
    with pytest.raises(TraceError, match="no file for rank 1 of the 2-rank world"):
        profiler.load([profiled / "rank0.json"])


@pytest.mark.parametrize(("split", "how"), [("[4, 8, 4]", "uneven"), ("[4, 8", "unreadable"),
                                             ('["a", 1]', "unreadable")])
def test_an_all_to_all_it_cannot_replay_evenly_is_listed_not_read(tmp_path, split, how):
    files = nccl_files(tmp_path)
    for path in files:
        data = json.loads(path.read_text())
        data["traceEvents"][2] = replay_traces._param_comms(
            1100.0, "alltoall_base", 1023, "[0, 1, 2]", **{"In split size": split})
        path.write_text(json.dumps(data))
    t = profiler.load(files)
    assert sum(s.endswith(f": alltoall_base with {how} splits") for s in t.skipped) == 3
    assert [c.op for c in t.calls[0]].count("all_to_all_single") == 0


def _with_literal(path: Path, placeholder: str, literal: str) -> None:
    """Put a JSON number json.dumps cannot write (1e400) where `placeholder` stands."""
    path.write_text(path.read_text().replace(f'"{placeholder}"', literal))


def _nccl_damaged(tmp_path: Path, change) -> list[Path]:
    files = nccl_files(tmp_path)
    for path in files:
        replay_traces.edit_json(path, change)
    return files


def _deep_ranks(d: dict) -> None:
    d["traceEvents"][2]["args"]["Process Group Ranks"] = "[" * 100_000 + "]" * 100_000


def _gloo_broadcast(root: object, dims: list | None = None) -> list[dict]:
    dims = dims or [[[8]]]
    return [gloo_event("c10d::broadcast_", 200.0, dims, **{"Concrete Inputs": ["", "", root]}),
            gloo_event("gloo:broadcast", 201.0, [dims[0][0]])]


# Each was a traceback, or a trace written that its own read-back refused and left in the
# directory (issue 54, item 5).
HOSTILE = {
    "a 400-digit ts": (
        lambda tmp: _nccl_damaged(tmp, lambda d: d["traceEvents"][3].update(ts=10**400)),
        "traceEvents[3]: field 'ts': expected microseconds"),
    "a 100,000-deep Process Group Ranks": (
        lambda tmp: _nccl_damaged(tmp, _deep_ranks),
        "traceEvents[2]: field 'args.Process Group Ranks'"),
    "a dur of 1e400": (
        lambda tmp: [_with_literal(p, "DUR", "1e400") or p for p in _nccl_damaged(
            tmp, lambda d: d["traceEvents"][2].update(dur="DUR"))],
        "traceEvents[2]: field 'dur': expected microseconds"),
    "a root of 1e400": (
        lambda tmp: [_with_literal(p, "ROOT", "1e400") or p for p in gloo_files(
            tmp, _gloo_broadcast("ROOT"))],
        "traceEvents[0]: field 'args.Concrete Inputs[2]'"),
    "a negative root": (lambda tmp: gloo_files(tmp, _gloo_broadcast(-1)),
                        "traceEvents[0]: field 'args.Concrete Inputs[2]'"),
    "16 dims of 2**31 - 1": (
        lambda tmp: gloo_files(tmp, _gloo_broadcast("0", [[[2**31 - 1] * 16]])),
        "traceEvents[0]: field 'args.Input Dims': a tensor of more than 1 PiB"),
    "a step past 2**31 - 1": (
        lambda tmp: _nccl_damaged(tmp, lambda d: d["traceEvents"][0].update(
            name="ProfilerStep#" + "9" * 5000)),
        "traceEvents[0]: field 'name': a step number past 2147483647"),
}


@pytest.mark.parametrize("damage", list(HOSTILE))
def test_a_hostile_profiler_value_is_one_line_and_leaves_nothing(tmp_path, damage):
    make, expected = HOSTILE[damage]
    files = make(tmp_path)
    done = _cli(tmp_path, "--from-profiler", *map(str, files), "--out", "t")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    [line] = done.stderr.splitlines()
    assert "rank0.json" in line and expected in line, line
    assert not (tmp_path / "t").exists()  # free for the next command


def test_a_trace_that_would_not_read_back_is_not_left_in_the_directory(tmp_path, monkeypatch):
    """Whatever the profiler reader lets through, the read-back is the last word: the trace is
    written beside and moved in only once it reads (an existing directory keeps its files)."""
    made = profiler.load(nccl_files(tmp_path))
    made.calls[1][0] = replace(made.calls[1][0], issued_s=1e13)
    monkeypatch.setattr(profiler, "load", lambda files, name=None: made)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    for out in (tmp_path / "new", tmp_path / "out"):
        code, line = command.from_profiler(str(out), None, ["rank0.json"])
        assert code == 2 and "does not read back, so is not written" in line, line
        assert f"{out}/rank1.json: calls[0]: field 'issued_s'" in line, line
    assert not (tmp_path / "new").exists()
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["notes.txt"]


def test_a_profile_whose_calls_are_all_skipped_writes_nothing_and_says_so(tmp_path):
    """As the launch capture refuses a capture of no call (issue 54, item 12): a 0-call trace
    replays as nothing and blocks the next capture there."""
    def sends_only(d: dict) -> None:
        for e in d["traceEvents"]:
            if e["name"] == "record_param_comms":
                e["args"]["Collective name"] = "send"
    files = _nccl_damaged(tmp_path, sends_only)
    done = _cli(tmp_path, "--from-profiler", *map(str, files), "--out", "t")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        f"pytest-distbench: error: capture: {files[0]} and 2 more: no call to replay: 24 not "
        "replayable, nothing else; nothing written to t"), done.stderr
    assert not (tmp_path / "t").exists()


def test_a_profile_of_more_values_than_a_trace_file_holds_is_refused_before_parsing(tmp_path):
    """A traceEvents of empty objects under the byte cap was parsed whole (a 250 MB one
    OOM-killed at 4 GiB, issue 54 item 2): the values are counted on the bytes first."""
    files = nccl_files(tmp_path)
    head = files[0].read_text().replace('"traceEvents": [', '"traceEvents": [' + "{}," * (
        MAX_VALUES // 2), 1)
    files[0].write_text(head)
    done = _cli(tmp_path, "--from-profiler", *map(str, files), "--out", "t")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [line] = done.stderr.splitlines()
    assert f"rank0.json: more than {MAX_VALUES:,} JSON values" in line, line
    assert not (tmp_path / "t").exists()
