"""The replay family's settings (read by settings.py; no torch, no pytest here)."""

from __future__ import annotations

from pathlib import Path

from pytest_distbench import units
from pytest_distbench.registry import Setting

from . import trace
from .reading import is_any_trace, read

SUITES = Path(__file__).resolve().parents[2] / "suites"  # the built-in suites, shipped traces


def trace_directories(text: str) -> list[str]:
    """The trace directories `text` names (comma separated; a directory holding trace
    directories stands for each of them, in name order), every one read and checked here, so
    a bad trace stops the session at its start rather than in its ranks (ValueError naming the
    directory, or the file and field)."""
    found: list[str] = []
    for item in units.split_list(text, "trace directory list", "DIR[,DIR...]"):
        path = Path(item).expanduser()
        if not path.is_dir():
            raise ValueError(f"{item}: no such directory")
        try:
            if is_any_trace(path):
                inside = [path]
            else:
                inside = sorted(p for p in path.iterdir() if p.is_dir() and is_any_trace(p))
                if not inside:
                    raise ValueError(f"{item}: neither a trace ({trace.MANIFEST}, or PARAM's "
                                     "<rank>.json files) nor a directory of traces")
            for directory in inside:
                read(directory, keep=())  # checked; no rank's calls held
                found.append(str(directory.resolve()))
        except trace.TraceError as exc:
            raise ValueError(str(exc)) from None
    return list(dict.fromkeys(found))


SETTINGS: tuple[Setting, ...] = (
    Setting("replay", "--distbench-replay", None, trace_directories,
            "replay captured traces as tests, alone collecting "
            "suites/replay/test_replay.py: trace directories or directories of them, comma "
            "separated, checked at the session's start", scope="session", metavar="DIR[,DIR...]"),
)
