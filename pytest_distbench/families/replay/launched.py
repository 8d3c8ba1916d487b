"""Capture inside a process of a launch wrapped by `pytest-distbench capture` (boot/ starts
it): the capture begins when the process group is initialized and ends after the last step
asked for, at destroy_process_group, or at exit, whichever comes first. A process that ends
with an uncaught exception writes nothing at exit (its peers may never join the trace's
last collectives): the capture ends in one line instead of hanging.

What the command should know of a rank (it started capturing, why it wrote nothing) goes,
a line each, into the claim file the command holds in the output directory (NOTES)."""

from __future__ import annotations

import atexit
import functools
import os
import sys
from typing import Any

OUT = "DISTBENCH_CAPTURE_OUT"
STEPS = "DISTBENCH_CAPTURE_STEPS"
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
            state["capture"] = capture(os.environ[OUT], steps=None if steps is None else [
                int(s) for s in steps.split(",")], quiet=True).__enter__()
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
    """A line for the command, in its claim file (none outside a capture command)."""
    try:
        fd = os.open(os.path.join(os.environ[OUT], NOTES), os.O_WRONLY | os.O_APPEND)
    except (KeyError, OSError):
        return
    try:
        os.write(fd, (line.replace("\n", " ") + "\n").encode())
    finally:
        os.close(fd)


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
