"""Traces for the replay tests, built as Trace objects and written with trace.write."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_distbench.families.replay.trace import Buffer, Call, Trace, write


def three_rank_trace(name: str = "three", steps: int = 2) -> Trace:
    """Three ranks, a subgroup [0, 2]; per step: an async all_reduce waited two calls later,
    an all_gather_into_tensor, the subgroup's all_reduce (ranks 0 and 2 only), a broadcast
    from rank 2, a send 0 -> 1 and a barrier."""
    groups = {0: (0, 1, 2), 1: (0, 2)}
    calls: dict[int, list[Call]] = {r: [] for r in range(3)}
    for step in range(steps):
        for rank, mine in calls.items():
            def at(offset: int, mine: list[Call] = mine) -> int:
                return len(mine) + offset

            mine.append(Call("all_reduce", 0, inputs=(Buffer("float32", (1024,)),),
                             reduce_op="sum", wait_before=at(2), step=step))
            mine.append(Call("all_gather_into_tensor", 0, inputs=(Buffer("float32", (256,)),),
                             outputs=(Buffer("float32", (768,)),), wait_before=at(1),
                             step=step))
            if rank != 1:
                mine.append(Call("all_reduce", 1, inputs=(Buffer("int32", (4096,)),),
                                 reduce_op="max", step=step))
            mine.append(Call("broadcast", 0, inputs=(Buffer("float16", (512,)),), root=2,
                             wait_before=at(1), step=step))
            if rank == 0:
                mine.append(Call("send", 0, inputs=(Buffer("float32", (128,)),), peer=1,
                                 wait_before=at(1), step=step))
            if rank == 1:
                mine.append(Call("recv", 0, outputs=(Buffer("float32", (128,)),), peer=0,
                                 wait_before=at(1), step=step))
            mine.append(Call("barrier", 0, wait_before=at(1), step=step))
    return Trace(name=name, world_size=3, groups=groups, calls=calls, backend="gloo",
                 device="cpu", steps=list(range(steps)), skipped=["rank 1 call 9: c10d.foo"])


def four_rank_trace(name: str = "four") -> Trace:
    calls = {r: [Call("all_reduce", 0, inputs=(Buffer("float32", (64,)),), reduce_op="sum",
                      wait_before=1)] for r in range(4)}
    return Trace(name=name, world_size=4, groups={0: (0, 1, 2, 3)}, calls=calls)


def huge_trace(name: str = "huge") -> Trace:
    """Two ranks all-reducing 4 TiB each: no machine of this project has the memory."""
    calls = {r: [Call("all_reduce", 0, inputs=(Buffer("float32", (1 << 40,)),),
                      reduce_op="sum", wait_before=1)] for r in range(2)}
    return Trace(name=name, world_size=2, groups={0: (0, 1)}, calls=calls)


def two_rank_trace(name: str = "trace") -> Trace:
    """What a captured 2-rank DDP step looks like: two gradient buckets all-reduced, the
    first overlapped with the second, then a small broadcast; two steps."""
    calls = []
    for step in range(2):
        at = len(calls)
        calls += [Call("all_reduce", 0, inputs=(Buffer("float32", (262144,)),),
                       reduce_op="sum", wait_before=at + 2, step=step),
                  Call("all_reduce", 0, inputs=(Buffer("float32", (131072,)),),
                       reduce_op="sum", wait_before=at + 2, step=step),
                  Call("broadcast", 0, inputs=(Buffer("int32", (4,)),), root=0, step=step)]
    return Trace(name=name, world_size=2, groups={0: (0, 1)}, calls={0: calls, 1: list(calls)},
                 steps=[0, 1])


def _param_comms(ts: float, name: str, nelems: int, ranks: str = "[0, 1]", **extra) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1,
            "ts": ts, "dur": 5.0,
            "args": {"Collective name": name, "dtype": "Float", "In msg nelems": nelems,
                     "Out msg nelems": nelems * (2 if name == "_allgather_base" else 1),
                     "Group size": 2, "Process Group Ranks": ranks, "Seq": int(ts), **extra}}


def nccl_files(directory: Path, world: int = 3) -> list[Path]:
    """What an NCCL rank's profile holds: record_param_comms per call, wait entries, a send
    (its peer is not recorded) and two profiler steps."""
    paths = []
    everyone = json.dumps(list(range(world)))
    for r in range(world):
        events = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1,
                   "tid": 1, "ts": 1000.0 * s, "dur": 900.0} for s in (1, 2)]
        for s in (1, 2):
            base = 1000.0 * s
            events += [_param_comms(base + 100, "allreduce", 1024, everyone),
                       _param_comms(base + 200, "wait", 0, everyone),
                       _param_comms(base + 300, "_allgather_base", 256, everyone),
                       _param_comms(base + 400, "send", 8, everyone)]
        data = {"distributedInfo": {"backend": "nccl", "rank": r, "world_size": world},
                "traceEvents": events}
        paths.append(directory / f"rank{r}.json")
        paths[-1].write_text(json.dumps(data))
    return paths


def gloo_event(name: str, ts: float, dims: list, **args) -> dict:
    """A gloo rank's profiler event: a c10d operator's (`c10d::allreduce_`: its tensor list's
    shapes as dims[0]) or its work's on gloo's thread (`gloo:all_reduce`: dims[0] a shape)."""
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 2.0,
            "args": {"Input Dims": dims, "Input type": ["float"], **args}}


def gloo_files(directory: Path, events: list[dict], world: int = 2) -> list[Path]:
    """One profiler file per rank of a gloo world, each holding `events` (torch 2.13's gloo
    records no record_param_comms: the operator events and their works are read)."""
    paths = []
    for r in range(world):
        data = {"distributedInfo": {"backend": "gloo", "rank": r, "world_size": world,
                                    "pg_config": [{"ranks": list(range(world))}]},
                "traceEvents": events}
        paths.append(directory / f"rank{r}.json")
        paths[-1].write_text(json.dumps(data))
    return paths


def written(trace: Trace, directory: Path) -> Path:
    return write(trace, directory)


def edit_json(path: Path, change) -> None:
    """Rewrite the JSON file at `path` through `change(data)`."""
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


# PARAM's basic trace: rank 0's entries; rank 1's are the same with the exchange reversed.
PARAM_RANK_0 = [
    {"comms": "all_reduce", "in_msg_size": 1024, "out_msg_size": 1024, "dtype": "Float",
     "req": 1},
    {"comms": "all_gather", "in_msg_size": 256, "out_msg_size": 512, "dtype": "Half"},
    {"comms": "wait", "req": 1},
    {"compute": "gemm", "mm_dim": 64, "dtype": "Float"},
    {"comms": "isend", "in_msg_size": 10, "out_msg_size": 10, "dtype": "Float",
     "src_rank": 0, "dst_rank": 1},
    {"comms": "irecv", "in_msg_size": 10, "out_msg_size": 10, "dtype": "Float",
     "src_rank": 1, "dst_rank": 0},
    {"comms": "barrier"},
    {"comms": "all_to_allv", "in_msg_size": 3, "out_msg_size": 3, "dtype": "Float",
     "in_split": [1, 2], "out_split": [2, 1]},
]


def param_trace(tmp_path: Path) -> Path:
    out = tmp_path / "param"
    out.mkdir()
    (out / "0.json").write_text(json.dumps(PARAM_RANK_0))
    rank_1 = json.loads(json.dumps(PARAM_RANK_0))
    rank_1[4] = {"comms": "irecv", "in_msg_size": 10, "out_msg_size": 10, "dtype": "Float",
                 "src_rank": 0, "dst_rank": 1}
    rank_1[5] = {"comms": "isend", "in_msg_size": 10, "out_msg_size": 10, "dtype": "Float",
                 "src_rank": 1, "dst_rank": 0}
    (out / "1.json").write_text(json.dumps(rank_1))
    return out
