"""Built-in collective benchmarks: one shared harness, one small description per collective.

Kept free of imports, so that the registration (``family.py``) is read without torch.
Benchmark one with ``run_collective(distbench, COLLECTIVES["all_reduce"], nbytes)`` from
``pytest_distbench.families.collectives.members``.
"""
