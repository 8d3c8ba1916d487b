"""Captured traces replayed as benchmarks: the format (trace.py), the settings (options.py),
the replay in a rank (step.py) and its table (family.py)."""
