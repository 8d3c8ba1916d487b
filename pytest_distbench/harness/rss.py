"""A rank's resident-memory high-water mark over one measurement.

Linux keeps the peak RSS of a process (VmHWM in /proc/self/status) and lets the process reset
it to the current RSS by writing "5" to /proc/self/clear_refs (Linux >= 4.0; this only resets
the counter, it walks no page tables). So the peak during a measurement costs two small file
writes/reads outside the timed loop and no sampling thread, and it cannot miss a short spike.
Where the reset is refused, the peak falls back to the process lifetime (getrusage).
"""

from __future__ import annotations

import resource

_CLEAR_REFS = "/proc/self/clear_refs"
_STATUS = "/proc/self/status"


def reset_peak() -> bool:
    """Start a new high-water mark at the current RSS; False where the kernel refuses."""
    try:
        with open(_CLEAR_REFS, "w") as f:
            f.write("5")
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

