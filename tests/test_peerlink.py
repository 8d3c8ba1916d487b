"""Launcher mode's per-test link (harness/launcher/peerlink.py): frames, real loopback links."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
import tracemalloc
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_distbench.harness.launcher import peerlink
from pytest_distbench.harness.launcher.peerlink import (
    FRAME_LIMIT,
    HELLO_LIMIT,
    HELLO_TIMEOUT_S,
    MAX_DEPTH,
    FrameReader,
    LinkError,
    PeerLink,
    RankZeroLink,
    decode,
    encode,
    hello_mac,
    listen_address,
    new_token,
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


class World:
    """Rank 0's end on loopback and every other rank's token. Rank 0 accepts in a thread (as it
    would while the ranks join); strangers are plain sockets. Everything is closed afterwards."""

    def __init__(self, size: int) -> None:
        self.zero = RankZeroLink("127.0.0.1", size)
        self.tokens = {r: new_token() for r in range(1, size)}
        self.peers: dict[int, PeerLink] = {}
        self.sockets: list[socket.socket] = []
        self._accepting: threading.Thread | None = None
        self._accepted: dict[str, Any] = {}

    def start_accept(self, timeout_s: float = 10.0) -> None:
        def run() -> None:
            try:
                self._accepted["missing"] = self.zero.accept(timeout_s, self.tokens)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
                self._accepted["error"] = exc

        self._accepting = threading.Thread(target=run, daemon=True)
        self._accepting.start()

    def accepting(self) -> bool:
        assert self._accepting is not None
        return self._accepting.is_alive()

    def finish_accept(self) -> list[int]:
        """What accept returned (it must not have raised)."""
        assert self._accepting is not None
        self._accepting.join(15)
        assert not self._accepting.is_alive(), "accept did not return"
        if "error" in self._accepted:
            raise self._accepted["error"]
        return self._accepted["missing"]

    def peer(self, rank: int) -> PeerLink:
        link = PeerLink("127.0.0.1", self.zero.port, rank, 5, self.tokens[rank])
        self.peers[rank] = link
        return link

    def join(self, *ranks: int) -> list[PeerLink]:
        links = [self.peers.get(r) or self.peer(r) for r in ranks]
        for link in links:
            link.join(5)
        return links

    def stranger(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.zero.port), timeout=5)
        self.sockets.append(sock)
        return sock

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()
        for link in self.peers.values():
            link.close()
        self.zero.close()
        if self._accepting is not None:
            self._accepting.join(15)


@pytest.fixture
def make_world():
    worlds: list[World] = []

    def make(size: int = 3) -> World:
        worlds.append(World(size))
        return worlds[-1]

    yield make
    for w in worlds:
        w.close()


def frame(body: bytes) -> bytes:
    return struct.pack("!I", len(body)) + body


def read_frame(sock: socket.socket, timeout_s: float = 5.0) -> Any:
    reader = FrameReader(HELLO_LIMIT)
    sock.settimeout(timeout_s)
    while True:
        data = sock.recv(HELLO_LIMIT)
        assert data, "closed before a whole frame"
        got = reader.feed(data, most=1)
        if got:
            return got[0]


def challenge_of(sock: socket.socket) -> bytes:
    message = read_frame(sock)
    assert message.keys() == {"challenge"}
    return bytes.fromhex(message["challenge"])


def dropped(sock: socket.socket, within_s: float = 3.0) -> bool:
    """Whether rank 0 closes this connection within `within_s` (whatever it sent before)."""
    deadline = time.monotonic() + within_s
    while True:
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            if not sock.recv(1 << 16):
                return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False


def prove(sock: socket.socket, rank: int, token: bytes) -> None:
    """What a real rank sends: its hello, proving `token` on this connection's challenge."""
    nonce = challenge_of(sock)
    sock.sendall(encode({"hello": rank, "mac": hello_mac(token, nonce, rank)}))


def round_trip(world: World, index: int, ranks: list[int]) -> None:
    """Each of `ranks` sends an outcome of test `index`, rank 0 gathers them and answers."""
    for r in ranks:
        world.peers[r].send(index, {"status": "passed", "rank": r})
    assert world.zero.gather(index, 5) == {r: {"status": "passed", "rank": r} for r in ranks}
    world.zero.broadcast(index, {"status": "passed"})
    for r in ranks:
        assert world.peers[r].verdict(index, 5) == {"status": "passed"}


# -- the link at work -------------------------------------------------------------------------


def test_outcomes_in_verdicts_out(make_world):
    world = make_world(3)
    world.start_accept()
    world.join(2)[0].send(0, {"status": "passed"})  # before rank 0's accept returns: kept
    one = world.join(1)[0]
    assert world.finish_accept() == []
    one.send(0, {"status": "failed"})
    zero, two = world.zero, world.peers[2]
    assert zero.gather(0, 5) == {1: {"status": "failed"}, 2: {"status": "passed"}}
    assert not one.ready(0.05)
    zero.broadcast(0, {"status": "failed", "rebuild": True})
    assert one.ready(5)
    assert one.ready(0)  # ready() does not take the verdict
    assert one.verdict(0, 5) == {"status": "failed", "rebuild": True}
    assert two.verdict(0, 5) == {"status": "failed", "rebuild": True}
    zero.forget(0)
    assert zero.received(0) == {}


def joined_world(make_world, size: int = 3) -> World:
    world = make_world(size)
    world.start_accept()
    world.join(*range(1, size))
    assert world.finish_accept() == []
    return world


def test_gather_gives_up_after_its_timeout_and_keeps_what_came(make_world):
    world = joined_world(make_world)
    zero, peers = world.zero, world.peers
    peers[1].send(7, "one")
    began = time.monotonic()
    assert zero.gather(7, 0.3) is None
    assert 0.25 < time.monotonic() - began < 3
    assert zero.received(7) == {1: "one"}  # what the hang report reads
    peers[2].send(7, "two")
    assert zero.gather(7, 5) == {1: "one", 2: "two"}


def test_a_rank_that_closed_its_connection_is_known_lost_at_once(make_world):
    world = joined_world(make_world)
    zero, peers = world.zero, world.peers
    peers[1].send(3, "one")
    peers[2].close()
    began = time.monotonic()
    # Its outcome will never come: gather says so now, not at the deadline (issue 19, item 9).
    assert zero.gather(3, 30) is None
    assert time.monotonic() - began < 5
    assert zero.lost() == [2]
    assert zero.received(3) == {1: "one"}
    zero.broadcast(3, "verdict")  # the closed rank is skipped, the other still gets it
    assert peers[1].verdict(3, 5) == "verdict"


def test_a_lost_rank_0_gives_no_verdict(make_world):
    world = joined_world(make_world)
    world.zero.close()
    began = time.monotonic()
    one, two = world.peers[1], world.peers[2]
    assert one.verdict(0, 5) is None
    assert one.lost
    assert not two.ready(5)
    assert two.lost
    assert time.monotonic() - began < 2  # known at once, not after the timeout


def test_accept_names_the_ranks_that_never_connected_and_ignores_strangers(make_world):
    world = make_world(3)
    stranger = world.stranger()
    stranger.sendall(b"GET / HTTP/1.0\r\n\r\n")
    world.start_accept(1.0)
    world.join(2)
    assert world.finish_accept() == [1]
    assert dropped(stranger, 0)


def test_the_deadline_watch_reads_while_the_main_thread_gathers(make_world):
    world = joined_world(make_world)
    zero = world.zero
    result = {}
    gatherer = threading.Thread(target=lambda: result.update(got=zero.gather(9, 2.0)))
    gatherer.start()
    world.peers[2].send(9, "late but there")
    time.sleep(0.2)
    assert zero.received(9) == {2: "late but there"}  # not blocked behind the gather
    gatherer.join(5)
    assert result["got"] is None


def test_join_fails_at_once_when_rank_0_has_stopped_accepting(make_world):
    world = make_world(2)
    late = world.peer(1)  # connected, but it answers no challenge while rank 0 accepts
    world.start_accept(0.3)
    assert world.finish_accept() == [1]
    began = time.monotonic()
    with pytest.raises(LinkError, match="could not connect|did not admit"):
        late.join(5)
    assert time.monotonic() - began < 2


def test_a_rank_dropped_as_too_slow_to_answer_reconnects(make_world, monkeypatch):
    monkeypatch.setattr(peerlink, "HELLO_TIMEOUT_S", 0.2)
    world = make_world(2)
    slow = world.peer(1)  # rank 0 challenges this connection, then drops it unanswered
    world.start_accept(10)
    time.sleep(0.6)
    slow.join(5)
    assert world.finish_accept() == []
    round_trip(world, 0, [1])


# -- strangers (issue 19): none can take a rank's place, stop rank 0, or hold it up ---------


@pytest.mark.parametrize("hello", [
    pytest.param(b"[" * 200_000 + b"]" * 200_000, id="200000-deep, over the hello limit"),
    pytest.param(b"[" * 2000 + b"]" * 2000, id="2000-deep, within the hello limit"),
])
def test_a_deeply_nested_hello_is_dropped_and_the_rank_still_joins(make_world, hello):
    world = make_world(2)
    stranger = world.stranger()
    world.start_accept()
    challenge_of(stranger)
    try:
        stranger.sendall(frame(hello))
    except ConnectionResetError:
        pass  # dropped from the header, before the rest was sent
    assert dropped(stranger)
    assert world.accepting()
    world.join(1)
    assert world.finish_accept() == []
    round_trip(world, 0, [1])


@pytest.mark.parametrize("hello", [
    {"hello": 1}, {"hello": True}, {"hello": 1, "mac": "0" * 64},
    {"hello": True, "mac": "0" * 64},
], ids=["rank", "true", "zero-mac", "true-zero-mac"])
def test_a_hello_that_proves_nothing_takes_no_rank_slot(make_world, hello):
    world = make_world(2)
    stranger = world.stranger()  # first in: the slot was its for the asking before
    stranger.sendall(encode(hello))
    world.start_accept()
    assert dropped(stranger)
    world.join(1)
    assert world.finish_accept() == []
    round_trip(world, 0, [1])  # the real rank's passing test is gathered, not timed out


GOOD_MAC = "0" * 64  # the right shape: these fail on their other fields first


@pytest.mark.parametrize("body", [
    b"\xff\xfe\x00", b"{", b"", b"NaN", b"null", b"1", b'"hello"', b"[1, 2]",
    b'{"hello": "1", "mac": "%s"}' % GOOD_MAC.encode(),
    b'{"hello": 1.0, "mac": "%s"}' % GOOD_MAC.encode(),
    b'{"hello": [1], "mac": "%s"}' % GOOD_MAC.encode(),
    b'{"hello": null, "mac": "%s"}' % GOOD_MAC.encode(),
    b'{"hello": 0, "mac": "%s"}' % GOOD_MAC.encode(),
    b'{"hello": 2, "mac": "%s"}' % GOOD_MAC.encode(),
    b'{"hello": -1, "mac": "%s"}' % GOOD_MAC.encode(),
    b'{"hello": 1e400, "mac": "%s"}' % GOOD_MAC.encode(),
    b'{"hello": 1, "mac": 5}', b'{"hello": 1, "mac": null}', b'{"hello": 1, "mac": ["a"]}',
    b'{"hello": 1, "mac": "zz"}', b'{"hello": 1, "mac": "%s"}' % GOOD_MAC.upper().encode(),
    b'{"hello": 1, "mac": "%s"}' % ("\u00e9" * 64).encode(),
    b'{"hello": 1, "mac": "\\ud800%s"}' % GOOD_MAC[:63].encode(),
    b'{"hello": 1, "mac": "%s", "rank": 1}' % GOOD_MAC.encode(),
    b'{"hello": 1, "hello": 1}', b'{"i": 0, "o": "passed"}',
    b"1" * 5000,
])
def test_a_malformed_hello_is_dropped_without_raising(make_world, body):
    world = make_world(2)
    stranger = world.stranger()
    world.start_accept()
    challenge_of(stranger)
    stranger.sendall(frame(body))
    assert dropped(stranger)
    assert world.accepting()  # still waiting for the real rank: nothing raised
    world.join(1)
    assert world.finish_accept() == []
    round_trip(world, 0, [1])


def test_silent_connections_do_not_delay_a_rank(make_world):
    world = make_world(2)
    silent = [world.stranger() for _ in range(5)]
    silent[0].sendall(b"\x00\x00")  # half a header
    silent[1].sendall(frame(b'{"hello": 1, "mac": "')[:-3])  # most of a frame
    world.start_accept()
    began = time.monotonic()
    world.join(1)
    assert world.finish_accept() == []
    assert time.monotonic() - began < HELLO_TIMEOUT_S / 5  # concurrently: not behind them
    round_trip(world, 0, [1])


def test_a_silent_connection_is_dropped_at_its_own_deadline(make_world, monkeypatch):
    monkeypatch.setattr(peerlink, "HELLO_TIMEOUT_S", 0.3)
    world = make_world(2)
    silent = world.stranger()
    world.start_accept(10)
    began = time.monotonic()
    assert dropped(silent, 5)
    assert 0.25 < time.monotonic() - began < 3
    assert world.accepting()  # the overall wait goes on for the real rank
    world.join(1)
    assert world.finish_accept() == []


def test_a_gibibyte_announced_is_refused_at_once_without_buffering(make_world):
    world = make_world(2)
    stranger = world.stranger()
    announced = struct.pack("!I", 1 << 30) + b"[" * (8 << 20)  # made before counting
    tracemalloc.start()
    try:
        world.start_accept()
        challenge_of(stranger)
        began = time.monotonic()
        try:
            stranger.sendall(announced)
        except (ConnectionResetError, BrokenPipeError):
            pass  # dropped while sending: the point
        assert dropped(stranger, 3)
        assert time.monotonic() - began < 2
        world.join(1)
        assert world.finish_accept() == []
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # rank 0 held at most one 4 KiB read of the 8 MiB sent
    round_trip(world, 0, [1])


def test_a_hello_over_its_limit_is_refused_from_its_header(make_world):
    world = make_world(2)
    stranger = world.stranger()
    world.start_accept()
    challenge_of(stranger)
    stranger.sendall(struct.pack("!I", HELLO_LIMIT + 1))
    assert dropped(stranger)
    world.join(1)
    assert world.finish_accept() == []


@pytest.mark.parametrize("whose", ["fresh", "rank 2's"])
def test_a_hello_proving_another_token_is_refused(make_world, whose):
    world = make_world(3)
    stranger = world.stranger()
    world.start_accept()
    prove(stranger, 1, new_token() if whose == "fresh" else world.tokens[2])
    assert dropped(stranger)
    world.join(1, 2)
    assert world.finish_accept() == []
    round_trip(world, 0, [1, 2])


def test_a_token_too_short_to_be_secret_admits_no_one(make_world):
    world = make_world(2)
    world.tokens[1] = b""  # HMAC under an empty key: anyone's to compute
    stranger = world.stranger()
    world.start_accept(1.0)
    prove(stranger, 1, b"")
    assert dropped(stranger)
    assert world.finish_accept() == [1]


def test_a_hello_replayed_from_another_connection_is_refused(make_world):
    world = make_world(2)
    first, second = world.stranger(), world.stranger()
    world.start_accept()
    nonce_first, nonce_second = challenge_of(first), challenge_of(second)
    assert nonce_first != nonce_second
    # The hello a real rank 1 would send on the first connection (seen on the network),
    # replayed on the second before the first has used it: the slot is still free.
    seen = {"hello": 1, "mac": hello_mac(world.tokens[1], nonce_first, 1)}
    second.sendall(encode(seen))
    assert dropped(second)
    assert world.accepting()
    world.join(1)
    assert world.finish_accept() == []
    round_trip(world, 0, [1])


def test_a_second_hello_for_a_taken_slot_is_refused_and_the_holder_keeps_its_place(make_world):
    world = make_world(3)
    world.start_accept()
    holder = world.join(1)[0]
    holder.send(0, {"status": "passed", "rank": 1})
    # Even a second process with rank 1's token (it read the store) cannot take the slot.
    usurper = world.stranger()
    prove(usurper, 1, world.tokens[1])
    assert dropped(usurper)
    world.join(2)
    assert world.finish_accept() == []
    world.peers[2].send(0, {"status": "passed", "rank": 2})
    assert world.zero.gather(0, 5) == {r: {"status": "passed", "rank": r} for r in (1, 2)}
    world.zero.broadcast(0, "verdict")
    assert holder.verdict(0, 5) == "verdict"
    round_trip(world, 1, [1, 2])


def test_a_flood_of_connections_does_not_keep_a_rank_out(make_world, monkeypatch):
    world = make_world(3)  # its listener's backlog has room for the whole flood
    monkeypatch.setattr(peerlink, "CROWD", 4)
    flood = [world.stranger() for _ in range(30)]
    world.start_accept()
    world.join(1)
    # While rank 0 still waits for rank 2, it holds at most its cap of unproven connections:
    # the oldest made room.
    assert sum(dropped(sock, 0.2) for sock in flood) >= 30 - (3 + 4)
    assert world.accepting()
    world.join(2)
    assert world.finish_accept() == []
    round_trip(world, 0, [1, 2])


stranger_bytes = st.one_of(
    st.binary(max_size=200),
    st.binary(max_size=200).map(frame),
    json_values.map(lambda v: encode(v) if len(encode(v)) <= HELLO_LIMIT else b""),
    st.fixed_dictionaries({"hello": st.integers(-2, 4) | st.booleans() | st.floats(),
                           "mac": st.text(max_size=70) | st.integers()}).map(encode),
)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sent=stranger_bytes)
def test_nothing_a_stranger_sends_raises_out_of_accept_or_keeps_a_rank_out(make_world, sent):
    world = make_world(2)
    stranger = world.stranger()
    world.start_accept()
    challenge_of(stranger)
    stranger.sendall(sent)
    world.join(1)
    assert world.finish_accept() == []
    round_trip(world, 0, [1])


# -- an admitted rank that breaks the protocol is lost, never a traceback ---------------------


@pytest.mark.parametrize("bad", [
    frame(b"not json"), encode([1, 2]), encode({"i": "0", "o": 1}), encode({"i": True, "o": 1}),
    encode({"o": 1}), encode({"i": -1, "o": 1}), encode({"i": 0, "o": 1, "x": 2}),
    frame(b"[" * 200_000 + b"]" * 200_000), struct.pack("!I", FRAME_LIMIT + 1),
], ids=["not-json", "list", "str-index", "bool-index", "no-index", "negative", "extra", "deep",
        "too-long"])
@pytest.mark.parametrize("early", [False, True], ids=["after-accept", "with-the-hello"])
def test_an_admitted_rank_that_breaks_the_protocol_is_lost_not_raised(make_world, bad, early):
    world = make_world(3)
    broken = world.stranger()  # a real rank 1 gone wrong: it proves its token
    world.start_accept()
    prove(broken, 1, world.tokens[1])
    if early:
        broken.sendall(bad)
    assert read_frame(broken) == {"welcome": 1}
    if not early:
        broken.sendall(bad)
    world.join(2)
    assert world.finish_accept() == []
    world.peers[2].send(0, "two")
    assert world.zero.gather(0, 0.3) is None  # waited out, as for a closed connection
    assert world.zero.received(0) == {2: "two"}
    assert dropped(broken)
    world.zero.broadcast(0, "verdict")
    assert world.peers[2].verdict(0, 5) == "verdict"
