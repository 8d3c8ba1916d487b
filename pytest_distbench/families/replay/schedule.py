"""Would a trace's replay hang? Every rank's calls played out as step.py issues and waits for
them, in time and memory linear in the calls (no torch).

A rank issues its calls in order and, before issuing call i, waits for the calls the trace
has it wait for there (`waits_before`, the very rule step.py replays). A collective completes
once every member of its group has issued its counterpart (the j-th collective of that group
in each); a send once its receive is issued, and a receive once its send is. Counterparts must
be the same call: op, bytes, dtypes, reduce op and root for a collective; bytes and dtypes for
a send and its receive. A trace where some rank can never go on (two groups waited in opposite
orders by two ranks, a receive without its send, a broadcast whose root differs between
ranks) is refused with a TraceError saying where.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Sequence

from .fields import TraceError

POINT_TO_POINT = ("send", "recv")  # the trace format's ops that are not collectives
_SEND, _RECV = -1, -2  # a call's kind in a Schedule: one of these, or its group's id


def implied_waits(ops: Sequence[str], ends: Sequence[int]) -> list[int | None]:
    """Where each call `i` is waited when the program's own wait is not known, as an index
    below `ends[i]` (None: at that end, its step's): at once, but a point-to-point call
    together with its neighbours, before the next collective, so that an exchange in which
    both ranks send first cannot deadlock in a replay. The capture and the PARAM reader record
    it; the replay (step.py) holds every point-to-point call's wait at least that late,
    whatever a trace says. One pass from the end: linear in the calls."""
    n = len(ops)
    found: list[int | None] = [None] * n
    collective = n  # the first collective after call k
    for k in range(n - 1, -1, -1):
        at = collective if ops[k] in POINT_TO_POINT else k + 1
        found[k] = at if at < ends[k] else None
        if ops[k] not in POINT_TO_POINT:
            collective = k
    return found


def due_points(ops: Sequence[str], waits: Sequence[int | None]) -> list[int]:
    """For each call, the index of the call before which the replay waits for it (len(ops):
    at the step's end): where the trace says, but a run of consecutive sends and receives is
    issued as a whole before any of them is waited for (a pair recorded as blocking on each
    side in opposite orders, NCCL's small sends completing before their receive is posted,
    would otherwise hang)."""
    n = len(ops)
    due = [n if w is None else w for w in waits]
    run_end = n
    for k in range(n - 1, -1, -1):  # one pass from the end: each run's end known in O(1)
        if ops[k] not in POINT_TO_POINT:
            run_end = k
        else:
            due[k] = max(due[k], run_end)
    return due


def waits_before(due: Sequence[int]) -> list[list[int]]:
    """For each call index i (and len(due): the step's end), the calls waited for before
    issuing call i."""
    found: list[list[int]] = [[] for _ in range(len(due) + 1)]
    for k, at in enumerate(due):
        found[at].append(k)
    return found


class Schedule:
    """One rank's calls as the check needs them: kind (group id, or send/receive and peer),
    the signature its counterpart must share, and where each is waited. About 30 bytes a
    call, whatever the trace file spends on it."""

    __slots__ = ("due", "keys", "names", "sigs")

    def __init__(self) -> None:
        # A collective's group id (>= 0); a send to rank p: -1 - 2p; a receive from p: -2 - 2p.
        self.keys = array("q")
        self.sigs = array("q")  # hash of what its counterpart must match
        self.due = array("q")
        self.names: list[str] = []  # op per call (interned strings: a pointer each)

    def add(self, op: str, group: int, peer: int | None, signature: tuple) -> None:
        self.names.append(op)
        if op in POINT_TO_POINT:
            self.keys.append(-1 - 2 * (peer or 0) - (op == "recv"))
        else:
            self.keys.append(group)
        self.sigs.append(hash(signature))

    def close(self, waits: Sequence[int | None]) -> None:
        self.due = array("q", due_points(self.names, waits))


def check(schedules: dict[int, Schedule], groups: dict[int, tuple[int, ...]],
          where: str) -> None:
    """Play every rank's calls out (see the module's docstring); TraceError naming where a
    replay would hang."""
    _Played(schedules, groups, where).run()


class _Played:
    """The state of one play-out: which calls each rank has issued and which completed."""

    def __init__(self, schedules: dict[int, Schedule], groups: dict[int, tuple[int, ...]],
                 where: str) -> None:
        self.s, self.groups, self.where = schedules, groups, where
        self.pc = dict.fromkeys(schedules, 0)
        self.done = {r: bytearray(len(s.names)) for r, s in schedules.items()}
        # Each rank's calls in the order they are waited for: one counting sort per rank.
        self.order = {r: _by_due(s.due) for r, s in schedules.items()}
        self.waited = dict.fromkeys(schedules, 0)
        self.blocked: dict[int, int] = {}  # rank -> the call it waits for
        self.issued_in: dict[tuple[int, int], int] = {}  # (rank, group) -> collectives issued
        # (group, j) -> [signature, first rank, its call, [(rank, call) issued]]
        self.open: dict[tuple[int, int], list] = {}
        self.unmatched: dict[tuple[int, int, bool], deque] = {}  # (src, dst, is send) -> calls
        self.ready = deque(schedules)

    def run(self) -> None:
        while self.ready:
            self._advance(self.ready.popleft())
        if self.blocked:
            raise TraceError(self._why(min(self.blocked)))

    def _advance(self, r: int) -> None:
        s, done, order = self.s[r], self.done[r], self.order[r]
        n = len(s.names)
        while True:
            i = self.pc[r]
            while self.waited[r] < n and s.due[order[self.waited[r]]] <= i:
                k = order[self.waited[r]]
                if not done[k]:
                    self.blocked[r] = k
                    return
                self.waited[r] += 1
            if i == n:
                return
            self._issue(r, i)
            self.pc[r] = i + 1

    def _complete(self, r: int, k: int) -> None:
        self.done[r][k] = 1
        if self.blocked.get(r) == k:
            del self.blocked[r]
            self.ready.append(r)

    def _issue(self, r: int, i: int) -> None:
        s = self.s[r]
        key, sig = s.keys[i], s.sigs[i]
        if key < 0:
            self._issue_p2p(r, i, key, sig)
            return
        members = self.groups[key]
        j = self.issued_in.get((r, key), 0)
        self.issued_in[(r, key)] = j + 1
        entry = self.open.get((key, j))
        if entry is None:
            entry = self.open[(key, j)] = [sig, r, i, []]
        elif entry[0] != sig:
            other = self.s[entry[1]].names[entry[2]]
            raise TraceError(
                f"{self.where}: group {key} {_ranks(members)}: rank {entry[1]} and rank {r} "
                f"differ at their collective {j} in that group ({other} and {s.names[i]}: "
                "op, bytes, dtype, reduce op or root; a replay would hang)")
        entry[3].append((r, i))
        if len(entry[3]) == len(members):
            del self.open[(key, j)]
            for rank, call in entry[3]:
                self._complete(rank, call)

    def _issue_p2p(self, r: int, i: int, key: int, sig: int) -> None:
        peer, sending = _peer(key), (-1 - key) % 2 == 0
        src, dst = (r, peer) if sending else (peer, r)
        waiting = self.unmatched.get((src, dst, not sending))
        if not waiting:
            self.unmatched.setdefault((src, dst, sending), deque()).append((r, i))
            return
        rank, call = waiting.popleft()
        if self.s[rank].sigs[call] != sig:
            raise TraceError(f"{self.where}: rank {src}'s sends to rank {dst} do not match rank "
                             f"{dst}'s receives from rank {src} in size or dtype (a replay "
                             "would hang)")
        self._complete(r, i)
        self._complete(rank, call)

    def _why(self, r: int) -> str:
        """Why rank `r` cannot go on: the call it waits for, and the rank that never joins."""
        k = self.blocked[r]
        s = self.s[r]
        key = s.keys[k]
        if key >= 0:
            members = self.groups[key]
            j = next(j for (g, j), e in self.open.items() if g == key and (r, k) in e[3])
            q = next(m for m in members if self.issued_in.get((m, key), 0) <= j)
            waiting = (f"rank {r} waits for its call {k} ({s.names[k]}, collective {j} of "
                       f"group {key} {_ranks(members)})")
        else:
            q = _peer(key)
            waiting = f"rank {r} waits for its call {k} ({s.names[k]} with rank {q})"
        if q in self.blocked:
            k2 = self.blocked[q]
            return (f"{self.where}: a replay would hang: {waiting}, which rank {q} does not "
                    f"reach: it waits first for its call {k2} ({self.s[q].names[k2]})")
        if key >= 0:  # rank q's calls in the group ended before
            return (f"{self.where}: group {key} {_ranks(self.groups[key])}: rank {r} and rank "
                    f"{q} differ at their collective {j} in that group (rank {q} issues only "
                    f"{self.issued_in.get((q, key), 0)} there; a replay would hang)")
        src, dst = (r, q) if s.names[k] == "send" else (q, r)
        return (f"{self.where}: rank {src}'s sends to rank {dst} do not match rank {dst}'s "
                f"receives from rank {src} in count: rank {r}'s call {k} ({s.names[k]}) has "
                "none (a replay would hang)")


def _peer(key: int) -> int:
    return (-1 - key) // 2


def _ranks(members: Sequence[int]) -> str:
    """A group's ranks in a message: all of a small group, the ends of a large one."""
    if len(members) <= 8:
        return str(list(members))
    return f"[{members[0]}, {members[1]}, ... {members[-1]}] ({len(members)} ranks)"


def _by_due(due: Sequence[int]) -> array:
    """Call indices ordered by the index they are waited before (stable)."""
    starts = [0] * (len(due) + 2)
    for at in due:
        starts[at + 1] += 1
    for i in range(1, len(starts)):
        starts[i] += starts[i - 1]
    order = array("q", bytes(8 * len(due)))
    for k, at in enumerate(due):
        order[starts[at]] = k
        starts[at] += 1
    return order
