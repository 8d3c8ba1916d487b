"""`pytest-distbench capture --out DIR [--steps 1,2] -- LAUNCH...`: run a launch with every
rank capturing its communication (launched.py), then check the trace it wrote; or
`pytest-distbench capture --out DIR --from-profiler FILE...`: the per-rank torch.profiler
Chrome traces of a run turned into the trace (profiler.py).

The command claims DIR before anything runs: it makes it (or takes an empty one) and holds an
flock on a claim file there for the whole launch, so a second capture into DIR is refused
rather than mixed into the first. A launch that writes no trace leaves nothing behind."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from . import profiler
from . import trace as fmt
from .launched import CAPTURING, NOTES, OUT, STEPS
from .reading import read
from .timeline import with_waits

BOOT = Path(__file__).with_name("boot")
# A Python interpreter's options that keep the capture hook (boot/, on PYTHONPATH) from
# loading: -I (isolated), -E (no PYTHON* variables), -S (no site, so no sitecustomize).
_PYTHON = re.compile(r"python[0-9.]*$")
_SKIPS_HOOK = re.compile(r"-[A-Za-z]*[IES]")


class Refused(Exception):
    """The output directory cannot take this capture; str() is the one line saying why."""


def run(out: str, steps: Sequence[int] | None, launch: Sequence[str]) -> tuple[int, str]:
    """Run `launch` capturing into `out`: (exit code, one line saying what was written)."""
    try:
        claim, created = _claim(Path(out))
    except Refused as e:
        return 2, str(e)
    env = dict(os.environ)
    env[OUT] = str(Path(out).resolve())
    if steps:
        env[STEPS] = ",".join(str(s) for s in steps)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(BOOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    written = False
    try:
        code = _wait(launch, env)
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
    return code, _wrote(out, trace)


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


def _claim(out: Path) -> tuple[int, bool]:
    """Make `out` (or take it empty) and lock it for this capture: (the claim's fd, whether
    the directory was made here)."""
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
        notes = (Path(out) / NOTES).read_text(errors="replace").splitlines()
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


def _wait(launch: Sequence[str], env: dict[str, str]) -> int:
    process = subprocess.Popen(list(launch), env=env)
    try:
        return process.wait()
    except KeyboardInterrupt:  # the launch got the same Ctrl-C: let it stop its ranks
        process.send_signal(signal.SIGINT)
        return process.wait()
