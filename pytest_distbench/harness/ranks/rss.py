"""A rank's resident-memory high-water mark over one measurement.

Linux keeps the peak RSS of a process (VmHWM in /proc/self/status) and lets the process reset
it to the current RSS by writing "5" to /proc/self/clear_refs (Linux >= 4.0; this only resets
the counter, it walks no page tables). So the peak during a measurement costs two small file
writes/reads outside the timed loop and no sampling thread, and it cannot miss a short spike.
Where the reset is refused, the peak falls back to the process lifetime (getrusage).
"""

from __future__ import annotations

import os
import resource

_CLEAR_REFS = "/proc/self/clear_refs"
_STATUS = "/proc/self/status"
# (pid, fd) of this process's clear_refs, kept open: the reset runs at every test's start in
# every rank, and opening the file was most of its cost. The pid guards against a forked
# child writing to its parent's file (/proc/self is resolved when the file is opened).
_clear_refs: tuple[int, int] | None = None


def reset_peak() -> bool:
    """Start a new high-water mark at the current RSS; False where the kernel refuses."""
    global _clear_refs
    try:
        if _clear_refs is None or _clear_refs[0] != os.getpid():
            _clear_refs = (os.getpid(), os.open(_CLEAR_REFS, os.O_WRONLY | os.O_CLOEXEC))
        os.write(_clear_refs[1], b"5")
        return True
    except OSError:
        return False


def peak_bytes() -> int | None:
    """The RSS high-water mark since the last reset_peak(), in bytes."""
    try:
        with open(_STATUS) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # the kernel writes kB (KiB)
    except (OSError, ValueError, IndexError):
        pass
    try:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    except (OSError, ValueError):
        return None

