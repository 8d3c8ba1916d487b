"""Writes the trace test_replay ships (a stand-in until a captured DDP step replaces it):

    python -m pytest_distbench.suites.traces.make_shipped

Four ranks as a 2 x 2 data x tensor-parallel layout: per step, the tensor-parallel pairs
all-gather and reduce-scatter 32 KiB, the data-parallel pairs all-reduce two gradient buckets
(64 KiB and 256 KiB, asynchronous, waited at the step's end), and the world all-reduces a loss.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from pytest_distbench.families.replay.trace import Buffer, Call, Trace, write

NAME = "tp2_dp2_example"
HERE = Path(__file__).resolve().parent


def shipped_trace() -> Trace:
    groups = {0: (0, 1, 2, 3), 1: (0, 1), 2: (2, 3), 3: (0, 2), 4: (1, 3)}
    calls: dict[int, list[Call]] = {}
    for rank in range(4):
        tp, dp = (1 if rank < 2 else 2), (3 if rank % 2 == 0 else 4)
        mine: list[Call] = []
        for step in range(2):
            at = len(mine)
            mine += [
                Call("all_gather_into_tensor", tp, inputs=(Buffer("float32", (4096,)),),
                     outputs=(Buffer("float32", (8192,)),), wait_before=at + 1, step=step),
                Call("reduce_scatter_tensor", tp, inputs=(Buffer("float32", (8192,)),),
                     outputs=(Buffer("float32", (4096,)),), reduce_op="sum",
                     wait_before=at + 2, step=step),
                Call("all_reduce", dp, inputs=(Buffer("float32", (16384,)),),
                     reduce_op="sum", step=step),
                Call("all_reduce", dp, inputs=(Buffer("float32", (65536,)),),
                     reduce_op="avg", step=step),
                Call("all_reduce", 0, inputs=(Buffer("float32", (1,)),), reduce_op="sum",
                     wait_before=at + 5 if step == 0 else None, step=step),
            ]
        calls[rank] = mine
    return Trace(name=NAME, world_size=4, groups=groups, calls=calls, backend="gloo",
                 device="cpu", steps=[0, 1], source="pytest_distbench.suites.traces.make_shipped")


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else HERE / NAME
    shutil.rmtree(out, ignore_errors=True)
    print(write(shipped_trace(), out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
