"""How many intra-op threads a rank's torch uses: torchrun's rule, applied to every world.

torch sizes its intra-op pool to the machine's cores in every process. Eight ranks on two
cores then run sixteen pool threads, and a pinned rank's pool inherits its one CPU: every
parallel op (a tensor compare in a payload check, a softmax over dim 0) waits for threads
that share that CPU with it. torchrun sets OMP_NUM_THREADS=1 when it starts more than one
process per node for the same reason. A user's OMP_NUM_THREADS always wins.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["intra_op_threads"]


def intra_op_threads(env: Mapping[str, str], usable_cpus: int, local_ranks: int,
                     pinned_cpus: int | None) -> int | None:
    """Threads for one rank's intra-op pool: the user's OMP_NUM_THREADS where it is a positive
    integer (set explicitly: a rank forked from a process that imported torch does not read
    it again), None to leave torch alone where it is set to something else.

    `usable_cpus`: CPUs the rank's process may run on; `local_ranks`: ranks on this host
    sharing them; `pinned_cpus`: CPUs the rank's threads are pinned to (None: not pinned).
    A pinned rank gets one thread per pinned CPU; an unpinned one its share of the host's.
    """
    chosen = env.get("OMP_NUM_THREADS", "").strip()
    if chosen:
        return int(chosen) if chosen.isdigit() and int(chosen) > 0 else None
    if pinned_cpus is not None:
        return max(1, pinned_cpus)
    return max(1, usable_cpus // max(1, local_ranks))
