"""How the ranks come to one run key (seal.py), once, after they agree on the collected tests.

Each rank draws 32 random bytes and posts its first word in the store under `seal/hello/<rank>`:

- with the job's secret (jobsecret.py), its draw, sealed under the job key (the secret over the
  run id). Every rank opens every other's word with its own job key: one that does not open
  was sealed under another secret (a node given another one) or by no rank. The run key is the
  job key over every draw; a process that can write the store but lacks the secret can read
  the draws and still seal nothing.
- without one, the plain word "exchange"; the ranks then all_gather their draws over a gloo
  process group of their own, whose peers find each other through the same store, and the run
  key is the hash of the draws. Whoever can write the store can put its own address there,
  relay gloo's plain messages, read the draws and seal anything: this holds only against a
  process that reads the store and does not write it (said on rank 0's header line and in the
  results file, HELD).

A rank with the secret never takes the exchange: ranks that differ (a secret on one node, none
or another on the next) stop at once, naming the rank and the cause, instead of meeting a
gloo group that half of them never join.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from datetime import timedelta
from typing import Any

from . import seal
from .jobsecret import SECRET_ENV, SECRET_FILE_ENV, JobSecret
from .seal import Forged, Seal

DRAW_BYTES = 32
AGREE_TIMEOUT_S = 60.0  # every rank has just answered the collection round: they are all there
HELLO_LIMIT = 4096  # a first word is under 200 bytes; more is not one

# Which seal held, as rank 0's header line and the results file's environment say it.
JOB_SECRET = "job secret"
HELD = {True: JOB_SECRET,
        False: "exchanged over the store: a process that can write the store can forge"}
EXCHANGE = "exchange"
GIVE_IT = (f"set {SECRET_ENV} (or {SECRET_FILE_ENV}) to the same secret on every node "
           "(docs/launchers.md)")


class Disagreement(Exception):
    """The ranks cannot come to one key: they were given different secrets, or a process that
    can write the store wrote a rank's first word. Every rank must stop."""


def hello(rank: int) -> str:
    """A rank's first word (wire.py's keys are all under the run's prefix too)."""
    return f"seal/hello/{rank}"


def agree(channel: Any, rank: int, world_size: int, run_id: str,
          secret: JobSecret | None) -> Seal:
    """The run's seal, the same in every rank: every rank must call this at the same point,
    with `channel` (a StoreChannel) not sealed yet. Raises Disagreement when the ranks differ
    in their secrets (or a first word was tampered with), RuntimeError when the exchange's
    gloo group cannot form."""
    draw = secrets.token_bytes(DRAW_BYTES)
    job_key = None if secret is None else seal.job_key(secret.value, run_id)
    job = None if job_key is None else Seal(job_key)
    mine = hello(rank)
    if job is None:
        channel.set_text(mine, json.dumps({"held": EXCHANGE}))
    else:
        word = json.dumps({"held": JOB_SECRET, "draw": draw.hex()})
        channel.set_text(mine, job.seal(channel.prefix + mine, word).decode())
    keys = [hello(r) for r in range(world_size)]
    if not channel.wait(keys, AGREE_TIMEOUT_S):
        missing = [r for r, k in enumerate(keys) if not channel.has(k)]
        raise Disagreement(f"ranks {missing} posted no first word for the run's seal within "
                           f"{AGREE_TIMEOUT_S:g} s (a process that can write the store may have "
                           "deleted it)")
    draws = []
    for r, raw in enumerate(channel.get_texts(keys)):
        assert isinstance(raw, bytes)  # an unsealed channel opens everything
        draws.append(draw if r == rank else _their_draw(
            r, raw, job, channel.prefix + keys[r], secret))
    if job_key is not None:
        return Seal(seal.run_key(job_key, draws))
    return _exchange(channel.store, channel.prefix, rank, world_size, draw)


def _their_draw(rank: int, raw: bytes, job: Seal | None, key: str,
                secret: JobSecret | None) -> bytes:
    """Rank `rank`'s draw from its first word (b"" in the exchange, where it comes later);
    Disagreement when its word is not what this rank's own would be."""
    held = _held(raw)
    if job is None:
        if held == EXCHANGE:
            return b""
        if held == JOB_SECRET:
            raise Disagreement(f"rank {rank} has a job secret and this rank has none: {GIVE_IT}")
        raise Disagreement(f"rank {rank}'s first word for the run's seal is garbled: a process "
                           "that can write the store wrote it")
    assert secret is not None
    if held == EXCHANGE:
        raise Disagreement(f"rank {rank} has no job secret and this rank has one "
                           f"({secret.source}): {GIVE_IT}")
    try:
        word = json.loads(job.open(key, raw))
        drawn = bytes.fromhex(word["draw"])
    except Forged:
        raise Disagreement(
            f"rank {rank} holds another job secret than this rank's ({secret.source}): every "
            "node must be given the same one; or a process that can write the store wrote "
            f"rank {rank}'s first word") from None
    except (ValueError, TypeError, KeyError):
        drawn = b""  # sealed by a rank of this job, yet not a word of this version
    if len(drawn) != DRAW_BYTES:
        raise Disagreement(f"rank {rank}'s first word for the run's seal carries no draw of "
                           f"{DRAW_BYTES} bytes: it runs another pytest-distbench")
    return drawn


def _held(raw: bytes) -> str | None:
    """What a first word says it holds, sealed or not: EXCHANGE, JOB_SECRET, or None."""
    if len(raw) > HELLO_LIMIT:
        return None
    for text, sealed in ((raw, False), (raw[seal.TAG_BYTES:], True)):
        try:
            word = json.loads(text)
        except ValueError:
            continue
        held = word.get("held") if isinstance(word, dict) else None
        if held == (JOB_SECRET if sealed else EXCHANGE):
            return str(held)
    return None


def _exchange(store: Any, prefix: str, rank: int, world_size: int, mine: bytes) -> Seal:
    """The key without a job secret: the hash of every rank's draw, all_gathered over a gloo
    group of the ranks. Raises RuntimeError when the group cannot form within the timeout."""
    if world_size == 1:
        return Seal(mine)
    import torch
    import torch.distributed as dist

    group = dist.ProcessGroupGloo(dist.PrefixStore(prefix + "seal/", store), rank, world_size,
                                  timedelta(seconds=AGREE_TIMEOUT_S))
    try:
        drawn = [torch.empty(DRAW_BYTES, dtype=torch.uint8) for _ in range(world_size)]
        group.allgather([drawn], [torch.frombuffer(bytearray(mine), dtype=torch.uint8)]).wait()
    finally:
        del group  # its connections close with it
    return Seal(hashlib.sha256(b"".join(t.numpy().tobytes() for t in drawn)).digest())
