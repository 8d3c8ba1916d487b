"""Launcher mode's per-test wire: one TCP connection from each rank other than 0 to rank 0.

Per test, every rank other than 0 sends its outcome and rank 0 answers with its verdict.
Through the launcher's store each of these was a set or a wait-then-get at the store's host
(torchrun's agent: one more process to wake, twice per read, on a machine whose cores the
ranks already share); a direct connection is one hop each way. On this 2-core machine, four
ranks: 0.10 ms per exchange against 0.23-0.39 ms through the store
(benchmarks/bench_launcher_exchange.py). What is not per test (the agreement rounds, a
release, a hang's verdict, stacks, the end of the session) stays in the store.

A frame is a 4-byte big-endian length and that many bytes of JSON (never pickle: launcher
mode may cross a real network). Each frame names the test it belongs to by its index in the
collected items, the same on every rank. A frame is bounded before it is read: its announced
length (FRAME_LIMIT, far less before the peer has proven who it is) and the nesting of its JSON
(MAX_DEPTH, checked before parsing: json's parser recurses once per level), so a peer speaking
another protocol costs rank 0 a closed connection, never memory or a traceback.
"""

from __future__ import annotations

import json
import re
import select
import socket
import struct
import threading
import time
from typing import Any

_HEADER = struct.Struct("!I")
# Outcomes carry every raw sample of every measurement (and the test's captured output): a
# duration-bound run can take millions of samples, about 20 bytes each as JSON.
FRAME_LIMIT = 64 << 20
MAX_DEPTH = 64  # an outcome nests about 5 deep; a measurement's figures add a few levels
SEND_TIMEOUT_S = 60.0  # rank 0 gives up on a rank that stops reading its verdicts
HELLO_TIMEOUT_S = 10.0  # a new connection names its rank within this
HELLO_LIMIT = 4096  # the longest frame from a peer that has not said who it is


class LinkError(RuntimeError):
    """The link could not be set up, or a peer sent something that is not a frame."""


def encode(message: Any) -> bytes:
    """One frame: the length, then the JSON text."""
    body = json.dumps(message, default=repr).encode()
    if len(body) > FRAME_LIMIT:
        raise LinkError(f"a frame of {len(body)} bytes is over the {FRAME_LIMIT} byte limit")
    return _HEADER.pack(len(body)) + body


# Taken out before counting brackets, since a bracket in a string nests nothing: first every
# escape (so each quote left opens or closes a string), then the strings. Two patterns that
# cannot backtrack, where one matching strings with their escapes would retry from every
# escaped quote of an unterminated string: quadratic in a 64 MiB frame.
_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_STRING = re.compile(rb'"[^"]*"')
_OPENERS_CLOSERS = bytes.maketrans(b"[{]}", b"(())")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def _shallow(body: bytes) -> bool:
    """Whether the JSON in `body` nests at most MAX_DEPTH deep (an unbalanced body is not:
    json would refuse it anyway). Strings out, only brackets left, then one level of innermost
    pairs removed per pass: all in C, as a frame may be 64 MiB."""
    strings_out = _STRING.sub(b"", _ESCAPE.sub(b"", body))
    skeleton = strings_out.translate(_OPENERS_CLOSERS, _NOT_BRACKETS)
    if skeleton.count(b"(") <= MAX_DEPTH:
        return True  # cannot nest deeper than it has brackets: the usual frame stops here
    for _ in range(MAX_DEPTH):
        inner = skeleton.replace(b"()", b"")
        if not inner or inner == skeleton:
            return not inner
        skeleton = inner
    return False


def decode(body: bytes) -> Any:
    """The message in one frame's body; LinkError for anything but UTF-8 JSON within
    MAX_DEPTH."""
    try:
        # Decoded here, not by json: given bytes, json guesses UTF-16 or -32 from zero bytes,
        # and the bracket count above reads UTF-8 (where no byte of a wider character is ASCII).
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise LinkError("a frame that is not UTF-8: not a distbench peer") from None
    if not _shallow(body):
        raise LinkError(f"a frame nested deeper than {MAX_DEPTH}: not a distbench peer")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: a backstop for the scan
        raise LinkError(f"a frame that is not JSON ({type(exc).__name__}): "
                        "not a distbench peer") from None


class FrameReader:
    """Frames out of a byte stream that arrives in arbitrary pieces."""

    def __init__(self, limit: int = FRAME_LIMIT) -> None:
        self.limit = limit  # the longest frame taken; may change between frames
        self._buffer = bytearray()

    def feed(self, data: bytes, most: int | None = None) -> list[Any]:
        """The messages completed by `data` (none, one or several), in order; at most `most`,
        the rest stays buffered for the next call (whose limit may differ). LinkError when a
        frame announces more than `limit` bytes (before any of them is buffered past the one
        piece at hand) or is not bounded JSON."""
        self._buffer += data
        messages: list[Any] = []
        while len(self._buffer) >= _HEADER.size and (most is None or len(messages) < most):
            (length,) = _HEADER.unpack_from(self._buffer)
            if length > self.limit:
                raise LinkError(f"a frame announced {length} bytes, over the {self.limit} byte "
                                "limit: not a distbench peer")
            end = _HEADER.size + length
            if len(self._buffer) < end:
                break
            messages.append(decode(bytes(self._buffer[_HEADER.size:end])))
            del self._buffer[:end]
        return messages

    @property
    def pending(self) -> bool:
        """Part of a frame is buffered."""
        return bool(self._buffer)


def _is_outcome(message: Any) -> bool:
    """A frame a rank sends rank 0: {"i": test index, "o": its outcome}."""
    return (type(message) is dict and message.keys() == {"i", "o"}
            and type(message["i"]) is int and message["i"] >= 0)


def _is_verdict(message: Any) -> bool:
    """A frame rank 0 sends a rank: {"i": test index, "v": the verdict}."""
    return type(message) is dict and message.keys() == {"i", "v"} and type(message["i"]) is int


def listen_address(master_addr: str, master_port: int, single_host: bool) -> str:
    """The address rank 0 listens on: loopback when every rank runs on this host; otherwise
    this host's address on the route to the launcher's store, which every rank reaches."""
    if single_host:
        return "127.0.0.1"
    try:
        family, _, _, _, target = socket.getaddrinfo(master_addr, master_port,
                                                     type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(target)  # UDP: picks the route, sends nothing
            return str(probe.getsockname()[0])
    except OSError as exc:
        raise LinkError(f"no route from this host to the store at {master_addr}:{master_port} "
                        f"to listen on: {exc}") from exc


def _tune(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # frames are small: no batching


def _send_all(conn: socket.socket, data: bytes, timeout_s: float) -> None:
    """sendall for a non-blocking socket: TimeoutError if the peer stops reading."""
    view = memoryview(data)
    deadline = time.monotonic() + timeout_s
    while view:
        try:
            view = view[conn.send(view):]
        except (BlockingIOError, InterruptedError):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("the peer stopped reading") from None
            poller = select.poll()
            poller.register(conn.fileno(), select.POLLOUT)
            poller.poll(remaining * 1000)


class RankZeroLink:
    """Rank 0's end: a connection per other rank; outcomes in, verdicts out."""

    def __init__(self, address: str, world_size: int) -> None:
        self.world_size = world_size
        self._listener: socket.socket | None = socket.create_server(
            (address, 0), backlog=max(world_size, 8))
        self.address = address
        self.port: int = self._listener.getsockname()[1]
        self._peers: dict[int, socket.socket] = {}
        self._readers: dict[int, FrameReader] = {}
        self._gone: set[int] = set()  # closed by the peer: nothing more will come
        self._received: dict[int, dict[int, Any]] = {}  # test index -> rank -> outcome
        # The main thread gathers; rank 0's deadline watch may look at what arrived meanwhile.
        self._lock = threading.Lock()

    def accept(self, timeout_s: float) -> list[int]:
        """Take every other rank's connection; the ranks that did not connect in time."""
        listener = self._listener
        assert listener is not None
        deadline = time.monotonic() + timeout_s
        waiting = set(range(1, self.world_size))
        while waiting:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            listener.settimeout(remaining)
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                break
            # A stranger that says nothing holds this up for HELLO_TIMEOUT_S at most.
            rank, reader, early = self._hello(conn, min(deadline,
                                                        time.monotonic() + HELLO_TIMEOUT_S))
            if rank is None or rank not in waiting:
                conn.close()  # not one of ours, or a rank twice: ignore it
                continue
            waiting.discard(rank)
            conn.setblocking(False)  # reads take what is there; sends wait in _send_all
            _tune(conn)
            self._peers[rank] = conn
            self._readers[rank] = reader
            self._take(rank, early)  # a rank may be a test ahead of this accept
        listener.close()
        self._listener = None
        return sorted(waiting)

    @staticmethod
    def _hello(conn: socket.socket, deadline: float
               ) -> tuple[int | None, FrameReader, list[Any]]:
        """The rank a new connection says it is, its reader, and any frames after the hello."""
        reader = FrameReader(HELLO_LIMIT)
        try:
            while True:
                conn.settimeout(max(deadline - time.monotonic(), 0.001))
                data = conn.recv(4096)
                if not data:
                    return None, reader, []
                messages = reader.feed(data, most=1)
                if messages:
                    first = messages[0]
                    rank = first.get("hello") if isinstance(first, dict) else None
                    if type(rank) is not int:  # not bool: True is no rank
                        return None, reader, []
                    reader.limit = FRAME_LIMIT
                    return rank, reader, reader.feed(b"")
        except (OSError, LinkError):
            return None, reader, []

    def _wait_readable(self, ranks: list[int], timeout_s: float) -> None:
        """Block until one of `ranks` has sent something (or timeout_s); outside the lock."""
        poller = select.poll()
        for r in ranks:
            poller.register(self._peers[r].fileno(), select.POLLIN)
        poller.poll(max(timeout_s, 0.0) * 1000)

    def _read_waiting(self) -> None:
        """Take whatever has arrived from every rank, without blocking (under the lock)."""
        for r, conn in self._peers.items():
            while r not in self._gone:
                try:
                    data = conn.recv(1 << 16)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    data = b""
                if not data:
                    self._gone.add(r)  # closed: nothing more will come from it
                    break
                try:
                    messages = self._readers[r].feed(data)
                except LinkError:
                    self._lose(r)
                    break
                self._take(r, messages)

    def _take(self, rank: int, messages: list[Any]) -> None:
        """Keep a rank's outcomes; a frame that is not one loses the rank, as a closed
        connection does (the test's gather then waits it out and the hang report names it)."""
        for message in messages:
            if not _is_outcome(message):
                self._lose(rank)
                return
            self._received.setdefault(message["i"], {})[rank] = message["o"]

    def _lose(self, rank: int) -> None:
        """Nothing more is read from this rank; closed, so it learns so at once."""
        self._gone.add(rank)
        self._peers[rank].close()

    def gather(self, index: int, timeout_s: float) -> dict[int, Any] | None:
        """Every other rank's outcome of test `index`, or None when some did not come within
        timeout_s (what did come is kept: `received` shows it)."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                self._read_waiting()
                got = self._received.get(index, {})
                missing = [r for r in range(1, self.world_size) if r not in got]
                if not missing:
                    return dict(got)
                listening = [r for r in missing if r not in self._gone]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            if not listening:
                # A rank that closed its connection sends nothing more: wait out the time as
                # the store did, so the hang report names it, without spinning.
                time.sleep(remaining)
                return None
            self._wait_readable(listening, remaining)

    def received(self, index: int) -> dict[int, Any]:
        """The outcomes of test `index` that have arrived so far (reads what is waiting)."""
        with self._lock:
            self._read_waiting()
            return dict(self._received.get(index, {}))

    def forget(self, index: int) -> None:
        with self._lock:
            self._received.pop(index, None)

    def broadcast(self, index: int, verdict: Any) -> None:
        """The verdict of test `index` to every other rank (a rank that is gone is skipped)."""
        frame = encode({"i": index, "v": verdict})
        for r, conn in self._peers.items():
            if r in self._gone:
                continue
            try:
                _send_all(conn, frame, SEND_TIMEOUT_S)
            except OSError:
                self._gone.add(r)

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for conn in self._peers.values():
            conn.close()
        self._peers.clear()


class PeerLink:
    """The end of a rank other than 0: outcomes out, verdicts in."""

    def __init__(self, address: str, port: int, rank: int, timeout_s: float) -> None:
        try:
            self._conn = socket.create_connection((address, port), timeout=timeout_s)
        except OSError as exc:
            raise LinkError(f"rank {rank} could not connect to rank 0 at {address}:{port}: "
                            f"{exc}") from exc
        _tune(self._conn)
        self._reader = FrameReader()
        self._ready: list[Any] = []  # verdict frames read but not taken
        self.lost = False  # rank 0 closed the connection: no verdict will come
        self._conn.sendall(encode({"hello": rank}))

    def send(self, index: int, outcome: Any) -> None:
        """This rank's outcome of test `index` (a lost rank 0 shows when the verdict is due)."""
        try:
            self._conn.settimeout(SEND_TIMEOUT_S)
            self._conn.sendall(encode({"i": index, "o": outcome}))
        except OSError:
            pass

    def _read(self, timeout_s: float) -> bool:
        """Read once; False on timeout or when rank 0 is gone (then `lost`)."""
        if self.lost:
            return False
        try:
            self._conn.settimeout(max(timeout_s, 0.001))
            data = self._conn.recv(1 << 16)
        except TimeoutError:
            return False
        except OSError:
            data = b""
        if not data:
            self.lost = True
            return False
        try:
            messages = self._reader.feed(data)
        except LinkError:
            messages = [None]
        if not all(_is_verdict(m) for m in messages):
            self.lost = True  # not rank 0's protocol: no verdict will come from it
            return False
        self._ready += messages
        return True

    def ready(self, timeout_s: float) -> bool:
        """Whether a verdict has arrived (waiting up to timeout_s), without taking it."""
        deadline = time.monotonic() + timeout_s
        while not self._ready:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._read(remaining):
                return bool(self._ready)
        return True

    def verdict(self, index: int, timeout_s: float) -> Any | None:
        """Rank 0's verdict on test `index`; None if it does not come within timeout_s."""
        deadline = time.monotonic() + timeout_s
        while True:
            while self._ready:
                message = self._ready.pop(0)
                if message["i"] == index:
                    return message["v"]
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._read(remaining):
                return None

    def close(self) -> None:
        self._conn.close()
