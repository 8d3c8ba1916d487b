"""What a test body left in its rank, checked before the rank may take another test.

A world is reused from test to test, so whatever a body leaves behind is there for the next
one: a busy thread or child process made every later test in its world 7-18x slower, and a
destroyed process group failed the next test with an error that named neither. Two cases,
two answers:

- a thread or child process still running: the test that left it fails, naming each one (the
  rank kills the children it can, and the world is rebuilt, since a thread cannot be stopped
  from outside);
- the process group destroyed or replaced: the test itself did nothing wrong that a fresh
  world does not undo, so it keeps its outcome and the world is rebuilt before the next test.

Only what Python can see is checked: threads started with `threading` and the rank's own
child processes (a grandchild that its parent left is still in the rank's process group,
which a rebuilt world kills). The check costs a few microseconds when nothing was left.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["GRACE_S", "Snapshot", "snapshot", "left_behind", "process_group_gone",
           "proc_stat", "is_running"]

# What a body just stopped may still need to end (a joined-late thread, a terminated child).
GRACE_S = 1.0
# Whether this system has /proc (a process's state is read there); asked once, not per poll.
HAS_PROC = os.path.isdir("/proc/self")


@dataclass(frozen=True)
class Snapshot:
    """The threads and child processes a rank had before a test body ran."""

    threads: frozenset[threading.Thread]
    children: frozenset[int]


def snapshot() -> Snapshot:
    return Snapshot(frozenset(threading.enumerate()), frozenset(_children()))


def left_behind(before: Snapshot, grace_s: float = GRACE_S) -> list[str]:
    """What the body started and left running, one description each ([] if nothing). Waits up
    to `grace_s` for it to end; the child processes still running after that are killed."""
    deadline = time.monotonic() + grace_s
    threads = _new_threads(before)
    children = _running(_children() - before.children)
    while (threads or children) and time.monotonic() < deadline:
        for thread in threads:
            thread.join(max(0.0, min(0.05, deadline - time.monotonic())))
        if not threads:
            time.sleep(0.02)
        threads = _new_threads(before)
        children = _running(_children() - before.children)
    found = [f"thread {thread.name!r}" + (" (daemon)" if thread.daemon else "")
             for thread in threads]
    for pid in sorted(children):
        found.append(f"child process {pid} ({_command(pid)}, killed)")
        _kill(pid)
    return found


def process_group_gone(group: Any, control: Any) -> str:
    """Why the world's process groups cannot serve another test ("" when they can)."""
    import torch.distributed as dist

    if not dist.is_initialized():
        return "the test destroyed the default process group"
    if dist.group.WORLD is not group:
        return "the test replaced the default process group"
    if control is not group:
        try:
            dist.get_backend(control)
        except (ValueError, RuntimeError):
            return "the test destroyed the harness's gloo control group"
    return ""


def _new_threads(before: Snapshot) -> list[threading.Thread]:
    # A _DummyThread is a native thread (TensorPipe's, gloo's) that once ran Python code: the
    # library that owns it stops it, and threading never forgets it.
    return [t for t in threading.enumerate() if t not in before.threads and t.is_alive()
            and not isinstance(t, threading._DummyThread)]  # noqa: SLF001


def _children() -> set[int]:
    """This process's child processes (each thread's: a child belongs to the thread that
    forked it)."""
    found: set[int] = set()
    try:
        # No child at all, the usual case, in one system call (WNOWAIT: nothing is reaped);
        # the scan below reads a file per thread, ~20 us each.
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return found
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return found
    for task in tasks:
        try:
            listed = Path(f"/proc/self/task/{task}/children").read_text()
            found.update(int(pid) for pid in listed.split())
        except (OSError, ValueError):
            pass  # a thread that ended meanwhile; a kernel without the file
    return found


def _running(pids: set[int]) -> set[int]:
    """Those of `pids` that still run: an exited child not yet reaped is no load."""
    return {pid for pid in pids if is_running(pid)}


def proc_stat(pid: int | None, index: int) -> str | None:
    """Field `index` after the command of /proc/PID/stat (0: state, 1: parent); None when the
    process is gone or there is no /proc."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[index]
    except (OSError, ValueError, IndexError):
        return None


def is_running(pid: int | None) -> bool:
    """Whether the process runs: not gone, not a zombie waiting to be reaped (a launcher
    reaps its dead children late). Without /proc, whether the kernel knows the process."""
    if pid is None:
        return False
    if not HAS_PROC:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return proc_stat(pid, 0) not in (None, "Z", "X")


def _command(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    words = raw.rstrip(b"\0").decode(errors="replace").split("\0")
    text = " ".join(words)
    return text if len(text) <= 80 else text[:77] + "..."


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass  # gone, or reaped by the test's own Popen in another thread
