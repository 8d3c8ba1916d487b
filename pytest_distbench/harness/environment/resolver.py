"""The name-service check run before a TCPStore study: does a burst of reverse lookups of the
loopback address stall here?

Every TCPStore client connect makes c10d name its peer socket: a reverse lookup of
``::ffff:127.0.0.1``, which /etc/hosts does not list, so it goes to the nameserver. Where the
nameserver drops a burst of such queries, glibc waits its timeout (5 s) and retries once: a
burst of connects then stalls 5-10 s while a single lookup from a shell is instant
(docs/store.md). The store figures would then measure the resolver, not the backend; this check
says so before the sweep, with the cause and the fix.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time

from .pitfalls import Check

BURST = 64  # the smallest default client count: the burst the sweep makes first
WAIT_S = 1.5  # a lookup unanswered this long is a stall (the slow-connect threshold is 1 s)
LOOPBACK_MAPPED = "::ffff:127.0.0.1"
FIX = (f"add '{LOOPBACK_MAPPED} localhost' to /etc/hosts (answers the lookup locally), or "
       "set RES_OPTIONS='timeout:1 attempts:1' (shortens each stall to about 1 s)")

# The child: BURST threads each make the lookup c10d makes and print when it returns.
_BURST = (
    "import socket, sys, threading\n"
    "def one():\n"
    "    try:\n"
    f"        socket.getnameinfo(({LOOPBACK_MAPPED!r}, 0, 0, 0), 0)\n"
    "    except OSError:\n"
    "        pass\n"
    "    sys.stdout.write('.')\n"
    "    sys.stdout.flush()\n"
    "threads = [threading.Thread(target=one, daemon=True) for _ in range(int(sys.argv[1]))]\n"
    "for t in threads:\n"
    "    t.start()\n"
    "for t in threads:\n"
    "    t.join()\n"
)


def nameservers(path: str = "/etc/resolv.conf") -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return [line.split()[1] for line in f
                    if line.startswith("nameserver") and len(line.split()) > 1]
    except OSError:
        return []


def answered_within(burst: int = BURST, wait_s: float = WAIT_S) -> int | None:
    """How many of `burst` concurrent reverse lookups of the loopback address return within
    `wait_s` (None: the check could not run). The child is killed at the deadline, so a stalled
    lookup leaves nothing behind."""
    try:
        child = subprocess.Popen([sys.executable, "-S", "-c", _BURST, str(burst)],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    except OSError:
        return None
    assert child.stdout is not None
    fd = child.stdout.fileno()
    answered = 0
    deadline = time.monotonic() + wait_s
    try:
        while answered < burst:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                break
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            answered += chunk.count(b".")
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    return answered


def check_reverse_lookup(burst: int = BURST, wait_s: float = WAIT_S) -> Check:
    answered = answered_within(burst, wait_s)
    servers = ", ".join(nameservers()) or "none listed"
    if answered is None:
        return Check("reverse_lookup", "warn", "could not run the lookup burst")
    if answered >= burst:
        return Check("reverse_lookup", "ok",
                     f"{burst} concurrent reverse lookups of {LOOPBACK_MAPPED} answered within "
                     f"{wait_s:g} s")
    return Check(
        "reverse_lookup", "warn",
        f"{burst - answered} of {burst} concurrent reverse lookups of {LOOPBACK_MAPPED} "
        f"unanswered after {wait_s:g} s (nameserver {servers}): every TCPStore client connect "
        "makes one, so a burst of connects stalls 5-10 s on the resolver, not on the store "
        f"backend; the store tables show those connects apart. Fix: {FIX}")
