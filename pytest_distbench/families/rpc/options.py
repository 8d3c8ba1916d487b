"""Options of the RPC family (torch-free: the settings module imports this at start-up).

The agent/observer benchmark's shape options follow PyTorch's RPC RL benchmark; each is a list
and parametrizes `test_agent_observer`, so any of them given as a list is a sweep.  Episodes and
steps default to less than the seed's 10 x 100 so that a world of 80 ranks finishes in minutes
on a small machine; the results table prints the values used.
"""

from __future__ import annotations

from ... import units
from ...registry import Setting

# An iteration carries at most this many payload bytes (as p2p caps a window): 1024 messages
# of 64 MiB would be 64 GiB per iteration, minutes per point, for no new information. Here,
# torch-free, so the table's note states the cap the run used.
ITERATION_BYTES_CAP = 256 << 20

_TRUE = ("true", "yes", "1", "on", "t", "y")
_FALSE = ("false", "no", "0", "off", "f", "n")


def parse_bool_list(text: str) -> list[bool]:
    """``true``, ``false`` or ``true,false`` (yes/no/1/0 too), first-seen order."""
    values: list[bool] = []
    for item in units.split_list(text, "batch mode list", "true, false or true,false"):
        lowered = item.lower()
        if lowered in _TRUE:
            values.append(True)
        elif lowered in _FALSE:
            values.append(False)
        else:
            raise ValueError(f"invalid batch mode {item!r}: expected true or false")
    return list(dict.fromkeys(values))


def parse_shape(item: str) -> tuple[int, ...]:
    """One state shape, dimensions joined by dashes: ``10-20-10``."""
    parts = item.split("-")
    dims = []
    for part in parts:
        part = part.strip()
        if not part.isdigit() or int(part) < 1 or len(part) > 6:
            raise ValueError(
                f"invalid state size {item!r}: expected positive dimensions joined by '-', "
                "e.g. 10-20-10"
            )
        dims.append(int(part))
    return tuple(dims)


def parse_shape_list(text: str) -> list[tuple[int, ...]]:
    items = units.split_list(text, "state size list", "shapes like 10-20-10, comma-separated")
    return list(dict.fromkeys(parse_shape(item) for item in items))


def shape_id(shape: tuple[int, ...]) -> str:
    return "state" + "-".join(str(d) for d in shape)


def _ints(what: str):
    return lambda text: units.parse_positive_int_list(text, what)


SETTINGS: tuple[Setting, ...] = (
    Setting("batch", "--distbench-batch", "true", parse_bool_list,
            "agent/observer: the agent answers observers in batches (true), one by one "
            "(false), or both (true,false)", param="batch",
            param_id=lambda b: "batch" if b else "nobatch"),
    Setting("state_size", "--distbench-state-size", "10-20-10", parse_shape_list,
            "agent/observer: shape of an observer's state, dimensions joined by '-', a list",
            param="state_size", param_id=shape_id),
    Setting("nlayers", "--distbench-nlayers", "5", _ints("layer count"),
            "agent/observer: hidden layers of the policy network, a list",
            param="nlayers", param_id=lambda n: f"nlayers{n}"),
    Setting("out_features", "--distbench-out-features", "10", _ints("out features"),
            "agent/observer: width of the policy network's layers, a list",
            param="out_features", param_id=lambda n: f"out{n}"),
    Setting("episodes", "--distbench-episodes", "3", _ints("episode count"),
            "agent/observer: episodes per point (the seed runs 10), a list",
            param="episodes", param_id=lambda n: f"ep{n}"),
    Setting("steps", "--distbench-steps", "20", _ints("step count"),
            "agent/observer: steps per observer per episode (the seed runs 100), a list",
            param="steps", param_id=lambda n: f"steps{n}"),
)
