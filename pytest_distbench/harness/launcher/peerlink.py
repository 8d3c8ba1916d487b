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

import errno
import hashlib
import hmac
import json
import re
import secrets
import select
import selectors
import socket
import struct
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
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


def _send_now(conn: socket.socket, frame: bytes) -> bool:
    """One non-blocking send of a small frame to a new connection; False unless all of it went
    (a fresh socket's buffer takes far more: short means the peer is not reading, or gone)."""
    try:
        return conn.send(frame) == len(frame)
    except OSError:
        return False


# -- who may join -----------------------------------------------------------------------------
#
# Rank 0's port is published in the launcher's store, and across hosts it listens on a routable
# address: anyone who can connect can try. Each rank other than 0 makes a token and publishes it
# in the store before connecting; rank 0 opens every connection with a fresh challenge, and
# admits a rank only on an HMAC of that challenge under the rank's token. So joining takes what
# the store already guards (reading it), the token never crosses the link, and a hello seen on
# one connection is worth nothing on another.

TOKEN_BYTES = 32
_NONCE_BYTES = 32
_MAC_CONTEXT = b"distbench-link-hello/1\0"  # no other MAC made with a token can pass for one
_HEX32 = re.compile(r"[0-9a-f]{64}")  # a nonce or a SHA-256 MAC, as sent
CROWD = 64  # connections held unproven at once beyond one per rank: more is someone's flood


def new_token() -> bytes:
    """A rank's secret for joining the link: published in the store, never sent on the link."""
    return secrets.token_bytes(TOKEN_BYTES)


def hello_mac(token: bytes, nonce: bytes, rank: int) -> str:
    """The proof a rank's hello carries: good for this rank, on the connection whose challenge
    was `nonce`, only."""
    message = _MAC_CONTEXT + nonce + rank.to_bytes(4, "big")  # the nonce's length is fixed
    return hmac.new(token, message, hashlib.sha256).hexdigest()


def _nonce_of(challenge: Any) -> bytes | None:
    if (type(challenge) is dict and challenge.keys() == {"challenge"}
            and type(challenge["challenge"]) is str
            and _HEX32.fullmatch(challenge["challenge"])):
        return bytes.fromhex(challenge["challenge"])
    return None


@dataclass
class _Newcomer:
    """A connection rank 0 has challenged and not admitted yet."""

    conn: socket.socket
    nonce: bytes
    deadline: float  # its own: a silent one is dropped without holding up anyone else
    reader: FrameReader = field(default_factory=lambda: FrameReader(HELLO_LIMIT))


class _Refused(Exception):
    """A newcomer that is not a rank still waiting to join: close it, tell it nothing."""


class RankZeroLink:
    """Rank 0's end: a connection per other rank; outcomes in, verdicts out."""

    def __init__(self, address: str, world_size: int) -> None:
        self.world_size = world_size
        self._listener: socket.socket | None = socket.create_server(
            (address, 0), backlog=max(world_size, 8) + CROWD)
        self.address = address
        self.port: int = self._listener.getsockname()[1]
        self._peers: dict[int, socket.socket] = {}
        self._readers: dict[int, FrameReader] = {}
        self._gone: set[int] = set()  # closed, or broke the protocol: nothing more is read
        self._received: dict[int, dict[int, Any]] = {}  # test index -> rank -> outcome
        # The main thread gathers; rank 0's deadline watch may look at what arrived meanwhile.
        self._lock = threading.Lock()

    def accept(self, timeout_s: float, tokens: Mapping[int, bytes]) -> list[int]:
        """Admit every other rank, each on a connection whose hello proves the token that rank
        published (`tokens`: rank -> token, read from the store); the ranks not admitted within
        timeout_s.

        Every connection is served at once, each against its own HELLO_TIMEOUT_S: one that
        stays silent, sends anything but a proven hello, or claims a rank already admitted is
        closed and forgotten, and holds up no one.
        """
        listener = self._listener
        assert listener is not None
        # A short token could be guessed (an empty one by anyone): such a rank cannot join.
        keys = {r: t for r, t in tokens.items()
                if isinstance(t, bytes) and len(t) >= TOKEN_BYTES // 2}
        deadline = time.monotonic() + timeout_s
        waiting = set(range(1, self.world_size))
        newcomers: dict[int, _Newcomer] = {}  # by file descriptor, oldest first
        selector = selectors.DefaultSelector()
        listener.setblocking(False)
        selector.register(listener, selectors.EVENT_READ)
        try:
            while waiting:
                now = time.monotonic()
                for fd in [fd for fd, n in newcomers.items() if n.deadline <= now]:
                    _dismiss(selector, newcomers, fd)
                if now >= deadline:
                    break
                wake = min([deadline, *(n.deadline for n in newcomers.values())])
                for key, _ in selector.select(wake - now):
                    if key.fileobj is listener:
                        self._challenge(listener, selector, newcomers)
                        continue
                    newcomer = newcomers.get(key.fd)
                    if newcomer is None:  # dismissed earlier in this round
                        continue
                    try:
                        rank = self._hear(newcomer, keys, waiting)
                    except _Refused:
                        _dismiss(selector, newcomers, key.fd)
                        continue
                    if rank is None:
                        continue  # the hello is not complete yet
                    del newcomers[key.fd]
                    selector.unregister(newcomer.conn)
                    if self._admit(rank, newcomer):
                        waiting.discard(rank)
                    else:
                        newcomer.conn.close()
        finally:
            for newcomer in newcomers.values():
                newcomer.conn.close()
            selector.close()
            listener.close()
            self._listener = None
        return sorted(waiting)

    def _challenge(self, listener: socket.socket, selector: selectors.BaseSelector,
                   newcomers: dict[int, _Newcomer]) -> None:
        """Take one new connection and send it a challenge."""
        try:
            conn, _ = listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                if newcomers:  # out of descriptors: the oldest unproven connection makes room
                    _dismiss(selector, newcomers, next(iter(newcomers)))
                else:
                    time.sleep(0.05)  # the listener stays readable: do not spin on it
            return  # otherwise reset before it was taken
        if len(newcomers) >= self.world_size + CROWD:
            # Connections are coming faster than they prove themselves: drop the oldest. A rank
            # answers within a round trip, so that is rarely one; if it is, it reconnects
            # (PeerLink.join).
            _dismiss(selector, newcomers, next(iter(newcomers)))
        conn.setblocking(False)
        nonce = secrets.token_bytes(_NONCE_BYTES)
        if not _send_now(conn, encode({"challenge": nonce.hex()})):
            conn.close()
            return
        newcomers[conn.fileno()] = _Newcomer(conn, nonce, time.monotonic() + HELLO_TIMEOUT_S)
        selector.register(conn, selectors.EVENT_READ)

    def _hear(self, newcomer: _Newcomer, keys: Mapping[int, bytes], waiting: set[int]
              ) -> int | None:
        """The rank a newcomer's hello proves, None while it is incomplete; _Refused for
        anything else."""
        try:
            data = newcomer.conn.recv(HELLO_LIMIT)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError as exc:
            raise _Refused from exc
        if not data:
            raise _Refused
        try:
            messages = newcomer.reader.feed(data, most=1)  # what follows is read as outcomes
        except LinkError as exc:
            raise _Refused from exc
        if not messages:
            return None
        rank = self._proven(messages[0], newcomer.nonce, keys)
        if rank is None or rank not in waiting:  # a second hello for a rank: its holder stays
            raise _Refused
        return rank

    def _proven(self, hello: Any, nonce: bytes, keys: Mapping[int, bytes]) -> int | None:
        """The rank of {"hello": rank, "mac": hello_mac(token, nonce, rank)}, if it is that."""
        if type(hello) is not dict or hello.keys() != {"hello", "mac"}:
            return None
        rank, mac = hello["hello"], hello["mac"]
        # type() rather than isinstance: True is an int, and no rank.
        if type(rank) is not int or not 1 <= rank < self.world_size or rank not in keys:
            return None
        # Only 64 lowercase hex digits reach compare_digest (which refuses non-ASCII text).
        if type(mac) is not str or not _HEX32.fullmatch(mac):
            return None
        return rank if hmac.compare_digest(hello_mac(keys[rank], nonce, rank), mac) else None

    def _admit(self, rank: int, newcomer: _Newcomer) -> bool:
        """Tell a proven rank it is in; from here it is read as outcomes, under FRAME_LIMIT."""
        if not _send_now(newcomer.conn, encode({"welcome": rank})):
            return False
        _tune(newcomer.conn)
        newcomer.reader.limit = FRAME_LIMIT
        with self._lock:
            self._peers[rank] = newcomer.conn
            self._readers[rank] = newcomer.reader
            try:  # a rank may be a test ahead of this accept
                self._take(rank, newcomer.reader.feed(b""))
            except LinkError:
                self._lose(rank)
        return True

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
                    self._lose(r)  # closed: nothing more will come from it
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
        timeout_s or will never come (`lost`); what did come is kept (`received`)."""
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
                # A rank that closed its connection sends nothing more: it died (or its link
                # broke). Say so now rather than at the deadline (`lost` names it).
                return None
            self._wait_readable(listening, remaining)

    def lost(self) -> list[int]:
        """The ranks whose connection closed: nothing more will come from them."""
        with self._lock:
            return sorted(self._gone)

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

    def stop_listening(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def close(self) -> None:
        self.stop_listening()
        for conn in self._peers.values():
            conn.close()
        self._peers.clear()


def _dismiss(selector: selectors.BaseSelector, newcomers: dict[int, _Newcomer],
             fd: int) -> None:
    newcomer = newcomers.pop(fd)
    selector.unregister(newcomer.conn)
    newcomer.conn.close()


class PeerLink:
    """The end of a rank other than 0: outcomes out, verdicts in.

    Connects at once (a firewall shows early); `join` proves the rank's token to rank 0 once it
    accepts, after the collection round."""

    def __init__(self, address: str, port: int, rank: int, timeout_s: float,
                 token: bytes) -> None:
        self.address, self.port, self.rank = address, port, rank
        self._token = token
        self._conn = self._connect(timeout_s)
        self._reader = FrameReader(HELLO_LIMIT)  # FRAME_LIMIT once rank 0 has admitted us
        self._ready: list[Any] = []  # frames read but not taken
        self.joined = False
        self.lost = False  # rank 0 closed the connection: no verdict will come

    def _connect(self, timeout_s: float) -> socket.socket:
        try:
            conn = socket.create_connection((self.address, self.port),
                                            timeout=max(timeout_s, 0.001))
        except OSError as exc:
            raise LinkError(f"rank {self.rank} could not connect to rank 0 at {self.address}:"
                            f"{self.port}: {exc}") from exc
        _tune(conn)
        return conn

    def join(self, timeout_s: float) -> None:
        """Answer rank 0's challenge with this rank's proof and return once rank 0 has admitted
        it; LinkError if it has not within timeout_s. Rank 0 challenges when it accepts."""
        if self.joined:
            return
        deadline = time.monotonic() + timeout_s
        pause = 0.05
        while True:
            try:
                if self._greet(deadline):
                    break
            except TimeoutError:
                raise LinkError(self._not_admitted(timeout_s)) from None
            # Closed before a welcome: rank 0 found this connection too slow to prove itself,
            # or dropped it to make room among a flood of others. A fresh one tries again (one
            # that is refused means rank 0 stopped accepting: LinkError).
            time.sleep(max(min(pause, deadline - time.monotonic()), 0.0))
            pause = min(2 * pause, 1.0)
            if time.monotonic() >= deadline:
                raise LinkError(self._not_admitted(timeout_s))
            self._conn.close()
            self._conn = self._connect(deadline - time.monotonic())
            self._reader = FrameReader(HELLO_LIMIT)
            self._ready = []
            self.lost = False
        self.joined = True
        self._reader.limit = FRAME_LIMIT
        self._absorb(b"")  # frames that came with the welcome

    def _not_admitted(self, timeout_s: float) -> str:
        return (f"rank 0 at {self.address}:{self.port} did not admit rank {self.rank} within "
                f"{timeout_s:g} s")

    def _greet(self, deadline: float) -> bool:
        """One challenge, hello and welcome; False when rank 0 closed the connection first."""
        challenge = self._next(deadline)
        if challenge is None:
            return False
        nonce = _nonce_of(challenge)
        if nonce is None:
            raise LinkError(f"{self.address}:{self.port} does not speak as distbench's rank 0 "
                            f"(rank {self.rank} connected to it from the store's 'link')")
        try:
            self._conn.settimeout(max(deadline - time.monotonic(), 0.001))
            self._conn.sendall(encode({"hello": self.rank,
                                       "mac": hello_mac(self._token, nonce, self.rank)}))
        except OSError:
            return False
        welcome = self._next(deadline)
        if welcome is None:
            return False
        if (type(welcome) is not dict or welcome.keys() != {"welcome"}
                or type(welcome["welcome"]) is not int or welcome["welcome"] != self.rank):
            raise LinkError(f"{self.address}:{self.port} answered rank {self.rank}'s hello "
                            "with something other than its welcome")
        return True

    def _next(self, deadline: float) -> Any | None:
        """The next frame while joining; None when the connection closed (or broke the
        protocol); TimeoutError at the deadline."""
        if self._reader.pending:
            self._absorb(b"", most=1)  # it may have come in one piece with the frame before
        while not self._ready:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            if not self._read(remaining, most=1) and self.lost:
                return None
        return self._ready.pop(0)

    def send(self, index: int, outcome: Any) -> None:
        """This rank's outcome of test `index` (a lost rank 0 shows when the verdict is due)."""
        if not self.joined:
            try:
                self.join(SEND_TIMEOUT_S)
            except LinkError:
                self.lost = True
                return
        try:
            self._conn.settimeout(SEND_TIMEOUT_S)
            self._conn.sendall(encode({"i": index, "o": outcome}))
        except OSError:
            pass

    def _read(self, timeout_s: float, most: int | None = None) -> bool:
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
        return self._absorb(data, most)

    def _absorb(self, data: bytes, most: int | None = None) -> bool:
        """Frames out of `data` into `_ready`; False (and `lost`) when they are not rank 0's
        protocol: no verdict will come from it."""
        try:
            messages = self._reader.feed(data, most)
        except LinkError:
            self.lost = True
            return False
        if self.joined and not all(_is_verdict(m) for m in messages):
            self.lost = True
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

    def wait_closed(self, timeout_s: float) -> bool:
        """Wait (bounded) for rank 0 to close the link, which it does by exiting."""
        deadline = time.monotonic() + timeout_s
        while not self.lost and (remaining := deadline - time.monotonic()) > 0:
            self._read(remaining)
        return self.lost

    def wait_hung_up(self, timeout_s: float) -> bool:
        """Wait (bounded) for rank 0's end of the link to close, without reading from it: safe
        beside the main thread's reads."""
        poller = select.poll()
        try:
            poller.register(self._conn.fileno(), select.POLLRDHUP)
        except ValueError:  # closed here already
            return True
        events = poller.poll(max(timeout_s, 0.0) * 1000)
        return any(mask & (select.POLLRDHUP | select.POLLHUP | select.POLLERR | select.POLLNVAL)
                   for _, mask in events)

    def close(self) -> None:
        self._conn.close()
