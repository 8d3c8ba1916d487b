"""Launcher mode's seal: what a rank acts on is something only the run's ranks can have written.

The launcher's store answers anyone who can reach its port, without a credential: a process of
the same user finds MASTER_PORT and TORCHELASTIC_RUN_ID in a rank's environment, and the key
names are public. So every value the ranks act on (each test's outcomes and verdict, the end
status, the agreement rounds after the collection, a hang's stacks, the markers of a rank that
is gone) carries an HMAC-SHA256 under the run's key, which no store holds. The MAC covers the
value and its full key (run id, test index, rank), so a value posted for one key is refused
under another. A value whose MAC does not match is refused and named (Forged). How the ranks
come to the key (from the job's secret, or exchanged) is runkey.py's; what a store-only process
can still do is in docs/launchers.md.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

TAG_BYTES = 64  # the MAC as hex, in front of every sealed value


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


def job_key(secret: bytes, run_id: str) -> bytes:
    """The key the job's secret gives this run id: what seals each rank's first word
    (runkey.py), before the ranks know each other's draws."""
    return hmac.new(secret, b"pytest-distbench job key\0" + run_id.encode(),
                    hashlib.sha256).digest()


def run_key(job: bytes, draws: Sequence[bytes]) -> bytes:
    """The run's key: the job key over every rank's draw for this start, in rank order. Run ids
    repeat (`env.0`, torchrun's `none`, an MPI job's), so the draws keep one start's values
    from being replayed into another's; each draw is of one length, so the join is
    unambiguous."""
    if len({len(d) for d in draws}) > 1:
        raise ValueError("the ranks' draws differ in length")
    return hmac.new(job, b"pytest-distbench run key\0" + b"".join(draws),
                    hashlib.sha256).digest()
