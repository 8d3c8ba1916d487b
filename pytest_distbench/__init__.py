"""pytest-distbench: distributed PyTorch communication benchmarks as pytest tests.

``pytest_distbench.capture`` (docs/replay.md) is imported on first use: the plugin itself
loads without torch.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "capture":
        from .families.replay.capture import capture

        return capture
    raise AttributeError(f"module 'pytest_distbench' has no attribute {name!r}")
