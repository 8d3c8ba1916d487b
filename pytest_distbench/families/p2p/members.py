"""Every built-in p2p benchmark by family name, in the order the tables list them."""

from __future__ import annotations

from .bandwidth import BANDWIDTH
from .bibw import BIBW
from .common import PointToPoint, run_p2p
from .latency import LATENCY
from .message_rate_pairs import MESSAGE_RATE_PAIRS

P2P: dict[str, PointToPoint] = {m.name: m for m in (LATENCY, BANDWIDTH, BIBW,
                                                     MESSAGE_RATE_PAIRS)}

__all__ = ["P2P", "PointToPoint", "run_p2p"]
