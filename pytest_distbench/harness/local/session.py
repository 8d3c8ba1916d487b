"""Local mode's session: the rendezvous store, the pool of worlds, one test in its world."""

from __future__ import annotations

import multiprocessing
import multiprocessing.util
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TypeVar

import pytest

from ...results.document.io import sigterm_interrupts
from ...settings import Settings
from ..controller.live import LivePrinter
from ..controller.outcome import judge, prepare
from ..controller.points import Point
from ..controller.revisits import Revisits
from ..controller.session import Session
from ..wire import RunTest
from .limits import FORCE_HINT, oversubscription, oversubscription_line, start_problem
from .netns import PrivateNetwork
from .stale_folders import hold_until_exit, make_capture_dir, remove_stale_folders
from .world import World, WorldKey, WorldStartError

# Idle worlds are kept for reuse; past this many ranks the least recently used go first.
MAX_LIVE_RANKS = 32
START_TIMEOUT_S = 120.0
T = TypeVar("T")


class LocalSession(Session):
    def __init__(self, force: bool = False, private_network: bool = False,
                 revisits: int = 5) -> None:
        """`private_network`: the worlds live in a network namespace of their own
        (netns.py); raises netns.NamespaceUnavailable where the machine does not allow one.
        `revisits`: per group (controller/revisits.py)."""
        super().__init__()
        self.network = PrivateNetwork() if private_network else None
        self._sigterm: ExitStack | None = None
        self.force = force  # --distbench-force: start worlds that look too large for the machine
        self.ranks_announced = 0  # the most ranks an oversubscription warning has named
        self.worlds: dict[WorldKey, World] = {}
        # A/B mode: the multiprocessing context per variant whose ranks come from another
        # forkserver (harness/ab/); a key's variant not here uses the default forkserver.
        self.contexts: dict[str, multiprocessing.context.BaseContext] = {}
        self._store: Any = None
        self._capture_dir: Path | None = None
        self._worlds_started = 0
        self.revisits = Revisits(revisits)
        remove_stale_folders()  # what sessions killed by SIGKILL left in the temporary directory
        # Held while this session lives: its folders are not stale (stale_folders.py). The
        # forkserver's socket goes in multiprocessing's folder of this process, which its exit
        # handler removes after the session: held until then.
        hold_until_exit(Path(multiprocessing.util.get_temp_dir()))
        self._owner_locks: list[int | None] = []

    # -- worlds -------------------------------------------------------------------------------

    def world(self, key: WorldKey, timeout_s: float) -> World:
        world = self.worlds.pop(key, None)
        if world is not None and world.alive():
            self.worlds[key] = world  # re-insert: dict order is the LRU order
            return world
        if world is not None:
            world.kill()
        self._make_room(key.world_size)
        # Measured after _make_room: what the stopped worlds held is free again.
        problem = None if self.force else start_problem(key.world_size)
        if problem:
            raise WorldStartError(f"{problem}; {FORCE_HINT}")
        store = self._rendezvous_store()
        self._worlds_started += 1
        world = World(
            key,
            store_host="127.0.0.1",
            store_port=store.port,
            store_prefix=f"world{self._worlds_started}/",
            capture_dir=self._captures(),
            timeout_s=timeout_s,
            env=self.rank_env,
            context=self.contexts.get(key.variant),
            enter=None if self.network is None else self.network.run,
        )
        world.start(START_TIMEOUT_S)
        self.world_starts.append((str(key), world.start_s))
        self.add_rank_infos(world.info.values())
        self.worlds[key] = world
        return world

    def retire(self, world: World) -> None:
        world.kill()
        if self.worlds.get(world.key) is world:
            del self.worlds[world.key]

    def _make_room(self, ranks: int) -> None:
        while self.worlds and sum(w.key.world_size for w in self.worlds.values()) + ranks > (
            MAX_LIVE_RANKS
        ):
            oldest = next(iter(self.worlds))
            self.worlds.pop(oldest).stop()

    def _rendezvous_store(self) -> Any:
        if self._store is None:
            from .loopback import loopback_store

            # Port 0: the kernel picks a free port, so parallel sessions never collide; bound to
            # 127.0.0.1 only (a bare TCPStore master listens on every interface).
            self._store = self.inside(loopback_store)
        return self._store

    def inside(self, function: Callable[..., T], *args: Any) -> T:
        """`function(*args)` where the worlds' network is: what it binds, connects or starts
        (a forkserver) stays there."""
        if self.network is None:
            return function(*args)
        return self.network.run(function, *args)

    def _captures(self) -> Path:
        if self._capture_dir is None:
            self._capture_dir, lock = make_capture_dir()
            self._owner_locks.append(lock)
        else:
            # Made again where a cleaner (or a test body) removed it: a rank that cannot open
            # its log dies before it can say why.
            self._capture_dir.mkdir(mode=0o700, exist_ok=True)
        return self._capture_dir

    def announce_oversubscription(self, world_sizes: Any) -> list[str]:
        """The warning line when ranks outnumber cores, once per session, unless an earlier
        one named as many ranks."""
        facts = oversubscription(world_sizes)
        if facts is None or facts["ranks"] <= self.ranks_announced:
            return []
        self.ranks_announced = facts["ranks"]
        return [oversubscription_line(facts)]

    def interrupt_on_sigterm(self) -> None:
        """SIGTERM (a CI runner's cancel, `timeout`, `kill`) ends the session as Ctrl-C does:
        pytest's interruption, then the same teardown (worlds, rank logs, the forkserver's
        folder). Left alone where someone else already handles SIGTERM."""
        self._sigterm = ExitStack()
        self._sigterm.enter_context(sigterm_interrupts())

    def close(self) -> None:
        """Stop every world; kill what does not stop. Safe to call more than once."""
        if self._sigterm is not None and threading.current_thread() is threading.main_thread():
            self._sigterm.close()
            self._sigterm = None
        for world in list(self.worlds.values()):
            world.stop(timeout_s=5.0)
        self.worlds.clear()
        self._store = None
        if self.network is not None:
            self.network.close()
            self.network = None
        if self._capture_dir is not None:
            shutil.rmtree(self._capture_dir, ignore_errors=True)
            self._capture_dir = None
        for lock in self._owner_locks:
            if lock is not None:
                os.close(lock)
        self._owner_locks.clear()

    def environment_facts(self) -> dict[str, Any]:
        facts = {"launcher": {"name": "local", "hosts": [socket.gethostname()]},
                 **self.extra_facts}
        over = oversubscription(record["world_size"] for record in self.records)
        if over:
            facts["oversubscribed"] = over
        return facts

    # -- tests --------------------------------------------------------------------------------

    def run_item(self, item: pytest.Function, settings: Settings, key: WorldKey, *,
                 task: RunTest | None = None, fresh_world_after: bool = False,
                 keep: bool = True) -> list[Point]:
        """runs.Runner in a local world. `fresh_world_after` matters here: torch's RRef
        context stays bound to a process's first RPC agent, so a process that ran an RPC test
        cannot host another one that uses RRefs. A key's variant names the A/B variant."""
        # A test of its own (not an A/B variant, not a revisit) takes part in the revisits.
        own = keep and not key.variant
        if task is None:
            task = prepare(item, settings,
                           self.revisits.sampling_for(item, settings) if own else None)
        try:
            world = self.world(key, settings.timeout)
        except WorldStartError as exc:
            variant = f"{key.variant} " if key.variant else ""
            pytest.fail(f"could not start the {variant}world: {exc}", pytrace=False)
        live = LivePrinter(item.config, shown=keep)
        began = time.monotonic()
        result = world.run(task, settings.timeout, on_progress=live)
        seconds = time.monotonic() - began
        if not result.clean:
            self.retire(world)
        elif fresh_world_after:
            world.stop()
            self.retire(world)
        # A/B mode merges its variants' rounds and keeps the result itself.
        points = judge(item, key, result, settings, variant=key.variant,
                       live_reports=live.reports, keep=self.points if own else None)
        if own:
            self.revisits.note(item, settings, task, key, points, fresh_world_after, seconds)
        live.finish(self.view(points))  # the interval known so far, as -v and the gate
        return points
