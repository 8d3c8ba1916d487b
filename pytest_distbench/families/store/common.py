"""The one harness every TCPStore benchmark runs through: a server in rank 0, N clients.

As in the study, the server is a ``TCPStore(world_size=N, is_master=True,
wait_for_workers=True)`` and its constructor returns once all N store users are connected;
the server's own client counts as one of them (the study's rank 0), the other N - 1 are
simulated: one thread per client, spread over the ranks (``plan.placement``), so thousands
of clients fit on one machine. Every client keeps its own thread for the whole test because
a store-based barrier needs all N waiting at once.

The server listens on 127.0.0.1 only: rank 0 binds and listens on a loopback socket itself
and hands its descriptor to the store (``master_listen_fd``), so the clients know the port
before the server starts and their connections queue in the backlog from the first moment.

Every store call is bounded by ``StoreConfig.timeout_s``; every thread is joined and every
client dropped before the test returns; a rank that cannot host its part says why (file
descriptors, memory, threads) and every rank fails with that reason. A store that does not
finish a phase within the bound is a measured result (``DidNotComplete``: its record says
so), not a failure of the harness.
"""

from __future__ import annotations

import json
import os
import re
import resource
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from . import plan

HOST = "127.0.0.1"
#: Extra time a join or a crew wait gets beyond the store timeout before it gives up.
JOIN_GRACE_S = 10.0


@dataclass(frozen=True)
class StoreConfig:
    """The family's settings a rank needs (shipped from the controller, picklable)."""

    rounds: int
    timeout_s: float


# What went wrong in a rank, from the least to the most serious: the store timed out (a result),
# the store failed otherwise (a reset after the other side timed out, say), the harness failed.
TIMEOUT, STORE, HARNESS = "timeout", "store", "harness"
_TIMEOUT_TEXT = re.compile(r"time ?out|timed out", re.IGNORECASE)


def failure_kind(exc: BaseException) -> str:
    """TIMEOUT for a store call that ran past its bound (torch: DistStoreError 'wait timeout
    after 120000ms', 'Timed out after 121 seconds waiting for clients', DistNetworkError
    'timed out ... trying to connect'), STORE for any other store error, HARNESS for the rest."""
    if not isinstance(exc, dist.DistError):
        return HARNESS
    return TIMEOUT if _TIMEOUT_TEXT.search(str(exc)) else STORE


def raise_nofile() -> dict[str, int]:
    """Raise this process's RLIMIT_NOFILE soft limit to its hard limit; say what it was."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    new_soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return {"nofile_before": soft, "nofile_soft": new_soft, "nofile_hard": hard}


def open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def available_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def thread_names() -> list[str]:
    names = []
    try:
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
    except OSError:
        pass
    return names


class Crew:
    """One thread per simulated client; each runs the task it is given on its own slot.

    Threads are started once and reused for every phase (connect, barrier rounds, ops), so
    a phase costs a wake-up, not a thread start.
    """

    def __init__(self, ids: range) -> None:
        self.ids = ids
        self.clients: list[Any] = [None] * len(ids)
        self.results: list[Any] = [None] * len(ids)
        self.errors: dict[int, str] = {}
        self.kinds: dict[int, str] = {}  # failure_kind of each error
        self._lock = threading.Lock()
        self._go = threading.Condition(self._lock)
        self._done = threading.Condition(self._lock)
        self._generation = 0
        self._task: Callable[[int], Any] | None = None
        self._pending = 0
        self._stop = False
        self.threads: list[threading.Thread] = []
        previous = threading.stack_size(plan.THREAD_STACK_BYTES)
        try:
            for slot in range(len(ids)):
                thread = threading.Thread(target=self._main, args=(slot,), daemon=True,
                                          name=f"store-client-{ids[slot]}")
                thread.start()
                self.threads.append(thread)
        except RuntimeError as exc:
            self.close(JOIN_GRACE_S)
            raise RuntimeError(
                f"could start only {len(self.threads)} of {len(ids)} client threads ({exc}): "
                "the thread limit (ulimit -u, kernel.threads-max) or memory ran out") from None
        finally:
            threading.stack_size(previous)

    def _main(self, slot: int) -> None:
        seen = 0
        while True:
            with self._lock:
                while self._generation == seen and not self._stop:
                    self._go.wait()
                if self._stop:
                    return
                seen, task = self._generation, self._task
            try:
                result = task(slot)
                error = kind = None
            except BaseException as exc:  # noqa: BLE001 - reported per client, never lost
                result, error, kind = None, f"{type(exc).__name__}: {exc}", failure_kind(exc)
            with self._lock:
                self.results[slot] = result
                if error is not None:
                    self.errors[slot] = error
                    self.kinds[slot] = kind
                self._pending -= 1
                if self._pending == 0:
                    self._done.notify_all()

    def start(self, task: Callable[[int], Any]) -> None:
        with self._lock:
            self._task = task
            self.results = [None] * len(self.ids)
            self.errors = {}
            self.kinds = {}
            self._pending = len(self.ids)
            self._generation += 1
            self._go.notify_all()

    def worst(self) -> str:
        """The most serious kind among the errors of the last task."""
        return _worst(self.kinds.values())

    def wait(self, timeout_s: float) -> bool:
        """True when every thread finished the task; False if some had not by the deadline."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._pending > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._done.wait(remaining)
        return True

    def close(self, timeout_s: float) -> list[str]:
        """Stop every thread, drop every client (closing its socket); names still running."""
        with self._lock:
            self._stop = True
            self._go.notify_all()
        deadline = time.monotonic() + timeout_s
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self.clients = [None] * len(self.ids)
        return [t.name for t in self.threads if t.is_alive()]


class Server:
    """Rank 0's loopback listening socket, then the TCPStore server built on it."""

    def __init__(self, clients: int) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((HOST, 0))
        # Listening before the store starts: early connects wait in the backlog instead of
        # being refused and retried with the client's back-off.
        self.sock.listen(max(128, clients))
        self.port: int = self.sock.getsockname()[1]
        self.store: Any = None
        self.listen = f"{HOST} (listen fd)"
        self.thread = ""

    def start(self, clients: int, backend: str, timeout_s: float) -> float:
        """Construct the server store; the seconds until every client was connected."""
        before = set(thread_names())
        use_libuv = backend == "libuv"
        fd = self.sock.detach()
        start = time.perf_counter()
        try:
            self.store = dist.TCPStore(HOST, self.port, clients, True, timedelta(
                seconds=timeout_s), wait_for_workers=True, master_listen_fd=fd,
                use_libuv=use_libuv)
        except NotImplementedError:
            # Older torch: libuv refuses a listen fd. It then binds the port itself, on every
            # interface; the record says so.
            _close_if_ours(fd, self.port)
            self.listen = "all interfaces (this torch's libuv refuses a listen fd)"
            start = time.perf_counter()
            self.store = dist.TCPStore(HOST, self.port, clients, True, timedelta(
                seconds=timeout_s), wait_for_workers=True, use_libuv=use_libuv)
        except BaseException:
            _close_if_ours(fd, self.port)
            raise
        elapsed = time.perf_counter() - start
        self.thread = ",".join(sorted(set(thread_names()) - before)) or "?"
        return elapsed

    @property
    def backend(self) -> str:
        """The backend the server runs, as the store itself reports it."""
        return "libuv" if self.store.libuvBackend else "legacy"

    def close(self) -> None:
        self.store = None
        if self.sock.fileno() >= 0:
            self.sock.close()


def _close_if_ours(fd: int, port: int) -> None:
    # Only close the descriptor if it is still our listening socket: after a failed
    # constructor it may already be closed and its number reused by a client's socket.
    try:
        probe = socket.socket(fileno=fd)
    except OSError:
        return
    try:
        ours = probe.getsockname() == (HOST, port)
    except OSError:
        ours = False
    if ours:
        probe.close()
    else:
        probe.detach()


class Exchange:
    """Small JSON values shared between the ranks through the world's store."""

    def __init__(self, tcp_store: Any, rank: int, world_size: int) -> None:
        self.store, self.rank, self.world_size = tcp_store, rank, world_size

    def all(self, key: str, value: Any) -> list[Any]:
        self.store.set(f"{key}/{self.rank}", json.dumps(value))
        return [json.loads(self.store.get(f"{key}/{r}")) for r in range(self.world_size)]

    def from_server(self, key: str, value: Any = None) -> Any:
        if self.rank == plan.SERVER_RANK:
            self.store.set(key, json.dumps(value))
            return value
        return json.loads(self.store.get(key))


class StoreFailure(RuntimeError):
    pass


class DidNotComplete(StoreFailure):
    """A phase the store did not finish within the store timeout, with nothing but store
    errors on any rank: a measured result (record_incomplete), not a failure of the harness."""

    def __init__(self, bound_s: float, what: str, reason: str) -> None:
        super().__init__(reason)
        self.bound_s, self.what, self.reason = bound_s, what, reason
        self.facts: dict[str, Any] = {}  # record_facts of the store, set on the way out


def _worst(kinds: Any) -> str:
    order = (TIMEOUT, STORE, HARNESS)
    return max(kinds, key=order.index, default=TIMEOUT)


def agree(exchange: Exchange, key: str, problem: str | None, kind: str = HARNESS,
          bound_s: float | None = None) -> None:
    """Every rank shares its problem (or None) and its failure_kind; every rank raises if any
    rank has one: DidNotComplete when some rank's store timed out within `bound_s` and no
    rank's harness failed (the others' store errors follow from it: a client reset by a
    server that gave up), StoreFailure otherwise."""
    shared = [(p, k) for p, k in exchange.all(key, [problem, kind]) if p]
    if not shared:
        return
    reason = "; ".join(p for p, _ in shared)
    kinds = {k for _, k in shared}
    if bound_s is not None and TIMEOUT in kinds and HARNESS not in kinds:
        raise DidNotComplete(bound_s, key.split("/")[0], reason)
    raise StoreFailure(reason)


@dataclass
class SimulatedStore:
    """A running simulated store: what the members measure with."""

    clients: int
    requested: str
    config: StoreConfig
    rank: int
    world_size: int
    exchange: Exchange
    group: Any
    placement: plan.Placement
    limits: dict[str, int]
    crew: Crew | None = None
    server: Server | None = None
    init_s: float = 0.0
    connect_s: list[float] = field(default_factory=list)  # every client's, on every rank
    # Per rank: from releasing its client threads to the last one entering its constructor,
    # i.e. the harness's own share of the init time (the wake-up of every thread).
    handoff_s: list[float] = field(default_factory=list)
    peak_fds: int = 0  # most descriptors open in this rank while its clients connected
    facts: dict[str, Any] = field(default_factory=dict)  # rank 0's, shared with all

    def run_phase(self, task: Callable[[Any, int], Any], master_task: Callable[[Any], Any]
                  | None = None, label: str = "phase") -> tuple[list[Any], Any]:
        """Run task(client, id) on every simulated client at once (and master_task on the
        server's client in rank 0's main thread); return this rank's results."""
        crew = self.crew
        if crew is not None:
            crew.start(lambda slot: task(crew.clients[slot], crew.ids[slot]))
        master_result, problem, kinds = None, None, []
        if master_task is not None and self.server is not None:
            try:
                master_result = master_task(self.server.store)
            except Exception as exc:  # noqa: BLE001 - shared with every rank below
                problem = f"rank {self.rank}: the server's own client failed in {label}: {exc}"
                kinds.append(failure_kind(exc))
        if crew is not None:
            if not crew.wait(self.config.timeout_s + JOIN_GRACE_S):
                problem = problem or (f"rank {self.rank}: clients still busy in {label} after "
                                      f"{self.config.timeout_s:g} s")
                kinds.append(TIMEOUT)
            elif crew.errors:
                slot, error = next(iter(sorted(crew.errors.items())))
                problem = problem or (f"rank {self.rank}: {len(crew.errors)} client(s) failed "
                                      f"in {label}, e.g. client {crew.ids[slot]}: {error}")
                kinds.append(crew.worst())
        agree(self.exchange, f"{label}/status", problem, _worst(kinds), self.config.timeout_s)
        return (list(crew.results) if crew else []), master_result


@contextmanager
def simulated_store(distbench: Any, tcp_store: Any, clients: int, backend: str,
                    config: StoreConfig) -> Iterator[SimulatedStore]:
    """Start a server in rank 0 and N - 1 client threads over the ranks; time the start.

    Inside every rank. On exit every client is dropped and every thread joined, the server
    closed last; any failure on any rank fails every rank with the reasons.
    """
    rank, world_size = distbench.rank, distbench.world_size
    exchange = Exchange(tcp_store, rank, world_size)
    limits = raise_nofile()
    here = plan.placement(clients, world_size, rank)
    agree(exchange, "limits", plan.limit_problem(
        clients, world_size, rank, open_fds(), limits["nofile_soft"], available_bytes()))
    sim = SimulatedStore(clients, backend, config, rank, world_size, exchange,
                         distbench.group, here, limits)
    try:
        _start(sim)
        yield sim
    except DidNotComplete as exc:
        # A result: the clients' calls are bounded by the same timeout, so they all return;
        # they are joined as on success, and one that does not is the harness's failure.
        exc.facts = record_facts(sim)
        left = _stop(sim, config.timeout_s + JOIN_GRACE_S)
        if left:
            raise StoreFailure(f"rank {rank}: {exc}; then {len(left)} client threads did not "
                               f"stop within the timeout (e.g. {left[0]})") from None
        raise
    except BaseException:
        # A client stuck in its constructor cannot be interrupted: join briefly and let the
        # failed test's world be killed with it; the first failure is the one to report.
        _stop(sim, JOIN_GRACE_S)
        raise
    left = _stop(sim, config.timeout_s + JOIN_GRACE_S)
    if left:
        raise StoreFailure(f"rank {rank}: {len(left)} client threads did not stop within the "
                           f"timeout (e.g. {left[0]})")


def _start(sim: SimulatedStore) -> None:
    problem = None
    try:
        if sim.placement.count:
            sim.crew = Crew(sim.placement.ids)
        if sim.rank == plan.SERVER_RANK:
            sim.server = Server(sim.clients)
    except (OSError, RuntimeError) as exc:
        problem = f"rank {sim.rank}: {exc}"
    agree(sim.exchange, "setup", problem)
    port = sim.exchange.from_server("port", sim.server.port if sim.server else None)
    timeout = timedelta(seconds=sim.config.timeout_s)

    entered: list[float] = [0.0] * sim.placement.count

    def connect(slot: int) -> float:
        began = entered[slot] = time.perf_counter()
        client = dist.TCPStore(HOST, port, sim.clients, False, timeout, wait_for_workers=True)
        elapsed = time.perf_counter() - began
        sim.crew.clients[slot] = client
        return elapsed

    # Everyone starts together, as the study's ranks do; the clock runs on the server.
    dist.barrier(group=sim.group)
    released = time.perf_counter()
    if sim.crew is not None:
        sim.crew.start(connect)
    problem = None
    kinds = []
    facts: dict[str, Any] = {}
    if sim.server is not None:
        try:
            sim.init_s = sim.server.start(sim.clients, sim.requested, sim.config.timeout_s)
            facts = {"server_backend": sim.server.backend, "server_thread": sim.server.thread,
                     "server_listen": sim.server.listen}
            if sim.init_s > sim.config.timeout_s:
                # TCPStore's own wait does not honour a bound this short (its errors say "after
                # 1 seconds" for 1 ms): past the timeout is not within it, whoever noticed.
                problem = (f"the server saw all {sim.clients} clients only after "
                           f"{sim.init_s:.3g} s, past the {sim.config.timeout_s:g} s timeout")
                kinds.append(TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - shared with every rank below
            problem = (f"the server did not see all {sim.clients} clients within "
                       f"{sim.config.timeout_s:g} s: {exc}")
            kinds.append(failure_kind(exc))
    if sim.crew is not None:
        done, peak = _wait_watching_fds(sim.crew, sim.config.timeout_s + JOIN_GRACE_S)
        sim.peak_fds = peak
        if not done:
            problem = problem or f"rank {sim.rank}: clients still connecting after the timeout"
            kinds.append(TIMEOUT)
        elif sim.crew.errors:
            slot, error = next(iter(sorted(sim.crew.errors.items())))
            problem = problem or (
                f"rank {sim.rank}: {len(sim.crew.errors)} of {sim.placement.count} clients "
                f"could not connect, e.g. client {sim.crew.ids[slot]}: {error.splitlines()[0]}")
            kinds.append(sim.crew.worst())
        soft = sim.limits["nofile_soft"]
        if problem and peak >= soft - max(plan.FD_MARGIN, soft // 50):
            problem += (f" -- the descriptor limit was nearly reached (peak {peak} open "
                        f"of {soft}): while its reverse lookup is pending a "
                        "connecting client also holds a resolver socket; use more ranks "
                        "(--world-size) or raise the hard limit")
            kinds.append(HARNESS)  # the machine's limit, not the store's speed
    agree(sim.exchange, "connect/status", problem, _worst(kinds), sim.config.timeout_s)
    mine = [t for t in (sim.crew.results if sim.crew else []) if t is not None]
    times = sim.exchange.all("connect/times", mine)
    sim.connect_s = [t for per_rank in times for t in per_rank]
    handoff = max(entered) - released if entered else 0.0
    sim.handoff_s = sim.exchange.all("connect/handoff", handoff)
    sim.facts["peak_fds"] = sim.exchange.all("connect/peak_fds", sim.peak_fds)
    sim.facts = dict(sim.exchange.from_server("facts", facts), **sim.facts)
    sim.facts["limits"] = sim.exchange.all("limits/values", sim.limits)
    sim.init_s = sim.exchange.from_server("init_s", sim.init_s)


def _wait_watching_fds(crew: Crew, timeout_s: float) -> tuple[bool, int]:
    """Wait for the crew's task; the most descriptors this process had open meanwhile."""
    deadline = time.monotonic() + timeout_s
    peak = open_fds()
    while True:
        if crew.wait(min(1.0, max(0.0, deadline - time.monotonic()))):
            return True, max(peak, open_fds())
        peak = max(peak, open_fds())
        if time.monotonic() >= deadline:
            return False, peak


def _stop(sim: SimulatedStore, join_s: float) -> list[str]:
    """Drop the clients, join the threads, close the server; the threads still running."""
    left = sim.crew.close(join_s) if sim.crew else []
    sim.crew = None
    # Clients first, the server last: a server that goes first turns every client's close
    # into a connection reset.
    try:
        dist.barrier(group=sim.group)
    finally:
        if sim.server is not None:
            sim.server.close()
            sim.server = None
    return left


def record_facts(sim: SimulatedStore) -> dict[str, Any]:
    """Figures every store record carries: what ran, how many, where, under which limits."""
    limits = sim.facts.get("limits", [])
    return {
        "clients": sim.clients,
        "requested_backend": sim.requested,
        "server_backend": sim.facts.get("server_backend"),
        "server_thread": sim.facts.get("server_thread"),
        "server_listen": sim.facts.get("server_listen"),
        "client_ranks": plan.client_ranks(sim.world_size),
        "clients_per_rank": [plan.placement(sim.clients, sim.world_size, r).count
                             for r in range(sim.world_size)],
        "nofile_soft": [lim["nofile_soft"] for lim in limits],
        "nofile_hard": [lim["nofile_hard"] for lim in limits],
        "nofile_before": [lim["nofile_before"] for lim in limits],
        "init_s": sim.init_s,
        "handoff_s": sim.handoff_s,
        "peak_fds": sim.facts.get("peak_fds"),
    }


def record_incomplete(distbench: Any, family: str, exc: DidNotComplete,
                      name: str | None = None, **figures: Any) -> None:
    """The record of a phase the store did not finish within the timeout: its one sample is
    the bound, its row says 'did not complete in N s' and why (docs/store.md)."""
    figures = dict(exc.facts, did_not_complete=exc.what, **figures)
    distbench.record([exc.bound_s], family=family, name=name, figures=figures,
                     incomplete=(exc.bound_s, exc.reason))


def store_config(config: Any, node: Any) -> StoreConfig:
    """The family's settings of one test, as the controller resolved them."""
    from pytest_distbench.settings import of_test

    settings = of_test(config, node)
    return StoreConfig(rounds=settings.store_rounds, timeout_s=settings.store_timeout)
