"""What became of one test in every rank (`RunResult`, however it travelled: a local
world's pipes, a launcher's store), and the words for it: the failure or skip pytest shows,
each rank's lines tagged with its rank (controller/outcome.judge says them)."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field

import pytest

from .wire import TestOutcome


@dataclass
class RunResult:
    """What became of one test in every rank."""

    outcomes: dict[int, TestOutcome] = field(default_factory=dict)
    died: dict[int, int | None] = field(default_factory=dict)  # rank -> exit code
    hung: list[int] = field(default_factory=list)  # silent at the deadline
    stopped: list[int] = field(default_factory=list)  # still running after a failure: killed
    # Launcher mode: ranks that closed their process group to release the others, and the
    # order in which the ranks that did not pass ended (the first to fail is the cause).
    releasers: list[int] = field(default_factory=list)
    failure_order: dict[int, int] = field(default_factory=dict)
    stacks: dict[int, str] = field(default_factory=dict)
    output: dict[int, str] = field(default_factory=dict)
    elapsed_s: float = 0.0
    forkserver_gone: int | None = None  # local mode: the pid of the ranks' dead forkserver

    @property
    def clean(self) -> bool:
        """Every rank answered, none failed and none left its world unfit: the world can be
        reused."""
        return not (self.died or self.hung or self.stopped or self.releasers) and all(
            o.status != "failed" and not o.rebuild for o in self.outcomes.values())


def tag(rank: int, text: str) -> str:
    """Every line of `text` prefixed with its rank, as every report shows a rank's lines."""
    return "\n".join(f"[rank {rank}] {line}" for line in text.splitlines())


def prefix_output(output: dict[int, str]) -> str:
    return "\n".join(tag(r, output[r]) for r in sorted(output) if output[r].strip("\n"))


def describe_exit(code: int | None) -> str:
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name} (exit code {code})"
    return f"exited with code {code}"


ENDED_EARLY = ("skipped", "xfailed")  # pytest.skip, pytest.xfail in a body


def only_released_by(result: RunResult, ended: set[int]) -> bool:
    """Whether every rank that failed did so after a rank in `ended` (it skipped or xfailed)
    released it from a collective: launcher mode, where a rank that leaves a test early closes
    its process group after the grace. Their errors are the skip's consequence, not a failure
    (a local world stops such ranks instead)."""
    if not ended or not result.releasers or not set(result.releasers) <= ended:
        return False
    if result.died or result.hung:
        return False
    first = min(result.failure_order.get(r, 0) for r in result.releasers)
    return all(result.failure_order.get(r, 0) > first
               for r, o in result.outcomes.items() if o.status == "failed")


def end_early(result: RunResult, ended: set[int], world_size: int, label: str = "") -> None:
    """A test that some rank skipped or xfailed is skipped (xfailed, when one rank xfailed) in
    every mode, with the reasons, and which ranks when not all of them."""
    reasons = sorted({result.outcomes[r].message for r in ended if result.outcomes[r].message})
    text = "; ".join(reasons) or "skipped in a rank"
    if len(ended) < world_size:
        text += f" (in ranks {sorted(ended)} of {world_size} only)"
    if any(result.outcomes[r].status == "xfailed" for r in ended):
        pytest.xfail(label + text)
    pytest.skip(label + text)


def describe_problems(result: RunResult, timeout_s: float) -> str:
    """Why the test failed in its ranks ("" if it did not): deaths, tracebacks tagged with
    their rank (the first to fail first), a hang's stacks, the ranks released or stopped."""
    parts = []
    if result.forkserver_gone is not None:
        ranks = ", ".join(map(str, sorted(result.died)))
        parts.append(f"the forkserver that forked the ranks (pid {result.forkserver_gone}) died; "
                     f"rank(s) {ranks} died with it (multiprocessing says exit code 255 for each)")
    else:
        parts += [f"rank {r} died during the test: {describe_exit(code)}"
                  for r, code in sorted(result.died.items())]
    failed = sorted((result.failure_order.get(r, 0), r) for r, o in result.outcomes.items()
                    if o.status == "failed")
    for position, (_, r) in enumerate(failed):
        body = tag(r, result.outcomes[r].message)
        if position and result.releasers:
            parts.append(f"rank {r} failed after rank {failed[0][1]} did (released from "
                         f"waiting for it):\n{body}")
        elif result.outcomes[r].rebuild == "leftovers":
            parts.append(f"rank {r} passed, then:\n{body}")
        else:
            parts.append(f"rank {r} raised:\n{body}")
    if result.releasers:
        parts.append(f"ranks {result.releasers} closed their process group to release the "
                     "others; every rank rebuilds it for the next test")
    if result.hung:
        lines = [
            f"timed out after {timeout_s:g} s (--distbench-timeout): ranks {result.hung} did not "
            "finish; the world was killed and will be rebuilt. Stacks of the live ranks:"
        ]
        for r, stack in sorted(result.stacks.items()):
            lines.append(f"--- rank {r} ---")
            lines.append(tag(r, stack))
        parts.append("\n".join(lines))
    if result.stopped and parts:
        parts.append(
            f"ranks {result.stopped} were still running after that and were stopped; "
            "the world will be rebuilt"
        )
    text = "\n\n".join(parts)
    if failed and not result.died:
        # pytest's short test summary shows a failure's first line only: make it the first
        # failing rank's error, as it shows an ordinary test's, not "rank 0 raised:".
        first = failed[0][1]
        text = f"rank {first}: {error_line(result.outcomes[first].message)}\n{text}"
    return text


def error_line(message: str) -> str:
    """The error of a rank's report: its first line that is not a traceback's header or one
    of its indented frame lines (`AssertionError: replicas diverged`)."""
    lines = [line for line in message.splitlines() if line.strip()]
    for line in lines:
        if not line[0].isspace() and not line.startswith("Traceback (most recent call last)"):
            return line
    return lines[0].strip() if lines else "failed"
