"""The arithmetic of a simulated store: who hosts which clients, what that costs in file
descriptors and memory, and the summary of connect times. Pure functions, no torch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pytest_distbench.results.statistics.stats import percentile

#: The rank that runs the TCPStore server (and, as rank 0 of the study, its own client).
SERVER_RANK = 0
#: A connect slower than this counts as a stall (the machine's first-burst stalls are 5-10 s).
SLOW_CONNECT_S = 1.0
#: Descriptors a rank keeps for everything else (pipes, gloo, the world's store, logs).
FD_MARGIN = 64
#: Memory one simulated client may need: its thread's stack as far as it is touched, the
#: TCPStore client object and its socket buffers. Measured well below this (docs/store.md).
BYTES_PER_CLIENT = 256 * 1024
#: Stack reserved per client thread (virtual; only touched pages cost memory).
THREAD_STACK_BYTES = 512 * 1024


@dataclass(frozen=True)
class Placement:
    """The simulated clients one rank hosts: global ids first .. first + count - 1.

    Client 0 is the server's own client (the study's rank 0); clients 1..N-1 are simulated.
    """

    rank: int
    first: int
    count: int

    @property
    def ids(self) -> range:
        return range(self.first, self.first + self.count)


def client_ranks(world_size: int) -> list[int]:
    """Ranks that host simulated clients: all but the server's, unless it is alone.

    Keeping the clients out of the server's process leaves its descriptor limit to the
    server's accepted sockets, which is what bounds N on one machine.
    """
    if world_size < 1:
        raise ValueError(f"world size must be >= 1, got {world_size}")
    return [SERVER_RANK] if world_size == 1 else [r for r in range(world_size) if r != SERVER_RANK]


def placement(clients: int, world_size: int, rank: int) -> Placement:
    """This rank's share of the N - 1 simulated clients, in contiguous blocks of ids."""
    if clients < 1:
        raise ValueError(f"clients must be >= 1, got {clients}")
    hosts = client_ranks(world_size)
    simulated = clients - 1
    if rank not in hosts:
        return Placement(rank, 0, 0)
    i = hosts.index(rank)
    base, extra = divmod(simulated, len(hosts))
    first = 1 + i * base + min(i, extra)
    return Placement(rank, first, base + (1 if i < extra else 0))


def fds_needed(clients: int, world_size: int, rank: int) -> int:
    """Descriptors this rank will open for the simulated store, beyond what it has open.

    The server rank holds one accepted socket per client (N), its listening socket and its
    own client's socket; a client rank one socket per client it hosts.
    """
    need = placement(clients, world_size, rank).count
    if rank == SERVER_RANK:
        need += clients + 2
    return need


def limit_problem(clients: int, world_size: int, rank: int, open_fds: int, soft_limit: int,
                  available_bytes: int | None) -> str | None:
    """Why this rank cannot take its part of N clients, or None if it can."""
    need = fds_needed(clients, world_size, rank)
    if open_fds + need + FD_MARGIN > soft_limit:
        return (f"rank {rank} needs about {open_fds + need + FD_MARGIN} file descriptors for "
                f"{clients} clients ({open_fds} open, {need} for the store, {FD_MARGIN} spare) "
                f"but RLIMIT_NOFILE is {soft_limit} (raised to the hard limit); "
                "raise the hard limit (ulimit -Hn, limits.conf) or use more ranks")
    hosted = placement(clients, world_size, rank).count
    if available_bytes is not None and hosted * BYTES_PER_CLIENT > available_bytes:
        return (f"rank {rank} would need about {hosted * BYTES_PER_CLIENT / 2**20:.0f} MiB for "
                f"{hosted} client threads but only {available_bytes / 2**20:.0f} MiB is "
                "available (MemAvailable)")
    return None


def connect_summary(seconds: Sequence[float], slow_s: float = SLOW_CONNECT_S) -> dict[str, float]:
    """p50, p95 and max of per-client connect times, and how many took longer than slow_s."""
    if not seconds:
        raise ValueError("no connect times")
    ordered = sorted(seconds)
    return {
        "connect_p50_s": percentile(ordered, 50),
        "connect_p95_s": percentile(ordered, 95),
        "connect_max_s": ordered[-1],
        "slow_connects": sum(1 for s in ordered if s > slow_s),
    }


def init_without_stalls(init_s: float, connect_s: Sequence[float],
                        slow_s: float = SLOW_CONNECT_S) -> float:
    """The server's init time with the stalled connects (> slow_s, the resolver's: docs/store.md)
    taken out: the clients start together, so the server would have finished when the slowest
    unstalled client connected, the same time after the slowest client's connect as it did."""
    if not connect_s:
        return init_s
    unstalled = [s for s in connect_s if s <= slow_s]
    slowest = max(connect_s)
    if slowest <= slow_s:
        return init_s
    return max(0.0, init_s - (slowest - (max(unstalled) if unstalled else 0.0)))


def latency_summary(seconds: Sequence[float], wall_s: float) -> dict[str, float]:
    """p50/p95/max of per-operation latencies and the aggregate rate over the wall time."""
    if not seconds:
        raise ValueError("no latencies")
    if wall_s <= 0:
        raise ValueError(f"wall time must be > 0, got {wall_s}")
    ordered = sorted(seconds)
    return {
        "latency_p50_s": percentile(ordered, 50),
        "latency_p95_s": percentile(ordered, 95),
        "latency_max_s": ordered[-1],
        "ops_total": len(ordered),
        "wall_s": wall_s,
        "ops_per_s": len(ordered) / wall_s,
    }
