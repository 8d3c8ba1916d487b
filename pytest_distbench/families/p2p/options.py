"""Settings of the point-to-point family (read by settings.py; no torch here)."""

from __future__ import annotations

from pytest_distbench import units
from pytest_distbench.registry import Setting

SETTINGS = (
    Setting("window", "--distbench-window", "64",
            lambda t: units.parse_positive_int_list(t, "window"),
            "messages in flight per window of the p2p bandwidth tests (non-blocking sends, "
            "then one acknowledgement, 64 as in OSU), a list", param="window",
            param_id=lambda n: f"window{n}"),
)
