"""Capture inside a process of a launch wrapped by `pytest-distbench capture` (boot/ starts
it): the capture begins when the process group is initialized and ends after the last step
asked for, at destroy_process_group, or at exit, whichever comes first. A process that ends
with an uncaught exception writes nothing at exit (its peers may never join the trace's
last collectives): the capture ends in one line instead of hanging.

What the command should know of a rank (it started capturing, why it wrote nothing) goes,
a line each, into the claim file the command holds in the output directory (NOTES). That
file's first line is the command's token (TOKEN): a rank writes its notes and its trace only
while the command that launched it still holds the claim with that token, so a rank that
outlived a killed command never writes into the directory, nor into a later capture's there."""

from __future__ import annotations

import atexit
import fcntl
import functools
import os
import sys
from typing import Any

OUT = "DISTBENCH_CAPTURE_OUT"
STEPS = "DISTBENCH_CAPTURE_STEPS"
TOKEN = "DISTBENCH_CAPTURE_TOKEN"  # the command's claim, its first line in NOTES
NOTES = ".capture-claim"  # in OUT: the command's lock, and the ranks' notes to it
CAPTURING = "capturing"


def install(c10d: Any) -> None:
    """Wrap `c10d`'s init_process_group and destroy_process_group (once)."""
    init, destroy = c10d.init_process_group, c10d.destroy_process_group
    state: dict[str, Any] = {}

    @functools.wraps(init)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        result = init(*args, **kwargs)
        if "capture" not in state:
            from .capture import capture

            steps = os.environ.get(STEPS) or None
            # Quiet: the command says why no trace was written, once (from the notes).
            # Without --steps the command leaves out step 0, the program's warm-up.
            state["capture"] = capture(os.environ[OUT], steps=None if steps is None else [
                int(s) for s in steps.split(",")], quiet=True, refused=claim_lost,
                past_warm_up=True).__enter__()
            note(f"rank {c10d.get_rank()}: {CAPTURING}")
            atexit.register(_finish, state)
        return result

    @functools.wraps(destroy)
    def destroy_process_group(group: Any = None) -> Any:
        if group is None:
            _finish(state)
        return destroy(group)

    previous = sys.excepthook

    def excepthook(*exc: Any) -> None:
        state["raised"] = True  # atexit runs after this: the capture is abandoned then
        previous(*exc)

    sys.excepthook = excepthook
    # Patched before torch.distributed's `from .distributed_c10d import *` runs: its names,
    # and every later `from torch.distributed import ...`, are these.
    c10d.init_process_group = init_process_group
    c10d.destroy_process_group = destroy_process_group


def note(line: str) -> None:
    """A line for the command, in its claim file (none outside a capture command, nor once
    the claim is not this process's command's)."""
    try:
        fd = os.open(os.path.join(os.environ[OUT], NOTES), os.O_RDWR | os.O_APPEND)
    except (KeyError, OSError):
        return
    try:
        if _lost(fd) is None:
            os.write(fd, (line.replace("\n", " ") + "\n").encode())
    finally:
        os.close(fd)


def claim_lost() -> str | None:
    """Why the command that launched this process no longer holds its output directory
    (None: it does): it has ended (nothing holds the lock on the claim file), or another
    capture has claimed the directory since (the claim holds another token)."""
    try:
        fd = os.open(os.path.join(os.environ[OUT], NOTES), os.O_RDONLY)
    except (KeyError, OSError):
        return "the capture command's claim file is gone (the command has ended)"
    try:
        return _lost(fd)
    finally:
        os.close(fd)


def _lost(fd: int) -> str | None:
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        pass  # held, as it should be: by this capture's command or by a later one's
    except OSError:
        pass  # a file system without flock: the token alone tells
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return "the capture command has ended (its claim on the directory is free)"
    first = os.pread(fd, 256, 0).split(b"\n", 1)[0].decode(errors="replace")
    if first != os.environ.get(TOKEN):
        return "another capture has claimed the directory since"
    return None


def _finish(state: dict[str, Any]) -> None:
    recorder = state.get("capture")
    if recorder is None:
        return
    import torch.distributed as dist

    if not dist.is_initialized():
        return
    rank = dist.get_rank()
    if state.get("raised") and not recorder.stopped:
        recorder.abandon()
        note(f"rank {rank}: raised; wrote nothing")
        return
    try:
        reason = recorder.finish()  # the same in every rank: the trace's, not the rank's
    except Exception as exc:  # noqa: BLE001 - a peer gone: one line, not a traceback at exit
        reason = (f"rank {rank} could not write its calls ({type(exc).__name__}: "
                  f"{str(exc)[:200]})")
        print(f"pytest-distbench capture: {reason}", file=sys.stderr)
    if reason:
        note(reason)
