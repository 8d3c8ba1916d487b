"""Launcher mode's agreement rounds: every rank posts a value, rank 0 decides, all get the
answer. Used where the ranks must act alike before anything runs: the collected items, and
whether a backend can run on every rank."""

from __future__ import annotations

import hashlib
import json
import os
import socket
from collections.abc import Callable
from typing import Any

from ..environment import backends
from . import hang, wire
from .seal import Forged
from .storechannel import StoreChannel

Decide = Callable[[dict[int, Any], list[int]], Any]


class Agreement:
    def __init__(self, channel: StoreChannel, rank: int, world_size: int,
                 timeout_s: float) -> None:
        self.channel = channel
        self.rank = rank
        self.world_size = world_size
        self.timeout_s = timeout_s
        self.hosts: dict[int, str] = {}  # rank -> host, known after the collection round
        self.pids: dict[int, Any] = {}  # rank -> process id, known after the collection round
        self._unavailable: dict[tuple[str, str], str] = {}

    def round(self, name: str, mine: Any, decide: Decide) -> Any:
        """Every rank posts `mine`; rank 0 decides from all of them; every rank gets the
        answer (a rank that gets none in time exits: rank 0 is gone; one that reads a forged
        value too: the ranks could no longer act alike)."""
        self.channel.set(wire.posted(name, self.rank), mine)
        try:
            if self.rank == 0:
                keys = [wire.posted(name, r) for r in range(self.world_size)]
                self.channel.wait(keys, self.timeout_s)
                values = {r: self.channel.get(k) for r, k in enumerate(keys)
                          if self.channel.has(k)}
                missing = [r for r in range(self.world_size) if r not in values]
                self.channel.set(wire.decision(name), decide(values, missing))
            if not self.channel.wait([wire.decision(name)],
                                     self.timeout_s + hang.VERDICT_MARGIN_S):
                hang.exit_now(hang.EXIT_CODE, f"distbench rank {self.rank}: no answer from "
                                              f"rank 0 on {name} within {self.timeout_s:g} s; "
                                              "exiting")
            return self.channel.get(wire.decision(name))
        except Forged as exc:
            hang.exit_now(hang.EXIT_CODE, f"distbench rank {self.rank}: {exc}; exiting")

    def collection(self, ids: list[str]) -> str | None:
        """The error that stops every rank when the ranks collected different items (None
        when they agree); learns every rank's host and process id."""
        self.channel.set(wire.collected(self.rank), ids)
        mine = {"digest": hashlib.sha256(json.dumps(ids).encode()).hexdigest(),
                "count": len(ids), "host": socket.gethostname(), "pid": os.getpid()}

        def decide(values: dict[int, Any], missing: list[int]) -> dict[str, Any]:
            hosts = {str(r): v["host"] for r, v in values.items()}
            pids = {str(r): v["pid"] for r, v in values.items()}
            if missing:
                return {"hosts": hosts, "pids": pids, "error": (
                    f"ranks {missing} did not report their collected tests within "
                    f"{self.timeout_s:g} s: every process the launcher started must run pytest "
                    "with the same arguments (a SLURM batch script must start pytest through "
                    "srun; --distbench-launcher=local ignores the launcher)")}
            differing = [r for r, v in values.items() if v["digest"] != mine["digest"]]
            if not differing:
                return {"hosts": hosts, "pids": pids, "error": None}
            first = differing[0]
            return {"hosts": hosts, "pids": pids, "error": (
                "the ranks collected different tests; every rank must run the same items in "
                f"the same order ({len(differing)} of {self.world_size} ranks differ from rank "
                f"0): {first_difference(ids, self.channel.get(wire.collected(first)), first)}")}

        answer = self.round("collect", mine, decide)
        self.hosts = {int(r): h for r, h in answer["hosts"].items()}
        self.pids = {int(r): p for r, p in answer["pids"].items()}
        return answer["error"]

    def backend_reason(self, backend: str, device_type: str, local_rank: int) -> str:
        """Why this backend cannot run on some rank ("" if it can), agreed once per backend."""
        name = (backend, device_type)
        if name not in self._unavailable:
            # Each rank needs a GPU of its own on its host: cuda:<local rank>.
            mine = backends.unavailable(backend, local_rank + 1) or ""

            def decide(values: dict[int, Any], missing: list[int]) -> str:
                bad = {r: v for r, v in sorted(values.items()) if v}
                if not bad:
                    return ""
                r, reason = next(iter(bad.items()))
                return f"rank {r} ({self.hosts.get(r, '?')}): {reason}" + (
                    f" (and {len(bad) - 1} more ranks)" if len(bad) > 1 else "")

            self._unavailable[name] = self.round(f"backend/{backend}-{device_type}", mine,
                                                 decide)
        return self._unavailable[name]


def first_difference(mine: list[str], theirs: list[str], rank: int) -> str:
    """Where rank `rank`'s collected ids first differ from rank 0's."""
    for i, (a, b) in enumerate(zip(mine, theirs, strict=False)):
        if a != b:
            return f"item {i}: rank 0 has {a!r}, rank {rank} has {b!r}"
    if len(mine) > len(theirs):
        return (f"rank 0 collected {len(mine)} items, rank {rank} {len(theirs)}; "
                f"the first missing on rank {rank} is {mine[len(theirs)]!r}")
    if len(theirs) > len(mine):
        return (f"rank 0 collected {len(mine)} items, rank {rank} {len(theirs)}; "
                f"the first extra on rank {rank} is {theirs[len(mine)]!r}")
    return "the same items (but a different digest)"
