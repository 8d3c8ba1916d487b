"""Launcher mode's wire: what the ranks send each other, and the store keys they meet at.

Per test, each rank other than 0 posts rank 0 one Outcome and reads one Verdict back; these,
and everything else, go through the launcher's store under the keys below, all under the
run's prefix (`distbench/<run id>/`). All travel as JSON: launcher mode may cross a real
network, and a peer's bytes are never unpickled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..codec import WireError as WireError  # rank 0 names what it cannot read
from ..codec import from_json, to_json
from ..wire import Measurement

# Outcomes carry every raw sample of every measurement (and the test's captured output): a
# duration-bound run can take millions of samples, about 20 bytes each as JSON.
OUTCOME_LIMIT = 64 << 20


def beat(rank: int) -> str:
    """A rank's heartbeat counter (liveness.py)."""
    return f"beat/{rank}"


def stopped(rank: int) -> str:
    """A rank got the launcher's SIGTERM and is alive (rank 0 tells it from a rank that died)."""
    return f"stopped/{rank}"


def collected(rank: int) -> str:
    """A rank's collected node ids (read by rank 0 to name the first difference)."""
    return f"collected/{rank}"


def posted(round_name: str, rank: int) -> str:
    """A rank's value in an agreement round."""
    return f"{round_name}/{rank}"


def decision(round_name: str) -> str:
    """Rank 0's answer to an agreement round."""
    return f"{round_name}/decision"


def done(rank: int) -> str:
    """A rank finished its session (rank 0's store outlives the others' last use)."""
    return f"done/{rank}"


END = "end"  # rank 0 finished reporting: {"exitstatus": N}, every rank's exit status


def of_test(index: int, name: str) -> str:
    """A key about one test, by its index in the collected items."""
    return f"t{index}/{name}"


def outcome(rank: int) -> str:
    """Per test: a rank's Outcome, for rank 0."""
    return f"outcome/{rank}"


# Per-test names, under of_test(index, ...).
FAILURES = "failures"  # a counter: the order in which ranks failed
VERDICT = "verdict"  # rank 0's Verdict; {"status": "hung", ...} when the run ends in the test
EXIT = "exit"  # rank 0's hang report is out: the others may exit


def released(rank: int) -> str:
    """A failed rank closed its process group to release the others."""
    return f"released/{rank}"


def stack(rank: int) -> str:
    """A hung test's stack of one rank, for rank 0's report."""
    return f"stack/{rank}"


@dataclass
class Outcome:
    """One rank's end of one test."""

    status: str  # "passed", "failed", "skipped" or "xfailed"
    message: str
    measurements: list[Measurement]
    output: str  # what the rank printed during the test
    order: int | None = None  # the rank's place among the failed ranks (FAILURES)
    released: bool = False  # it closed its process group to release the others
    info: dict[str, Any] | None = None  # what the rank saw of its world when it joined
    rebuild: str = ""  # why its world cannot host another test (wire.TestOutcome.rebuild)

    def to_json(self) -> dict[str, Any]:
        return to_json(self)

    @classmethod
    def from_json(cls, data: Any) -> Outcome:
        outcome = from_json(cls, data)
        if outcome.status not in ("passed", "failed", "skipped", "xfailed"):
            raise WireError(f"outcome status {outcome.status!r}")
        return outcome


@dataclass
class Verdict:
    """Rank 0's judgement of one test, applied by every rank."""

    status: str  # "passed", "failed", "skipped", "xfailed"; "hung" only through the store
    message: str = ""
    rebuild: bool = False  # every rank leaves and rejoins its process group

    def to_json(self) -> dict[str, Any]:
        return to_json(self)

    @classmethod
    def from_json(cls, data: Any) -> Verdict:
        if isinstance(data, dict) and data.get("status") == "hung":
            return cls("hung")
        return from_json(cls, data)
