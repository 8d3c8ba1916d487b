"""`pytest-distbench capture --out DIR [--steps 1,2] -- LAUNCH...`: run a launch with every
rank capturing its communication (launched.py), then check the trace it wrote."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

from . import trace as fmt
from .launched import OUT, STEPS
from .reading import read

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
    calls = sum(len(c) for c in trace.calls.values())
    line = (f"wrote {out}: {trace.world_size} ranks, steps {trace.steps}, {calls} calls"
            + (f", {len(trace.skipped)} not replayable (listed in the manifest)"
               if trace.skipped else ""))
    return code, line


def _wait(launch: Sequence[str], env: dict[str, str]) -> int:
    process = subprocess.Popen(list(launch), env=env)
    try:
        return process.wait()
    except KeyboardInterrupt:  # the launch got the same Ctrl-C: let it stop its ranks
        process.send_signal(signal.SIGINT)
        return process.wait()

