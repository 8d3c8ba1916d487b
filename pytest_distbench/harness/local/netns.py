"""A private network namespace for a session's local worlds (--distbench-private-network).

On the host's loopback any local user can connect to a world's TCPStore (read and write its
keys) and to a rank's gloo or TensorPipe port (garbage there aborts the rank). In a network
namespace of its own the world's loopback is reachable from nothing outside the namespace.

Namespaces are per thread: the controller never enters one. A short-lived thread enters it
and, from there, binds the store's listening socket, connects the store's own client and
starts the forkserver and the ranks, all of which stay in the namespace for good (a socket
keeps the namespace it was made in; a process starts in its parent thread's). The controller's
own network, and that of every plain test it runs, is the host's as before.

It needs CAP_SYS_ADMIN (root, or a container that grants it). A user namespace is not enough:
entering a network namespace from another thread needs CAP_SYS_ADMIN in the caller's own user
namespace, and a process with threads (this one: torch) cannot enter a user namespace itself,
so the controller's store could not be placed in one.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["NamespaceUnavailable", "PrivateNetwork"]

CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = "16sH22x"  # struct ifreq: the name, then ifr_flags in the union (40 bytes in all)

T = TypeVar("T")


class NamespaceUnavailable(Exception):
    """The machine does not allow a private network namespace; the message says why."""


class PrivateNetwork:
    """One network namespace with its loopback up, held open by a file descriptor."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._fd = _call_in_thread(_create)

    def run(self, function: Callable[..., T], *args: Any) -> T:
        """`function(*args)` in a thread inside the namespace; its result, or its exception."""
        if self._fd is None:
            raise RuntimeError("the private network namespace was closed")
        fd = self._fd

        def inside() -> T:
            _libc_call("setns", fd, CLONE_NEWNET)
            return function(*args)

        return _call_in_thread(inside)

    def close(self) -> None:
        """Let the namespace go once nothing in it is left (its processes, its sockets)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _create() -> int:
    try:
        _libc_call("unshare", CLONE_NEWNET)
    except OSError as exc:
        reason = ("needs CAP_SYS_ADMIN: run as root or in a container that grants it"
                  if exc.errno in (errno.EPERM, errno.EACCES) else os.strerror(exc.errno or 0))
        raise NamespaceUnavailable(
            f"unshare(CLONE_NEWNET) failed ({os.strerror(exc.errno or 0)}): {reason}") from None
    _loopback_up()
    return os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)


def _loopback_up() -> None:
    # A new namespace's loopback is down; up, it has 127.0.0.1 and ::1.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack(_IFREQ, b"lo", 0)
        flags = struct.unpack(_IFREQ, fcntl.ioctl(s, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP))


def _libc_call(name: str, *args: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{name}: {os.strerror(code)}")


def _call_in_thread(function: Callable[[], T]) -> T:
    """Run `function` in a new thread (what it does to its namespaces dies with the thread)."""
    outcome: dict[str, Any] = {}

    def body() -> None:
        try:
            outcome["value"] = function()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=body, name="distbench-netns", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
