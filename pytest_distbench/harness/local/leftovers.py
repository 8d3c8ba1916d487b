"""Folders a killed session left in the temporary directory, removed by the next session.

A controller (or an xdist worker) killed by SIGKILL runs no teardown: its rank logs
(`distbench-ranks-*`) and its forkserver's folder (`pymp-*`, made by multiprocessing) stay.
A local session removes, when it starts, those whose owner is gone, and never one whose
owner lives, whatever its process namespace:

- `distbench-ranks-*`: its controller holds an flock on OWNER inside for its whole life; a
  folder whose lock can be taken has no owner. A folder without OWNER is left alone.
- `pymp-*`: it holds the forkserver's listening socket, listed in /proc/net/unix while the
  forkserver lives. A folder of nothing but `listener-*` sockets, none of them bound, is
  garbage. Where /proc/net/unix cannot be read (not Linux), these folders are left alone.

Only this user's folders are looked at.
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
    """A new `distbench-ranks-*` folder and the descriptor of its held lock (closing the
    descriptor, or the process ending, releases it)."""
    path = Path(tempfile.mkdtemp(prefix=CAPTURE_PREFIX))
    if fcntl is None:
        return path, None
    # Locked under another name, then renamed: a cleaner never sees OWNER unlocked.
    pending = path / f".{OWNER}"
    fd = os.open(pending, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.rename(pending, path / OWNER)
    return path, fd


def remove_leftovers(root: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove the folders of sessions that are gone from `root` (the temporary directory);
    the folders removed."""
    if fcntl is None:
        return []
    root = Path(root or tempfile.gettempdir())
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    bound: set[str] | None = None
    removed = []
    for entry in entries:
        if not entry.name.startswith((CAPTURE_PREFIX, "pymp-")):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            continue
        path = Path(entry.path)
        if entry.name.startswith(CAPTURE_PREFIX):
            gone = _owner_gone(path)
        else:
            bound = _bound_unix_paths() if bound is None else bound
            gone = _forkserver_gone(path, bound)
        if gone:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _owner_gone(path: Path) -> bool:
    try:
        fd = os.open(path / OWNER, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False  # no lock (an older version's folder, or one being made): not ours to judge
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # held: its session lives
    finally:
        os.close(fd)
    return True


def _forkserver_gone(path: Path, bound: set[str]) -> bool:
    if not bound:  # unreadable, or no bound socket at all: nothing can be judged here
        return False
    try:
        entries = list(os.scandir(path))
    except OSError:
        return False
    if not entries:
        return False  # made a moment ago, its socket not bound yet
    for entry in entries:
        try:
            is_socket = stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode)
        except OSError:
            return False
        if (not (entry.name.startswith("listener-") and is_socket)
                or _tail(entry.path) in bound):
            return False
    return True


def _tail(path: str) -> str:
    # "pymp-XXXX/listener-YYYY", both parts random: the same socket however TMPDIR was spelt
    # (a trailing slash, a symlink) when it was bound.
    return "/".join(Path(path).parts[-2:])


def _bound_unix_paths() -> set[str]:
    """The last two parts of every bound unix socket's path in this network namespace
    (empty if unknown)."""
    try:
        with open("/proc/net/unix", encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return set()
    # "Num RefCount Protocol Flags Type St Inode Path": the path, when there is one, is last.
    return {_tail(fields[7]) for line in lines if len(fields := line.split(None, 7)) == 8}
