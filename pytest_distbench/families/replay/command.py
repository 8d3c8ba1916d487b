"""`pytest-distbench capture --out DIR [--steps 1,2] -- LAUNCH...`: run a launch with every
rank capturing its communication (launched.py), then check the trace it wrote; or
`pytest-distbench capture --out DIR --from-profiler FILE...`: the per-rank torch.profiler
Chrome traces of a run turned into the trace (profiler.py).

The command claims DIR before anything runs: it makes it (or takes an empty one) and holds an
flock on a claim file there for the whole launch, so a second capture into DIR is refused
rather than mixed into the first. A launch that writes no trace leaves nothing behind.

SIGINT, SIGTERM or SIGHUP to the command is passed to the launch, which is waited for (a
second signal, or STOP_GRACE_S, kills it); then what it wrote is removed and the command
exits 128 + the signal. Killed outright, the command takes the launch with it (each Python
process of the launch dies with its parent: boot/) and the ranks write nothing once its
claim is gone (launched.py)."""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import profiler
from . import trace as fmt
from .launched import CAPTURING, NOTES, OUT, STEPS, TOKEN
from .reading import read
from .timeline import with_waits

BOOT = Path(__file__).with_name("boot")
# How long a stopped launch is given to end (torchrun gives its ranks 30 s after SIGTERM).
STOP_GRACE_S = 60.0
# A Python interpreter's options that keep the capture hook (boot/, on PYTHONPATH) from
# loading: -I (isolated), -E (no PYTHON* variables), -S (no site, so no sitecustomize).
_PYTHON = re.compile(r"python[0-9.]*$")
_SKIPS_HOOK = re.compile(r"-[A-Za-z]*[IES]")


class Refused(Exception):
    """The output directory cannot take this capture; str() is the one line saying why."""


def run(out: str, steps: Sequence[int] | None, launch: Sequence[str]) -> tuple[int, str]:
    """Run `launch` capturing into `out`: (exit code, one line saying what was written)."""
    with _Stops() as stops:
        return _run(out, steps, launch, stops)


def _run(out: str, steps: Sequence[int] | None, launch: Sequence[str], stops: _Stops
         ) -> tuple[int, str]:
    token = secrets.token_hex(16)
    try:
        claim, created = _claim(Path(out), token)
    except Refused as e:
        return 2, str(e)
    env = dict(os.environ)
    env[OUT] = str(Path(out).resolve())
    env[TOKEN] = token
    if steps:
        env[STEPS] = ",".join(str(s) for s in steps)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(BOOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    written = False
    try:
        if stops.signum is not None:  # while claiming: the launch is not started
            return stops.stopped(f"the launch was not started; nothing written in {out}")
        code = stops.wait(launch, env)
        if stops.signum is not None:  # what the launch wrote by then is no trace
            return stops.stopped(f"the launch was stopped (it exited {code}); nothing kept "
                                 f"in {out}")
        if not (Path(out) / fmt.MANIFEST).exists():
            return code or 1, f"no trace written in {out} ({_why_none(out, code, launch)})"
        trace = read(out)
        written = True
    except OSError as e:
        return 2, f"cannot start {launch[0]!r}: {e.strerror or e}"
    except fmt.TraceError as e:
        return code or 1, f"the trace written is not one: {e}"
    finally:
        _release(Path(out), claim, created, keep=written)
    warm_up = ("; step 0, the program's warm-up, left out (--steps 0,... keeps it)"
               if not steps and trace.steps and trace.steps[0] == 1 else "")
    return code, _wrote(out, trace) + warm_up


def from_profiler(out: str, steps: Sequence[int] | None, files: Sequence[str]
                  ) -> tuple[int, str]:
    """The trace of `files` (one profiler file per rank) written to `out`, keeping `steps`
    (all if None): (exit code, one line saying what was written or what is wrong). The trace
    is written beside, in a directory of its own under `out`, and moved in only once it reads
    back: a trace the reader would refuse is never left in `out`, nor anything else."""
    try:
        fmt.refuse_existing(out, create=False)
        trace = profiler.load(files, name=Path(out).name)
        if steps:
            missing = sorted(set(steps) - set(trace.steps))
            if missing:
                raise fmt.TraceError(f"--steps: step {missing[0]} is not in the profiler files "
                                     f"(they hold steps {trace.steps})")
            trace.calls = {r: with_waits([c for c in cs if c.step in steps])
                           for r, cs in trace.calls.items()}
            trace.spans = {r: {s: v for s, v in sp.items() if s in steps}
                           for r, sp in trace.spans.items()}
            trace.steps = sorted(steps)
        if not any(trace.calls.values()):
            # A trace of no call replays as nothing and blocks the next capture there.
            where = f" in steps {trace.steps}" if steps else ""
            why = (f": {len(trace.skipped)} not replayable, nothing else" if trace.skipped
                   else "")
            raise fmt.TraceError(f"{_named(files)}: no call to replay{where}{why}; nothing "
                                 f"written to {out}")
        _write_checked(trace, Path(out))
    except fmt.TraceError as e:
        return 2, str(e)
    except OSError as e:
        return 2, f"cannot write in {out}: {e.strerror or e}"
    return 0, _wrote(out, trace)


def _write_checked(trace: fmt.Trace, out: Path) -> None:
    """Write `trace` to `out` through a directory of its own there, read back before its
    files are moved in (the manifest last); on any failure nothing stays, not even `out`
    where it was made here."""
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".from-profiler.", dir=out))
    moved: list[Path] = []
    try:
        fmt.write(trace, staging)
        try:
            read(staging)
        except fmt.TraceError as e:  # a value the profiler reader let through: a bug here
            raise fmt.TraceError(f"the trace made does not read back, so is not written: "
                                 f"{str(e).replace(str(staging), str(out))}") from None
        for name in [*(fmt.rank_file(r) for r in range(trace.world_size)), fmt.MANIFEST]:
            os.replace(staging / name, out / name)
            moved.append(out / name)
    except BaseException:
        for path in reversed(moved):
            path.unlink(missing_ok=True)
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if created and not (out / fmt.MANIFEST).exists():
            try:
                out.rmdir()  # only if empty: never what another process put there meanwhile
            except OSError:
                pass


def _named(files: Sequence[str]) -> str:
    """The files given, in a message: the first, and how many more."""
    return str(files[0]) + (f" and {len(files) - 1} more" if len(files) > 1 else "")


def _wrote(out: str, trace: fmt.Trace) -> str:
    calls = sum(len(c) for c in trace.calls.values())
    return (f"wrote {out}: {trace.world_size} ranks, steps {trace.steps}, {calls} calls"
            + (f", {len(trace.skipped)} not replayable (listed in the manifest)"
               if trace.skipped else ""))


def _claim(out: Path, token: str) -> tuple[int, bool]:
    """Make `out` (or take it empty) and lock it for this capture, its claim file holding
    `token` (launched.py): (the claim's fd, whether the directory was made here)."""
    try:
        fmt.refuse_existing(out, create=False)
    except fmt.TraceError as e:
        raise Refused(str(e)) from None
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(out / NOTES, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise Refused(f"cannot write in {out}: {e.strerror or e}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise Refused(f"{out}: another capture is writing there; give another directory"
                      ) from None
    others = sorted(p.name for p in out.iterdir() if p.name != NOTES)
    if others:
        _release(out, fd, created, keep=True)
        raise Refused(f"{out}: holds {others[0]}" + (f" and {len(others) - 1} more"
                      if len(others) > 1 else "") + " (an earlier capture's?); give an empty "
                      "or new directory")
    os.ftruncate(fd, 0)  # notes of a killed capture's are not this one's
    os.write(fd, f"{token}\n".encode())
    return fd, created


def _release(out: Path, fd: int, created: bool, keep: bool) -> None:
    """Drop the claim; without `keep` remove what the launch wrote (a partial trace is none),
    and the directory too if it was made here. Under the lock: the directory was empty but for
    the claim when it was taken, so all in it is this capture's."""
    try:
        if not keep:
            if created:
                shutil.rmtree(out, ignore_errors=True)
            else:
                for entry in out.iterdir():
                    if entry.name != NOTES:
                        if entry.is_dir() and not entry.is_symlink():
                            shutil.rmtree(entry, ignore_errors=True)
                        else:
                            entry.unlink(missing_ok=True)
        (out / NOTES).unlink(missing_ok=True)
    finally:
        os.close(fd)


def _why_none(out: str, code: int, launch: Sequence[str]) -> str:
    """Why the launch wrote no trace, from its exit and the ranks' notes."""
    try:
        notes = (Path(out) / NOTES).read_text(errors="replace").splitlines()[1:]  # the token
    except OSError:
        notes = []
    said = [line for line in notes if not line.endswith(CAPTURING)]
    if code:
        return f"the launch exited {code}" + (f"; {said[0]}" if said else "")
    if said:
        return said[0]
    if not notes:
        if any(_PYTHON.search(Path(a).name) and any(_SKIPS_HOOK.match(o) for o in _options(
                launch[i + 1:])) for i, a in enumerate(launch)):
            return ("no rank loaded the capture hook: python -I, -E or -S in the launch skips "
                    "PYTHONPATH or site, where the hook is; leave them out")
        return "no rank initialized a process group"
    return "the ranks wrote no trace"


def _options(args: Sequence[str]) -> list[str]:
    """An interpreter's own options: those before its script, -m or -c."""
    found = []
    for a in args:
        if not a.startswith("-") or a in ("-m", "-c", "-"):
            break
        found.append(a)
    return found


class _Stops:
    """SIGINT, SIGTERM and SIGHUP while a capture runs: each passed to the launch, which is
    then waited for; a second one, or STOP_GRACE_S without an end, kills it (SIGKILL). Outside
    the launch (claiming the directory, reading the trace) a signal is only noted: the command
    finishes what it does, removes what the launch wrote, and exits as stopped."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._process: subprocess.Popen | None = None
        self._waiting = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Stops:
        if threading.current_thread() is threading.main_thread():  # where handlers can be set
            self._previous = {s: signal.signal(s, self._on_signal) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc: Any) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if self.signum is None:
            self.signum = signum
            process = self._process
            if self._waiting and process is not None and process.returncode is None:
                raise _Stopped  # out of the blocking wait, to pass the signal on
        elif self._process is not None and self._process.poll() is None:
            self._process.kill()  # asked again: no more grace

    def stopped(self, what: str) -> tuple[int, str]:
        """The command's exit code and line once stopped by a signal: 128 + its number."""
        assert self.signum is not None
        return 128 + self.signum, f"stopped by {signal.Signals(self.signum).name}: {what}"

    def wait(self, launch: Sequence[str], env: dict[str, str]) -> int:
        """Run `launch` to its end; its exit code (-N: it died of signal N)."""
        self._process = process = subprocess.Popen(list(launch), env=env)
        if self.signum is None:
            try:
                self._waiting = True
                return process.wait()
            except _Stopped:
                pass
            finally:
                self._waiting = False
        assert self.signum is not None
        process.send_signal(self.signum)
        try:
            return process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()


class _Stopped(BaseException):
    """Raised by a signal's handler out of the wait for the launch (never past _Stops.wait)."""
