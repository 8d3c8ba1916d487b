"""Launcher mode's per-test wire through the store, piece by piece: what rank 0 makes of any
bytes posted as an outcome, the size cap on what a rank posts, and how a rank that is gone is
told (its process, its heartbeat, the marker that wakes the rank waiting on it)."""

from __future__ import annotations

import json
import os
import time

import pytest
import torch.distributed as dist
from hypothesis import given
from hypothesis import strategies as st

from pytest_distbench.harness.launcher import liveness, wire
from pytest_distbench.harness.launcher.others import capped
from pytest_distbench.harness.launcher.rank0 import _read_outcome
from pytest_distbench.harness.launcher.storechannel import StoreChannel
from pytest_distbench.harness.wire import Measurement, PrecisionStop

STATUSES = ("passed", "failed", "skipped", "xfailed")


@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode)
       | st.recursive(st.none() | st.integers() | st.text(max_size=5),
                      lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c,
                                                                          max_size=3)
                      ).map(lambda v: json.dumps(v).encode()))
def test_any_bytes_posted_as_an_outcome_give_rank_0_an_outcome(raw):
    outcome = _read_outcome(3, raw)
    assert outcome.status in STATUSES
    if outcome.status == "failed" and outcome.message.startswith("rank 3 posted"):
        assert "rank 0 cannot read" in outcome.message


def test_json_nested_past_the_parsers_depth_is_a_failed_outcome_not_a_crash():
    outcome = _read_outcome(2, b"[" * 200_000 + b"]" * 200_000)
    assert outcome.status == "failed" and outcome.message.startswith("rank 2 posted an outcome")


def test_an_outcome_under_the_cap_travels_whole(monkeypatch):
    measurement = Measurement("x", None, None, None, None, 1.0, 0, [1e-3], None,
                              stop=PrecisionStop(0.05, "p50", "precision"))
    outcome = wire.Outcome("passed", "", [measurement], "printed\n", order=None, info={"a": 1})
    assert _read_outcome(1, capped(outcome, 1).encode()) == outcome


def test_an_outcome_over_the_cap_is_a_failure_naming_the_rank_and_the_limit(monkeypatch):
    monkeypatch.setattr(wire, "OUTCOME_LIMIT", 1000)
    outcome = wire.Outcome("passed", "", [], "x" * 5000, order=None, info={"a": 1})
    posted = _read_outcome(4, capped(outcome, 4).encode())
    assert posted.status == "failed" and posted.info == {"a": 1}
    assert "rank 4's outcome of this test is 5" in posted.message
    assert "over the 1000 bytes a rank may post" in posted.message
    # Rank 0 holds the same limit for what it reads.
    assert _read_outcome(4, json.dumps(outcome.to_json()).encode()).status == "failed"


def _dead_child(reap: bool) -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    if reap:
        os.waitpid(pid, 0)
    else:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with open(f"/proc/{pid}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    break
            time.sleep(0.01)
    return pid


def test_a_process_is_running_until_it_exits_zombie_or_reaped():
    assert liveness.is_running(os.getpid())
    zombie = _dead_child(reap=False)
    try:
        assert not liveness.is_running(zombie)
    finally:
        os.waitpid(zombie, 0)
    assert not liveness.is_running(zombie)


def test_pids_count_only_where_this_rank_sees_its_own():
    hosts = {0: "a", 1: "a", 2: "b"}
    assert liveness.same_host_pids(hosts, {0: 10, 1: 11, 2: 12}, "a", 0, 10) == {1: 11}
    # Another pid space behind the same host name: no rank is judged by its pid.
    assert liveness.same_host_pids(hosts, {0: 10, 1: 11, 2: 12}, "a", 0, 99) == {}


class _Beats:
    def __init__(self) -> None:
        self.value = 0

    def add(self, key: str, amount: int) -> int:
        return self.value


def test_a_heartbeat_silent_for_its_limit_is_gone_and_one_that_moves_is_not(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(liveness.time, "monotonic", lambda: now[0])
    beats = _Beats()
    peers = liveness.Peers({})
    assert peers.gone(beats, [1]) == []  # type: ignore[arg-type]
    now[0] += liveness.SILENT_S - 1
    assert peers.gone(beats, [1]) == []  # type: ignore[arg-type]
    beats.value = 7
    now[0] += 5
    assert peers.gone(beats, [1]) == []  # type: ignore[arg-type]
    now[0] += liveness.SILENT_S
    assert peers.gone(beats, [1]) == [1]  # type: ignore[arg-type]


@pytest.fixture
def channel():
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    yield StoreChannel(store, "test/")
    del store


def test_a_rank_whose_process_ended_is_marked_where_it_would_answer(channel):
    dead = _dead_child(reap=True)
    peers = liveness.Peers({1: dead, 2: os.getpid()})
    # The heartbeat has a connection of its own, as in a rank.
    own = dist.TCPStore("127.0.0.1", channel.store.port, is_master=False)
    beat = liveness.Heartbeat(StoreChannel(own, "test/"), 0, peers)
    try:
        channel.set_text("answer/2", '"mine"')
        began = time.monotonic()
        beat.expect([1, 2], lambda r: f"answer/{r}")
        assert channel.wait(["answer/1"], 10)
        # Found within a heartbeat or two, not at a test's timeout.
        assert time.monotonic() - began < 3 * liveness.BEAT_S + 1
        assert channel.get_texts(["answer/1", "answer/2"]) == [liveness.GONE.encode(), b'"mine"']
        assert channel.add(wire.beat(0), 0) >= 1
    finally:
        beat.stop()
