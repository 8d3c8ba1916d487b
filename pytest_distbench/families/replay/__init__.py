"""A real program's communication captured and replayed as distbench tests (docs/replay.md):
the format (trace.py; PARAM's in param.py; reading.py reads either), the capture (capture.py,
and command.py with launched.py and boot/ for a whole launch), the settings (options.py), the
replay in a rank (step.py) and its table (family.py)."""
