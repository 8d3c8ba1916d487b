"""Local mode: does a world fit this machine? Memory, tasks and open files, before a rank starts.

A world too large for the machine fails late and badly: `--world-size=100000` forked ranks
until the machine ran out of memory and the session ended in a raw EOFError. The request is
checked when pytest starts (the command line and ini), again once the tests are collected
(markers may ask for other sizes), and before each world starts (what is free then);
`--distbench-force` starts it anyway. Under a launcher the launcher started the ranks and none
of this applies.

The per-rank figures were measured on the 2-core, 24 GiB development VM with torch 2.13 (CPU);
docs/limits.md has the commands. They are estimates, not a promise: a GPU rank holds more.

More ranks than cores is allowed but said once (header and results environment): the figures
then measure the scheduler as much as the communication.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from typing import Any

import pytest

from ... import units
from ...settings import BY_NAME, PARAMETRIZING, Settings, choose, of_session
from ..controller.outcome import WORLD_SIZE_ARG
from ..ranks.pressure import memory_available

MIB = 1 << 20
# What one rank may come to hold. A freshly forked idle rank shares its ~150 MiB of anonymous
# memory with the forkserver (7 MiB private), but gc passes and reference-count writes copy
# those pages as it runs (46 MiB private after one gc.collect(), 52 MiB after the collectives
# and p2p suites); the anonymous resident size is the bound.
RANK_MEMORY = 150 * MIB
# Buffers of one point per rank, in units of its size: input, output and the result check's
# scratch (all_gather and reduce_scatter at 64 MiB peaked 2.7x their size above an idle rank).
BUFFERS_PER_POINT = 3
RANK_THREADS = 5  # an idle gloo rank's threads
RANK_FILES = 16  # an idle rank's descriptors besides one socket per peer (gloo: a full mesh)
CONTROLLER_FILES_PER_RANK = 5  # pipes and capture files the controller keeps per rank
FORCE_HINT = "--distbench-force starts it anyway"


@dataclass(frozen=True)
class Machine:
    """What the machine has left now; None where it cannot be read (the check is skipped)."""

    memory_available: int | None  # bytes (MemAvailable)
    tasks_left: int | None  # more processes and threads the kernel and RLIMIT_NPROC allow
    files_limit: int | None  # soft RLIMIT_NOFILE: a rank's and the controller's
    files_open: int  # the controller's now


def probe() -> Machine:
    return Machine(memory_available(), _tasks_left(), _files_limit(), _files_open())


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _tasks_now() -> int | None:
    """Every task (thread) on the machine: the denominator of /proc/loadavg's 4th field."""
    try:
        with open("/proc/loadavg") as f:
            return int(f.read().split()[3].split("/")[1])
    except (OSError, ValueError, IndexError):
        return None


def _user_tasks(uid: int) -> int:
    """Tasks of this real user, which is what RLIMIT_NPROC counts."""
    count = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            if int(fields["Uid"].split()[0]) == uid:
                count += int(fields["Threads"])
        except (OSError, ValueError, KeyError, IndexError):
            continue  # gone, or not ours to read
    return count


def _tasks_left() -> int | None:
    tasks = _tasks_now()
    caps = [_read_int("/proc/sys/kernel/pid_max"), _read_int("/proc/sys/kernel/threads-max")]
    left = [cap - tasks for cap in caps if cap is not None and tasks is not None]
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft != resource.RLIM_INFINITY:
        left.append(soft - _user_tasks(os.getuid()))
    return min(left) if left else None


def _files_limit() -> int | None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def _files_open() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


# -- what does not fit -------------------------------------------------------------------------

def memory_needed(world_size: int, nbytes: int = 0) -> int:
    return world_size * (RANK_MEMORY + BUFFERS_PER_POINT * nbytes)


def memory_problem(world_size: int, nbytes: int, machine: Machine) -> str | None:
    """Memory a world of `world_size` ranks, each holding points of `nbytes`, would exceed."""
    needed = memory_needed(world_size, nbytes)
    if machine.memory_available is None or needed <= machine.memory_available:
        return None
    per_rank = units.format_size(RANK_MEMORY)
    if nbytes:
        per_rank += f" + {BUFFERS_PER_POINT} buffers of {units.format_size(nbytes)}"
    return (f"about {units.format_size(needed)} of memory ({per_rank} a rank) and "
            f"{units.format_size(machine.memory_available)} is available")


def world_problems(world_size: int, machine: Machine) -> list[str]:
    """What a world of `world_size` idle ranks would exceed on `machine`; empty if it fits."""
    problems = [p for p in [memory_problem(world_size, 0, machine)] if p]
    threads = world_size * RANK_THREADS
    if machine.tasks_left is not None and threads > machine.tasks_left:
        problems.append(f"{threads} tasks ({RANK_THREADS} threads a rank) and "
                        f"{max(machine.tasks_left, 0)} more may start (pid_max, threads-max, "
                        "ulimit -u)")
    if machine.files_limit is not None:
        rank_files = RANK_FILES + world_size
        controller_files = machine.files_open + CONTROLLER_FILES_PER_RANK * world_size
        if max(rank_files, controller_files) > machine.files_limit:
            problems.append(f"{max(rank_files, controller_files)} open files in one process "
                            f"(a rank keeps a socket per peer, the controller "
                            f"{CONTROLLER_FILES_PER_RANK} files per rank) and ulimit -n is "
                            f"{machine.files_limit}")
    return problems


def _refuse(what: str, problems: list[str]) -> pytest.UsageError:
    return pytest.UsageError(f"{what} does not fit this machine: {'; '.join(problems)}. "
                             f"{FORCE_HINT}.")


def _named(config: pytest.Config, name: str) -> str:
    """How the user asked for a setting: `--world-size=8`, its ini key, or its default."""
    setting = BY_NAME[name]
    text, origin = choose(config, setting)
    if origin == "option":
        return f"{setting.option}={text}"
    return f"ini option {setting.ini}" if origin == "ini" else f"{setting.option} (default)"


def check_request(config: pytest.Config, settings: Settings) -> None:
    """Refuse the command line's (or ini's) world and tensor sizes that cannot fit here."""
    if of_session(config).force:
        return
    machine = probe()
    largest = max(settings.world_size)
    problems = world_problems(largest, machine)
    if problems:
        raise _refuse(f"{_named(config, 'world_size')}: a world of "
                      f"{largest} ranks", problems)
    nbytes = max(settings.tensor_size)
    problem = memory_problem(largest, nbytes, machine)
    if problem:
        raise _refuse(f"{_named(config, 'tensor_size')}: a world of {largest} ranks with points "
                      f"of {units.format_size(nbytes)}", [problem])


_NBYTES = next(s.param for s in PARAMETRIZING if s.name == "tensor_size")


def check_items(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a collected test whose world or buffers cannot fit (markers choose sizes too)."""
    if of_session(config).force:
        return
    machine = probe()
    checked: set[tuple[int, int]] = set()
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        world_size, nbytes = params.get(WORLD_SIZE_ARG), params.get(_NBYTES)
        if not isinstance(nbytes, int) or isinstance(nbytes, bool):
            nbytes = 0  # no size, or one the test made up itself: its buffers are unknown
        if not isinstance(world_size, int) or (world_size, nbytes) in checked:
            continue
        checked.add((world_size, nbytes))
        problems = world_problems(world_size, machine)
        if problems:
            raise _refuse(f"{item.nodeid}: its world of {world_size} ranks", problems)
        problem = memory_problem(world_size, nbytes, machine)
        if problem:
            raise _refuse(f"{item.nodeid}: its world of {world_size} ranks with points of "
                          f"{units.format_size(nbytes)} (--tensor-size)", [problem])


def start_problem(world_size: int) -> str | None:
    """Why a world of `world_size` ranks should not start now, with what is free now."""
    problems = world_problems(world_size, probe())
    if not problems:
        return None
    return f"{world_size} ranks do not fit this machine now: {'; '.join(problems)}"


# -- more ranks than cores ---------------------------------------------------------------------

def usable_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def oversubscription(world_sizes: Any) -> dict[str, int] | None:
    """{"ranks", "cores"} when the largest world has more ranks than this process may use."""
    ranks = max((n for n in world_sizes if isinstance(n, int)), default=0)
    cores = usable_cores()
    return {"ranks": ranks, "cores": cores} if ranks > cores else None


def oversubscription_line(facts: dict[str, int]) -> str:
    plural = "s" if facts["cores"] != 1 else ""
    return (f"distbench: WARNING: {facts['ranks']} ranks on {facts['cores']} usable core{plural}: "
            "ranks outnumber cores, so the figures measure scheduling as much as communication "
            "(recorded as `oversubscribed` in the results environment)")
