"""Transports: how the point-to-point and message-rate families move one tensor to a peer.

A transport is one small file implementing :class:`~.base.Transport`; adding one is that file
plus one line in ``TRANSPORTS`` (a dotted path, so nothing heavy is imported before use).
"""

from __future__ import annotations

import importlib
from typing import Any

#: Transport name -> "module:factory"; the factory takes the in-rank `distbench` object.
TRANSPORTS: dict[str, str] = {
    "process_group": "pytest_distbench.families.transports.process_group:ProcessGroupTransport",
    "rpc": "pytest_distbench.families.transports.rpc:RpcTransport",
}


def make_transport(name: str, distbench: Any) -> Any:
    """The transport called `name`, for this rank (a clear error for an unknown name)."""
    if name not in TRANSPORTS:
        raise ValueError(f"unknown transport {name!r}: expected one of {', '.join(TRANSPORTS)}")
    module_name, _, factory = TRANSPORTS[name].partition(":")
    return getattr(importlib.import_module(module_name), factory)(distbench)
