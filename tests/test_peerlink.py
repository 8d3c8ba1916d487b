"""Launcher mode's per-test link (harness/peerlink.py): frames, and real loopback connections."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_distbench.harness.peerlink import (
    FRAME_LIMIT,
    HELLO_LIMIT,
    MAX_DEPTH,
    FrameReader,
    LinkError,
    PeerLink,
    RankZeroLink,
    decode,
    encode,
    listen_address,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12)


@given(messages=st.lists(json_values, max_size=6), cuts=st.lists(st.integers(0, 400),
                                                                  max_size=12))
def test_frames_come_back_whole_however_the_stream_is_cut(messages, cuts):
    stream = b"".join(encode(m) for m in messages)
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    reader = FrameReader()
    got = []
    for start, end in zip(points, points[1:], strict=False):
        got += reader.feed(stream[start:end])
    assert got == messages
    assert not reader.pending


def test_a_frame_longer_than_the_limit_is_refused():
    with pytest.raises(LinkError, match="not a distbench peer"):
        FrameReader().feed(struct.pack("!I", FRAME_LIMIT + 1) + b"x")
    with pytest.raises(LinkError, match="over the 4096 byte limit"):
        FrameReader(HELLO_LIMIT).feed(struct.pack("!I", HELLO_LIMIT + 1))


def test_a_frame_announcing_a_gibibyte_is_refused_from_its_header_alone():
    reader = FrameReader()
    began = time.monotonic()
    with pytest.raises(LinkError, match="announced 1073741824 bytes"):
        reader.feed(struct.pack("!I", 1 << 30) + b"[" * 1000)
    assert time.monotonic() - began < 0.5


def test_the_limit_can_change_between_frames():
    """Rank 0 reads a hello under HELLO_LIMIT and what follows it under FRAME_LIMIT."""
    big = {"i": 0, "o": "x" * (2 * HELLO_LIMIT)}
    reader = FrameReader(HELLO_LIMIT)
    assert reader.feed(encode({"hello": 1}) + encode(big), most=1) == [{"hello": 1}]
    assert reader.pending
    reader.limit = FRAME_LIMIT
    assert reader.feed(b"") == [big]


def nested(depth: int, leaf: object = 1) -> object:
    for level in range(depth):
        leaf = [leaf] if level % 2 else {"k": leaf}
    return leaf


def depth_of(value: object) -> int:
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    return 0


def test_a_frame_nested_past_the_limit_is_refused_before_parsing():
    assert decode(json.dumps(nested(MAX_DEPTH)).encode()) == nested(MAX_DEPTH)
    with pytest.raises(LinkError, match="nested deeper"):
        decode(json.dumps(nested(MAX_DEPTH + 1)).encode())
    # The report's hello: json alone raises RecursionError on it.
    with pytest.raises(LinkError, match="nested deeper"):
        decode(b"[" * 200_000 + b"]" * 200_000)
    with pytest.raises(LinkError, match="nested deeper"):
        decode(b"[" * 200_000)  # unbalanced too


def test_brackets_and_quotes_inside_strings_nest_nothing():
    text = r'["[[[[{{{{", "\\", "\\\"]]]", "\u005b", "\"[\""]'
    assert decode(("[" * (MAX_DEPTH - 1) + text + "]" * (MAX_DEPTH - 1)).encode()) is not None
    tricky = nested(MAX_DEPTH - 1, '"[\\"\\' + "[" * 300)
    assert decode(json.dumps(tricky).encode()) == tricky


def test_unterminated_strings_with_escaped_quotes_are_refused_in_linear_time():
    body = b'["' + b'\\"' * 2_000_000  # 4 MB of escaped quotes: no string ever closes
    began = time.monotonic()
    with pytest.raises(LinkError, match="not JSON"):
        decode(body)
    assert time.monotonic() - began < 2


@pytest.mark.parametrize("body", [
    b"\xff\xfe[\x00", "[1]".encode("utf-16"), "[1]".encode("utf-32"), b"{", b"",
    b"[1] [2]", "1" * 5000,
], ids=["latin", "utf16", "utf32", "open", "empty", "two", "huge-int"])
def test_anything_but_utf8_json_is_a_link_error(body):
    with pytest.raises(LinkError):
        decode(body if isinstance(body, bytes) else body.encode())


@given(value=json_values, extra=st.integers(0, MAX_DEPTH + 3))
def test_the_depth_check_agrees_with_the_real_depth(value, extra):
    deep = nested(extra, value)
    body = json.dumps(deep).encode()
    if depth_of(deep) <= MAX_DEPTH:
        assert decode(body) == deep
    else:
        with pytest.raises(LinkError, match="nested deeper"):
            decode(body)


@given(data=st.binary(max_size=2 * HELLO_LIMIT), cuts=st.lists(st.integers(0, 2 * HELLO_LIMIT),
                                                                 max_size=4))
def test_any_bytes_give_frames_or_a_link_error(data, cuts):
    reader = FrameReader(HELLO_LIMIT)
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    try:
        for start, end in zip(points, points[1:], strict=False):
            reader.feed(data[start:end])
    except LinkError:
        pass


def test_listen_address_is_loopback_for_one_host_and_follows_the_route_otherwise():
    assert listen_address("some-host-that-does-not-resolve.invalid", 1, True) == "127.0.0.1"
    assert listen_address("127.0.0.1", 29500, False) == "127.0.0.1"
    with pytest.raises(LinkError, match="no route"):
        listen_address("some-host-that-does-not-resolve.invalid", 1, False)


@pytest.fixture
def world():
    """Rank 0's end and two other ranks' ends on loopback, all closed afterwards."""
    zero = RankZeroLink("127.0.0.1", 3)
    peers: list[PeerLink] = []
    yield zero, peers
    for peer in peers:
        peer.close()
    zero.close()


def test_outcomes_in_verdicts_out(world):
    zero, peers = world
    peers += [PeerLink("127.0.0.1", zero.port, r, 5) for r in (1, 2)]
    peers[1].send(0, {"status": "passed"})  # before rank 0 accepts: kept
    assert zero.accept(5) == []
    peers[0].send(0, {"status": "failed"})
    assert zero.gather(0, 5) == {1: {"status": "failed"}, 2: {"status": "passed"}}
    assert not peers[0].ready(0.05)
    zero.broadcast(0, {"status": "failed", "rebuild": True})
    assert peers[0].ready(5)
    assert peers[0].ready(0)  # ready() does not take the verdict
    assert peers[0].verdict(0, 5) == {"status": "failed", "rebuild": True}
    assert peers[1].verdict(0, 5) == {"status": "failed", "rebuild": True}
    zero.forget(0)
    assert zero.received(0) == {}


def test_gather_gives_up_after_its_timeout_and_keeps_what_came(world):
    zero, peers = world
    peers += [PeerLink("127.0.0.1", zero.port, r, 5) for r in (1, 2)]
    assert zero.accept(5) == []
    peers[0].send(7, "one")
    began = time.monotonic()
    assert zero.gather(7, 0.3) is None
    assert 0.25 < time.monotonic() - began < 3
    assert zero.received(7) == {1: "one"}  # what the hang report reads
    peers[1].send(7, "two")
    assert zero.gather(7, 5) == {1: "one", 2: "two"}


def test_a_rank_that_closed_its_connection_is_waited_for_without_spinning(world):
    zero, peers = world
    peers += [PeerLink("127.0.0.1", zero.port, r, 5) for r in (1, 2)]
    assert zero.accept(5) == []
    peers[0].send(3, "one")
    peers[1].close()
    cpu, began = time.process_time(), time.monotonic()
    assert zero.gather(3, 0.5) is None
    assert time.monotonic() - began >= 0.45
    assert time.process_time() - cpu < 0.2
    zero.broadcast(3, "verdict")  # the closed rank is skipped, the other still gets it
    assert peers[0].verdict(3, 5) == "verdict"


def test_a_lost_rank_0_gives_no_verdict(world):
    zero, peers = world
    peers.append(PeerLink("127.0.0.1", zero.port, 1, 5))
    peers.append(PeerLink("127.0.0.1", zero.port, 2, 5))
    assert zero.accept(5) == []
    zero.close()
    began = time.monotonic()
    assert peers[0].verdict(0, 5) is None
    assert peers[0].lost
    assert not peers[1].ready(5)
    assert peers[1].lost
    assert time.monotonic() - began < 2  # known at once, not after the timeout


def test_accept_names_the_ranks_that_never_connected_and_ignores_strangers(world):
    zero, peers = world
    stranger = socket.create_connection(("127.0.0.1", zero.port))
    stranger.sendall(b"GET / HTTP/1.0\r\n\r\n")
    peers.append(PeerLink("127.0.0.1", zero.port, 2, 5))
    try:
        assert zero.accept(1.0) == [1]
    finally:
        stranger.close()


def test_the_deadline_watch_reads_while_the_main_thread_gathers(world):
    zero, peers = world
    peers += [PeerLink("127.0.0.1", zero.port, r, 5) for r in (1, 2)]
    assert zero.accept(5) == []
    result = {}
    gatherer = threading.Thread(target=lambda: result.update(got=zero.gather(9, 2.0)))
    gatherer.start()
    peers[1].send(9, "late but there")
    time.sleep(0.2)
    assert zero.received(9) == {2: "late but there"}  # not blocked behind the gather
    gatherer.join(5)
    assert result["got"] is None
