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
