"""Folders a killed session left in the temporary directory, removed by the next session.

A controller (or an xdist worker) killed by SIGKILL runs no teardown: its rank logs
(`distbench-ranks-*`) and multiprocessing's folder of its forkserver (`pymp-*`) stay. Each
local session holds an flock on an OWNER file in both for its whole life (`hold`; on pymp-*
until its process exits, since multiprocessing removes that folder at exit); a session
that starts removes every such folder of this user whose lock it can take: its owner is gone,
whatever process or network namespace it ran in. A folder without OWNER (another program's,
or one being made) is never touched.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: nothing is locked, nothing removed
    fcntl = None  # type: ignore[assignment]

CAPTURE_PREFIX = "distbench-ranks-"
OWNER = "owner.lock"


def make_capture_dir() -> tuple[Path, int | None]:
    """A new `distbench-ranks-*` folder and the descriptor of its held lock."""
    path = Path(tempfile.mkdtemp(prefix=CAPTURE_PREFIX))
    return path, hold(path)


def hold(path: Path) -> int | None:
    """Mark the folder `path` (this process's) as owned while this process lives: the
    descriptor of the held lock (closing it, or the process ending, releases it)."""
    if fcntl is None:
        return None
    # Locked under another name, then linked: a cleaner never sees OWNER unlocked, and an
    # owner already there (a process this one was forked from) keeps its folder.
    pending = path / f".{OWNER}.{os.getpid()}"
    try:
        fd = os.open(pending, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.link(pending, path / OWNER)
    except OSError:
        os.close(fd)
        return None
    finally:
        os.unlink(pending)
    return fd


_HELD_UNTIL_EXIT: dict[Path, int | None] = {}


def hold_until_exit(path: Path) -> None:
    """`hold` the folder until this process exits, not until its session finishes: the
    folder (multiprocessing's pymp-*) is removed by an exit handler after the session, and a
    session starting meanwhile must not take it for a killed one's."""
    if path not in _HELD_UNTIL_EXIT:  # a second session in this process: already held
        _HELD_UNTIL_EXIT[path] = hold(path)


def remove_stale_folders() -> list[Path]:
    """Remove the folders of sessions that are gone from the temporary directory; the folders
    removed."""
    if fcntl is None:
        return []
    try:
        entries = list(os.scandir(tempfile.gettempdir()))
    except OSError:
        return []
    removed = []
    for entry in entries:
        if not entry.name.startswith((CAPTURE_PREFIX, "pymp-")):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and _owner_gone(entry.path):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
    return removed


def _owner_gone(path: str) -> bool:
    try:
        fd = os.open(os.path.join(path, OWNER), os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False  # no lock (an older version's folder, or one being made): not ours to judge
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # held: its session lives
    finally:
        os.close(fd)
    return True
