"""Capture inside a process of a launch wrapped by `pytest-distbench capture` (boot/ starts
it): the capture begins when the process group is initialized and ends after the last step
asked for, at destroy_process_group, or at exit, whichever comes first."""

from __future__ import annotations

import atexit
import functools
import os
from typing import Any

OUT = "DISTBENCH_CAPTURE_OUT"
STEPS = "DISTBENCH_CAPTURE_STEPS"


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
            state["capture"] = capture(os.environ[OUT], steps=None if steps is None else [
                int(s) for s in steps.split(",")]).__enter__()
            atexit.register(_finish, state)
        return result

    @functools.wraps(destroy)
    def destroy_process_group(group: Any = None) -> Any:
        if group is None:
            _finish(state)
        return destroy(group)

    # Patched before torch.distributed's `from .distributed_c10d import *` runs: its names,
    # and every later `from torch.distributed import ...`, are these.
    c10d.init_process_group = init_process_group
    c10d.destroy_process_group = destroy_process_group


def _finish(state: dict[str, Any]) -> None:
    recorder = state.get("capture")
    if recorder is not None:
        import torch.distributed as dist

        if dist.is_initialized():
            recorder.finish()
