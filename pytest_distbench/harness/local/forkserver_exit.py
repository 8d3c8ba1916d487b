"""Imported only in the forkserver (world.PRELOAD): it ends without the interpreter's teardown.

The forkserver exits when the controller does (its last client gone). Tearing down an
interpreter with torch loaded took it 0.4-0.5 s, during which it outlived the session that
started it. It holds nothing to save: each rank it forked ends with os._exit of its own, and
atexit handlers run last-registered first, so this one, registered after torch's import, runs
before torch's and ends the process (with status 0: nothing reads the forkserver's). A process
forked from the forkserver that exits through atexit (a test body's own os.fork) is left to
its own exit.
"""

from __future__ import annotations

import atexit
import os
import sys

FORKSERVER_PID = os.getpid()


def _exit_now() -> None:
    if os.getpid() != FORKSERVER_PID:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)


atexit.register(_exit_now)
