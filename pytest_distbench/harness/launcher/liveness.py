"""Which launched ranks are gone, seen through the launcher's store and this host's processes.

The per-test outcomes and verdicts travel through the store, which does not say when a client
went away. So each rank's heartbeat thread, every BEAT_S, bumps the rank's counter in the store
and looks whether the ranks it waits on (`expect`) are still there: a rank on this host by its
process (gone or a zombie: dead), any rank by its heartbeat (silent for SILENT_S: dead; a rank
whose heartbeat thread cannot run that long, a body holding the GIL in C, is taken for dead
too). For a rank that is gone it puts a marker where that rank would have answered, which
wakes the waiting thread: the wait itself is one store wait, with no timed slices (a store
wait that times out makes torch print a warning). A launcher that stops the run at a death
(torchrun, srun -K, mpirun) tells every rank sooner still, through its SIGTERM (hang.py).
"""

from __future__ import annotations

import atexit
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from ..ranks.leftovers import is_running
from . import wire
from .storechannel import StoreChannel

BEAT_S = 0.5  # how often each rank bumps its heartbeat
SILENT_S = 10.0  # a rank on another host whose heartbeat stopped this long is dead
# The marker put where a rank that is gone would have answered: as posted, and as read back.
GONE_VALUE = {"gone": True}
GONE = json.dumps(GONE_VALUE)
_GONE_BYTES = GONE.encode()


def is_gone(raw: object) -> bool:
    """Whether a key's raw bytes are the marker rather than what the rank posted."""
    return raw == _GONE_BYTES


class Heartbeat:
    """This rank's heartbeat in the store, over a connection of its own (a store client
    serves one request at a time, and the main thread may be blocked in one)."""

    def __init__(self, channel: StoreChannel, rank: int, peers: Peers) -> None:
        self._channel = channel
        self._key = wire.beat(rank)
        self._peers = peers
        self._expected: tuple[list[int], Callable[[int], str]] | None = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="distbench-heartbeat",
                                        daemon=True)
        self._thread.start()
        # Rank 0 beats until it exits (peers on other hosts see it go by the silence). A daemon
        # thread still inside a store call when the interpreter finalizes is cut off mid C++
        # frame, which can abort the process (SIGABRT) after the report is out: atexit runs
        # before that, while threads still run.
        atexit.register(self.stop)

    def expect(self, ranks: list[int], key_of: Callable[[int], str]) -> None:
        """This rank now waits for each of `ranks` to set key_of(rank)."""
        self._expected = (ranks, key_of)

    def expect_nothing(self) -> None:
        self._expected = None

    def _beat(self) -> None:
        while True:
            try:
                self._channel.add(self._key, 1)
                self._mark_the_gone()
            except Exception:  # noqa: BLE001 - the store is gone: nothing left to beat for
                return
            if self._stopped.wait(BEAT_S):
                return

    def _mark_the_gone(self) -> None:
        expected = self._expected
        if expected is None:
            return
        ranks, key_of = expected
        waiting = [r for r in ranks if not self._channel.has(key_of(r))]
        for r in self._peers.gone(self._channel, waiting):
            # Only where the rank has not answered meanwhile (it may answer, then die).
            self._channel.mark(key_of(r), GONE)

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(BEAT_S + 1.0)


class Peers:
    """The other ranks' processes (those on this host) and heartbeats."""

    def __init__(self, pids: dict[int, int]) -> None:
        self.pids = pids  # rank -> process id, for the ranks on this host
        self._heard: dict[int, tuple[int, float]] = {}  # rank -> (beat, when it changed)

    def gone(self, channel: StoreChannel, ranks: list[int], silent_s: float = SILENT_S
             ) -> list[int]:
        """Those of `ranks` that are gone: their process ended, or their heartbeat has been
        silent for `silent_s`."""
        found = []
        now = time.monotonic()
        for r in ranks:
            if r in self.pids and not is_running(self.pids[r]):
                found.append(r)
                continue
            beat = channel.add(wire.beat(r), 0)
            last = self._heard.get(r)
            if last is None or last[0] != beat:
                self._heard[r] = (beat, now)
            elif now - last[1] >= silent_s:
                found.append(r)
        return found


def same_host_pids(hosts: dict[int, str], pids: dict[int, Any], here: str, rank: int,
                   own_pid: int) -> dict[int, int]:
    """The process ids of the other ranks on this host (none where the ranks' process ids
    are not their own: containers that share a host name, each with its own pid space)."""
    mine = {r: p for r, p in pids.items() if hosts.get(r) == here and isinstance(p, int)}
    if mine.get(rank) != own_pid:
        return {}
    return {r: p for r, p in mine.items() if r != rank}
