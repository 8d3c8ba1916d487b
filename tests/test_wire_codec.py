"""Every typed wire message round-trips whole through JSON (harness/codec.py), nested
dataclasses included: what a launched rank posts through the store is what a local rank sends
over a pipe.

The strategies are built from each message's type hints, so a field added to a message later
is generated (and so checked) without a word here: the defect this guards against was a field
typed `PrecisionStop | None` that came back from the store as a dict.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from datetime import timedelta
from typing import Any, Union

import pytest
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_distbench.harness import wire as pipe_wire
from pytest_distbench.harness.codec import WireError, from_json, to_json
from pytest_distbench.harness.launcher import rank0, wire
from pytest_distbench.harness.launcher.others import capped
from pytest_distbench.harness.launcher.seal import Seal
from pytest_distbench.harness.launcher.storechannel import StoreChannel

JSON_SCALARS = (st.none() | st.booleans() | st.integers(-(2**63), 2**63)
                | st.floats(allow_nan=False) | st.text(max_size=8))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                           max_leaves=6)


def of_type(hint: Any) -> st.SearchStrategy:
    """Values of a wire field's type, as the rank would build them."""
    if hint is Any:
        return JSON_VALUES
    if dataclasses.is_dataclass(hint):
        return message(hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        return st.one_of(*(st.none() if a is type(None) else of_type(a) for a in args))
    if origin is list:
        return st.lists(of_type(args[0]), max_size=3)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return st.lists(of_type(args[0]), max_size=3).map(tuple)
        return st.tuples(*map(of_type, args))
    if origin is dict:
        return st.dictionaries(st.text(max_size=5), of_type(args[1]), max_size=3)
    return {float: st.floats(allow_nan=False), int: st.integers(), str: st.text(max_size=12),
            bool: st.booleans()}[hint]


def message(cls: type) -> st.SearchStrategy:
    hints = typing.get_type_hints(cls)
    return st.builds(cls, **{f.name: of_type(hints[f.name]) for f in dataclasses.fields(cls)})


def _messages(module: types.ModuleType) -> list[type]:
    return [v for v in vars(module).values()
            if dataclasses.is_dataclass(v) and v.__module__ == module.__name__]


MESSAGES = _messages(pipe_wire) + _messages(wire)
STATUSES = st.sampled_from(["passed", "failed", "skipped", "xfailed"])

# What the launcher's ranks post: a status the wire takes, and measurements that carry the
# cases the issue names (a stop of either statistic or none, an incomplete run, a rank that
# takes no part in what is timed).
MEASUREMENTS = message(pipe_wire.Measurement)
OUTCOMES = st.builds(wire.Outcome, status=STATUSES, message=st.text(max_size=20),
                     measurements=st.lists(MEASUREMENTS, max_size=3),
                     output=st.text(max_size=20), order=st.none() | st.integers(1, 8),
                     released=st.booleans(), info=st.none() | of_type(dict[str, Any]),
                     rebuild=st.text(max_size=8))


def test_every_message_of_both_wires_is_covered():
    names = {cls.__name__ for cls in MESSAGES}
    assert {"Measurement", "PrecisionStop", "TestOutcome", "RunTest", "RankSpec",
            "Outcome", "Verdict"} <= names


@pytest.mark.parametrize("cls", MESSAGES,
                         ids=lambda c: f"{c.__module__.split('.')[-2]}.{c.__name__}")
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_a_message_round_trips_through_json_whole(cls, data):
    sent = data.draw(message(cls))
    back = from_json(cls, json.loads(json.dumps(to_json(sent))))
    assert back == sent
    assert type(back) is cls


@settings(max_examples=60, deadline=None)
@given(outcome=OUTCOMES)
def test_an_outcome_comes_back_typed_to_the_judge(outcome):
    back = rank0._read_outcome(1, capped(outcome, 1).encode())
    assert back == outcome
    for sent, read in zip(outcome.measurements, back.measurements, strict=True):
        assert type(read) is pipe_wire.Measurement
        assert (read.stop is None) == (sent.stop is None)
        if read.stop is not None:
            assert isinstance(read.stop, pipe_wire.PrecisionStop)
            assert read.stop.statistic == sent.stop.statistic
    judged = rank0.run_result({1: back}).outcomes[1]
    assert judged.measurements == outcome.measurements


@pytest.fixture(scope="module")
def channel():
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=10),
                          wait_for_workers=False)
    yield StoreChannel(store, "distbench/codec/", Seal(b"k" * 32))
    del store


@settings(max_examples=25, deadline=None)
@given(outcome=OUTCOMES)
def test_an_outcome_round_trips_through_the_sealed_store_channel(channel, outcome):
    channel.set_text(wire.outcome(1), capped(outcome, 1))
    [raw] = channel.get_texts([wire.outcome(1)])
    assert rank0._read_outcome(1, raw) == outcome


@pytest.mark.parametrize(("path", "value", "said"), [
    (("measurements", 0, "stop", "target"), "0.05", "Outcome.measurements[0].stop.target is str"),
    (("measurements", 0, "stop"), {"target": 0.1}, "missing fields"),
    (("measurements", 0, "samples", 1), True, "Outcome.measurements[0].samples[1] is bool"),
    (("measurements", 0, "nbytes"), 1.5, "Outcome.measurements[0].nbytes is float"),
    (("measurements", 0, "busbw_factor"), 10**400, "out of a float's range"),
    (("measurements", 0, "extra"), 1, "unknown fields ['extra']"),
])
def test_a_wrong_field_anywhere_is_a_wire_error_naming_it(path, value, said):
    stop = pipe_wire.PrecisionStop(0.05, "p50", "precision")
    measurement = pipe_wire.Measurement("m", None, 1024, None, None, 1.0, 2, [1e-3, 2e-3], None,
                                        stop=stop)
    data = to_json(wire.Outcome("passed", "", [measurement], ""))
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(WireError, match=said.replace("[", r"\[").replace("]", r"\]")):
        wire.Outcome.from_json(data)
    # Rank 0 turns the same bytes into a failed outcome naming the rank, not a crash.
    read = rank0._read_outcome(2, json.dumps(data).encode())
    assert read.status == "failed" and "rank 2 posted an outcome" in read.message
