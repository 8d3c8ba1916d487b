"""`pytest-distbench capture --out DIR [--steps 1,2] -- LAUNCH...`: run a launch with every
rank capturing its communication (launched.py), then check the trace it wrote; or
`pytest-distbench capture --out DIR --from-profiler FILE...`: the per-rank torch.profiler
Chrome traces of a run turned into the trace (profiler.py)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

from . import profiler
from . import trace as fmt
from .launched import OUT, STEPS
from .reading import read
from .timeline import with_waits

BOOT = Path(__file__).with_name("boot")


def run(out: str, steps: Sequence[int] | None, launch: Sequence[str]) -> tuple[int, str]:
    """Run `launch` capturing into `out`: (exit code, one line saying what was written)."""
    created = not Path(out).exists()
    try:
        fmt.refuse_existing(out)
    except fmt.TraceError as e:
        return 2, str(e)
    env = dict(os.environ)
    env[OUT] = str(Path(out).resolve())
    if steps:
        env[STEPS] = ",".join(str(s) for s in steps)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(BOOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    try:
        code = _wait(launch, env)
        if not (Path(out) / fmt.MANIFEST).exists():
            why = f"the launch exited {code}" if code else "no rank initialized a process group"
            return code or 1, f"no trace written in {out} ({why})"
        trace = read(out)
    except OSError as e:
        return 2, f"cannot start {launch[0]!r}: {e.strerror or e}"
    except fmt.TraceError as e:
        return code or 1, f"the trace written is not one: {e}"
    finally:
        if created and not (Path(out) / fmt.MANIFEST).exists():
            shutil.rmtree(out, ignore_errors=True)  # a partial trace is none: not left behind
    return code, _wrote(out, trace)


def from_profiler(out: str, steps: Sequence[int] | None, files: Sequence[str]
                  ) -> tuple[int, str]:
    """The trace of `files` (one profiler file per rank) written to `out`, keeping `steps`
    (all if None): (exit code, one line saying what was written or what is wrong)."""
    try:
        fmt.refuse_existing(out, create=False)
        trace = profiler.load(files, name=Path(out).name)
        if steps:
            missing = sorted(set(steps) - set(trace.steps))
            if missing:
                raise fmt.TraceError(f"--steps: step {missing[0]} is not in the profiler files "
                                     f"(they hold steps {trace.steps})")
            trace.calls = {r: [c for c in cs if c.step in steps] for r, cs in trace.calls.items()}
            trace.spans = {r: {s: v for s, v in sp.items() if s in steps}
                           for r, sp in trace.spans.items()}
            trace.steps = sorted(steps)
            trace.calls = {r: with_waits(cs) for r, cs in trace.calls.items()}
        fmt.write(trace, out)
        read(out)
    except fmt.TraceError as e:
        return 2, str(e)
    return 0, _wrote(out, trace)


def _wrote(out: str, trace: fmt.Trace) -> str:
    calls = sum(len(c) for c in trace.calls.values())
    return (f"wrote {out}: {trace.world_size} ranks, steps {trace.steps}, {calls} calls"
            + (f", {len(trace.skipped)} not replayable (listed in the manifest)"
               if trace.skipped else ""))


def _wait(launch: Sequence[str], env: dict[str, str]) -> int:
    process = subprocess.Popen(list(launch), env=env)
    try:
        return process.wait()
    except KeyboardInterrupt:  # the launch got the same Ctrl-C: let it stop its ranks
        process.send_signal(signal.SIGINT)
        return process.wait()

