"""p2p_message_rate_pairs: n/2 sender-receiver pairs stream windows at once (osu_mbw_mr).

Rank i sends to rank i + n/2, each pair as p2p_bandwidth; messages/s and MB/s are over all
pairs: pairs * W messages per iteration.
"""

from __future__ import annotations

from .bandwidth import windowed_stream
from .common import PointToPoint, half_pairs

MESSAGE_RATE_PAIRS = PointToPoint(
    name="p2p_message_rate_pairs",
    pairs=half_pairs,
    iteration=windowed_stream,
    messages_per_iteration=lambda window, pairs: window * pairs,
)
