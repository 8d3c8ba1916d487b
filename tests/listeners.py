"""Which TCP sockets are listening, and on which address (from /proc/net/tcp and tcp6)."""

from __future__ import annotations

import ipaddress
import socket
import struct
from pathlib import Path

_LISTEN = "0A"


def _address(hex_address: str) -> str:
    raw = bytes.fromhex(hex_address)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, struct.pack("<I", struct.unpack(">I", raw)[0]))
    # tcp6 stores four 32-bit words, each in host (little-endian) order.
    words = struct.unpack(">4I", raw)
    return socket.inet_ntop(socket.AF_INET6, struct.pack("<4I", *words))


def listening(proc_net: Path = Path("/proc/net")) -> list[tuple[str, int]]:
    """(address, port) of every listening TCP socket of this network namespace."""
    found = []
    for name in ("tcp", "tcp6"):
        try:
            lines = (proc_net / name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state = fields[1], fields[3]
            if state != _LISTEN:
                continue
            address, port = local.split(":")
            found.append((_address(address), int(port, 16)))
    return found


def off_loopback(sockets: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """Those reachable from another host: bound to a non-loopback or wildcard address."""
    bad = []
    for address, port in sockets:
        ip = ipaddress.ip_address(address)
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
            ip = ip.ipv4_mapped
        if not ip.is_loopback:
            bad.append((address, port))
    return bad
