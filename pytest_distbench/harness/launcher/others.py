"""Launcher mode, the ranks other than 0: send each test's outcome to rank 0 and apply its
verdict one test late, so rank 0's judging overlaps this rank's bookkeeping."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ...settings import Settings
from ..wire import WorldKey
from . import hang, wire
from .detect import LaunchEnv
from .peerlink import LinkError, PeerLink, new_token
from .session import FAILURE_GRACE_S, START_TIMEOUT_S, LauncherSession

EXIT_AFTER_RANK_0_S = 30.0  # how long a rank waits for rank 0 to exit before it does


class OtherRankSession(LauncherSession):
    reports = False  # no terminal, no files: rank 0 reports for all

    def __init__(self, config: pytest.Config, launch: LaunchEnv) -> None:
        super().__init__(config, launch)
        self.watch = hang.VerdictWatch(self._watch_channel, self.rank)
        self._peer_link: PeerLink | None = None
        self._open_link()
        # The test whose verdict is not read yet, and this rank's own status of it.
        self._pending: tuple[hang.Running, str] | None = None

    def _open_link(self) -> None:
        """Connect to rank 0 where it said in the store."""
        try:
            # Rank 0 admits only a hello that proves this token: joining takes reading the store.
            token = new_token()
            self.channel.set(wire.link_token(self.rank), token.hex())
            if not self.channel.wait([wire.LINK], START_TIMEOUT_S):
                raise LinkError(f"rank 0 did not say where to connect within "
                                f"{START_TIMEOUT_S:g} s")
            address, port = self.channel.get(wire.LINK)
            self._peer_link = PeerLink(address, int(port), self.rank, START_TIMEOUT_S, token)
        except (LinkError, OSError) as exc:
            raise pytest.UsageError(f"launcher mode: rank {self.rank}: {exc}") from None

    def _accept_link(self) -> None:
        """Answer rank 0's challenge once it accepts (after the collection round)."""
        assert self._peer_link is not None
        try:
            self._peer_link.join(START_TIMEOUT_S)
        except LinkError as exc:
            pytest.exit(f"launcher mode: rank {self.rank}: {exc}",
                        returncode=pytest.ExitCode.USAGE_ERROR)

    def _close_link(self) -> None:
        """Kept open until `finish`: rank 0's exit closing it tells this rank it may exit."""

    def _agree_on_the_end(self) -> None:
        if self.channel.wait([wire.END], hang.EXIT_WAIT_S):
            self.pytest_session.exitstatus = self.channel.get(wire.END)["exitstatus"]
        self.channel.set(wire.done(self.rank), 1)
        if self._peer_link is not None:
            # Exit after rank 0: a launcher that stops every rank once one exits non-zero
            # (torchrun) then never stops rank 0 on its way out.
            self._peer_link.wait_closed(EXIT_AFTER_RANK_0_S)
            self._peer_link.close()

    def _stop_tests(self) -> None:
        """Stay until rank 0 has reported and exited: a rank that left now would look dead to
        it, beside the one that died."""
        if self._peer_link is not None:
            self._peer_link.wait_hung_up(EXIT_AFTER_RANK_0_S)
        hang.exit_now(hang.EXIT_CODE, f"distbench rank {self.rank}: stopped by the launcher "
                                      "(SIGTERM); exiting after rank 0")

    def _send(self, running: hang.Running, outcome: wire.Outcome) -> None:
        assert self._peer_link is not None
        self._peer_link.send(running.index, outcome.to_json())

    def _others_finished(self, running: hang.Running, outcome: wire.Outcome) -> bool:
        # Rank 0 sends its verdict once every rank has finished: that is what to wait for.
        self._send(running, outcome)
        assert self._peer_link is not None
        return self._peer_link.ready(FAILURE_GRACE_S)

    def _after_body(self, item: pytest.Function, settings: Settings, key: WorldKey,
                    running: hang.Running, outcome: wire.Outcome) -> list[dict[str, Any]]:
        """End the test on this rank without waiting for rank 0's verdict.

        `settle` reads the verdict before the next body runs (or at the end of the session).
        This rank's own outcome is its provisional result: a failure stays a failure (any
        failed rank fails the test); a pass or skip that rank 0 turns into a failure is
        counted when the verdict is read, so exit codes and --maxfail agree with rank 0.
        """
        if outcome.status == "passed":  # a failed rank sent its outcome before its grace wait
            self._send(running, outcome)
        self._pending = (running, outcome.status)
        if outcome.status == "failed":
            pytest.fail(outcome.message, pytrace=False)
        if outcome.status == "skipped":
            pytest.skip(outcome.message)
        if outcome.status == "xfailed":
            pytest.xfail(outcome.message)
        return []

    def settle(self) -> None:
        """Read and apply the verdict still pending, if any (blocking)."""
        if self._pending is None:
            return
        running, provisional = self._pending
        self._pending = None
        assert self._peer_link is not None
        data = self._peer_link.verdict(running.index, running.timeout_s + hang.VERDICT_MARGIN_S)
        if data is None and self._peer_link.lost and self.watch.disarm():
            # Rank 0 ends its connection only after its last verdict, or when it is gone (a
            # hang's report is the verdict watch's to finish: it has disarmed nothing then).
            hang.exit_now(hang.EXIT_CODE, f"distbench rank {self.rank}: lost rank 0 during "
                                          f"{running.item.nodeid} (its connection closed); "
                                          "exiting")
        verdict = None if data is None else wire.Verdict.from_json(data)
        if verdict is None or verdict.status == "hung":
            hang.park()  # the verdict watch reports the stack and ends the process
            return
        self.watch.disarm()
        if verdict.rebuild:
            self._close_world(graceful=False)
        if verdict.status == "failed" and provisional != "failed":
            _report_late_failure(running.item, verdict.message)


def _report_late_failure(item: pytest.Item, message: str) -> None:
    """A test this rank ended as passed or skipped failed on rank 0's verdict: report it as
    failed now, through the same hook, so the session's failure count (exit code, --maxfail)
    is rank 0's."""
    now = time.time()
    item.ihook.pytest_runtest_logreport(report=pytest.TestReport(
        item.nodeid, item.location, {k: 1 for k in item.keywords}, "failed",
        f"failed on rank 0's verdict:\n{message}", "call", sections=[], duration=0.0,
        start=now, stop=now))
