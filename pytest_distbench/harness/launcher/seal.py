"""Launcher mode's seal: what a rank acts on is something only the run's ranks can have written.

The launcher's store answers anyone who can reach its port, without a credential: a process of
the same user finds MASTER_PORT and TORCHELASTIC_RUN_ID in a rank's environment, and the key
names are public. So every value the ranks act on (each test's outcomes and verdict, the end
status, the agreement rounds after the collection, a hang's stacks, the markers of a rank that
is gone) carries an HMAC-SHA256 under a secret that no store holds: each rank draws 32 random
bytes, an all_gather over a gloo process group of the ranks' own (direct TCP connections
between them; the store carries only their addresses) gives every rank all of them, and the
secret is their hash. The MAC covers the value and its full key (run id, test index, rank), so
a value posted for one key is refused under another. A value whose MAC does not match is
refused and named (Forged); what a store-only process can still do is in docs/launchers.md.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import timedelta
from typing import Any

SECRET_BYTES = 32
TAG_BYTES = 64  # the MAC as hex, in front of every sealed value
AGREE_TIMEOUT_S = 60.0  # every rank has just answered the collection round: they are all there


class Forged(ValueError):
    """A value under one of the run's keys that none of the run's ranks wrote."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(
            f"the value under the store key {key!r} does not carry the run's seal: no rank of "
            "this run wrote it (another process that can reach the launcher's store did)")


class Seal:
    """Seals and opens the values under one run's keys."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def _tag(self, key: str, data: bytes) -> bytes:
        mac = hmac.new(self._secret, key.encode() + b"\0", hashlib.sha256)
        mac.update(data)
        return mac.hexdigest().encode()

    def seal(self, key: str, text: str) -> bytes:
        data = text.encode()
        return self._tag(key, data) + data

    def open(self, key: str, raw: bytes) -> bytes:
        """The value as it was sealed; Forged when no rank of the run sealed it."""
        tag, data = raw[:TAG_BYTES], raw[TAG_BYTES:]
        if len(tag) != TAG_BYTES or not hmac.compare_digest(tag, self._tag(key, data)):
            raise Forged(key)
        return data


def agree(store: Any, prefix: str, rank: int, world_size: int) -> Seal:
    """The run's seal, the same in every rank: every rank must call this at the same point.
    Raises RuntimeError when the ranks cannot connect to each other."""
    import torch
    import torch.distributed as dist

    mine = secrets.token_bytes(SECRET_BYTES)
    if world_size == 1:
        return Seal(mine)
    group = dist.ProcessGroupGloo(dist.PrefixStore(prefix + "seal/", store), rank, world_size,
                                  timedelta(seconds=AGREE_TIMEOUT_S))
    try:
        drawn = [torch.empty(SECRET_BYTES, dtype=torch.uint8) for _ in range(world_size)]
        group.allgather([drawn], [torch.frombuffer(bytearray(mine), dtype=torch.uint8)]).wait()
    finally:
        del group  # its connections close with it
    return Seal(hashlib.sha256(b"".join(t.numpy().tobytes() for t in drawn)).digest())
