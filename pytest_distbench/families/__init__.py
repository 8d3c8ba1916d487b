"""What is measured: one package per family, each a small shared harness plus one small file
per member, and a ``family.py`` that registers it (pytest_distbench/registry.py)."""
