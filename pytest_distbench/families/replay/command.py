"""`pytest-distbench capture --out DIR [--steps 1,2] -- LAUNCH...`: run a launch with every
rank capturing its communication (launched.py), then check the trace it wrote."""

from __future__ import annotations

import os
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
        process = subprocess.Popen(list(launch), env=env)
    except OSError as e:
        return 2, f"cannot start {launch[0]!r}: {e.strerror or e}"
    try:
        code = process.wait()
    except KeyboardInterrupt:
        process.send_signal(signal.SIGINT)
        code = process.wait()
    try:
        trace = read(out)
    except fmt.TraceError as e:
        why = f"the launch exited {code}" if code else "no rank initialized a process group"
        return code or 1, f"no trace written ({why}): {e}"
    calls = sum(len(c) for c in trace.calls.values())
    line = (f"wrote {out}: {trace.world_size} ranks, steps {trace.steps}, {calls} calls"
            + (f", {len(trace.skipped)} not replayable (listed in the manifest)"
               if trace.skipped else ""))
    return code, line


def main_steps(text: str) -> list[int]:
    steps = [int(s) for s in text.split(",") if s.strip()]
    if not steps or any(s < 0 for s in steps):
        raise ValueError
    return steps

