"""Command line, ini and marker settings of the TCPStore family (no torch here)."""

from __future__ import annotations

from pytest_distbench import units
from pytest_distbench.registry import Setting

BACKENDS = ("libuv", "legacy")


def _store_backends(text: str) -> list[str]:
    names = [n.lower() for n in units.split_list(text, "store backend", "libuv, legacy")]
    for name in names:
        if name not in BACKENDS:
            raise ValueError(f"unknown store backend {name!r}: expected libuv or legacy")
    return list(dict.fromkeys(names))


def _rounds(text: str) -> int:
    value = units.parse_positive_int_list(text, "rounds")
    if len(value) != 1:
        raise ValueError(f"invalid rounds {text!r}: expected one positive integer")
    return value[0]


SETTINGS: tuple[Setting, ...] = (
    Setting("store_clients", "--distbench-store-clients", "64,512",
            lambda t: units.parse_positive_int_list(t, "store clients"),
            "TCPStore clients (the study's ranks), simulated on threads spread over the "
            "world's ranks, a list", param="clients",
            param_id=lambda n: f"clients{n}"),
    Setting("store_backend", "--distbench-store-backend", "libuv,legacy", _store_backends,
            "TCPStore server backends to run side by side: libuv, legacy, or both",
            param="store_backend", param_id=str),
    Setting("store_rounds", "--distbench-store-rounds", "10", _rounds,
            "timed store-based barriers per point (the study's number_runs) and operations "
            "of each kind per client in test_store_ops"),
    Setting("store_timeout", "--distbench-store-timeout", "120s", units.parse_duration,
            "bound on every store call (connecting all clients, a barrier, one operation), "
            "below --distbench-timeout so a stuck store fails with its reason"),
)
