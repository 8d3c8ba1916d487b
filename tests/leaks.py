"""Finding processes a session under test left behind."""

from __future__ import annotations

import os
from pathlib import Path

TAG_VARIABLE = "DISTBENCH_TEST_TAG"


def processes_with_tag(tag: str) -> list[int]:
    needle = f"{TAG_VARIABLE}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def is_running(pid: int) -> bool:
    """True for a live process; a zombie (dead, waiting to be reaped by init) is not."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
