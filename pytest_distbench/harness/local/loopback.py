"""Loopback-only listeners for a local world.

Left alone, gloo and TensorPipe listen on the address the machine's hostname resolves to, and a
TCPStore master listens on every interface; anyone on the network could then connect to a rank
(TensorPipe unpickles what it receives).  A local world needs none of that: the controller's
store is bound to 127.0.0.1 and each rank is told to use the loopback interface.  Launcher mode
(several hosts) keeps whatever interface the user chose, so this is a parameter of world start-up
(`World(loopback_only=...)`), never a global.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

LOOPBACK_HOST = "127.0.0.1"
_IFF_LOOPBACK = 0x8


def loopback_interface(sys_root: Path = Path("/sys")) -> str:
    """The name of the loopback interface (its flags carry IFF_LOOPBACK); 'lo' if unreadable."""
    try:
        for entry in sorted((sys_root / "class" / "net").iterdir()):
            try:
                flags = int((entry / "flags").read_text().strip(), 16)
            except (OSError, ValueError):
                continue
            if flags & _IFF_LOOPBACK:
                return entry.name
    except OSError:
        pass
    return "lo"


def rank_listen_env(interface: str | None = None) -> dict[str, str]:
    """What a rank's environment needs so gloo pairs, TensorPipe and NCCL's bootstrap listen on
    loopback only (one host: NCCL moves data over P2P/shared memory, not its socket)."""
    name = interface or loopback_interface()
    return {"GLOO_SOCKET_IFNAME": name, "TP_SOCKET_IFNAME": name, "NCCL_SOCKET_IFNAME": name}


def loopback_store(timeout_s: float | None = None) -> Any:
    """A TCPStore master that accepts connections on 127.0.0.1 only, on a free port.

    TCPStore binds its server to every interface; handing it a socket we bound ourselves is
    the only way to choose the address.  The store owns (and closes) the socket.
    """
    from datetime import timedelta

    import torch.distributed as dist

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((LOOPBACK_HOST, 0))
        listener.listen(1024)
    except OSError:
        listener.close()
        raise
    kwargs: dict[str, Any] = {}
    if timeout_s is not None:
        kwargs["timeout"] = timedelta(seconds=timeout_s)
    fd = listener.detach()
    return dist.TCPStore(LOOPBACK_HOST, 0, is_master=True, wait_for_workers=False,
                         master_listen_fd=fd, **kwargs)
