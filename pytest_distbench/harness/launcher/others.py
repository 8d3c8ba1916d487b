"""Launcher mode, the ranks other than 0: post each test's outcome for rank 0 and apply its
verdict one test late, so rank 0's judging overlaps this rank's bookkeeping."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from ...settings import Settings
from ..controller.points import Point
from ..ranks.leftovers import is_running
from ..wire import WorldKey
from . import hang, wire
from .detect import LaunchEnv
from .liveness import BEAT_S, GONE_VALUE
from .seal import Forged
from .session import FAILURE_GRACE_S, LauncherSession
from .storechannel import StoreChannel, StoreLost, open_store

EXIT_AFTER_RANK_0_S = 30.0  # how long a rank waits for rank 0 to exit before it does
RANK_0_ENDED_S = 3 * BEAT_S  # rank 0 on another host: its heartbeat silent this long, it exited


class OtherRankSession(LauncherSession):
    reports = False  # no terminal, no files: rank 0 reports for all

    def __init__(self, config: pytest.Config, launch: LaunchEnv) -> None:
        super().__init__(config, launch)
        self.watch = hang.VerdictWatch(self._watch_channel, self.rank)
        # The test whose verdict is not read yet, and this rank's own status of it.
        self._pending: tuple[hang.Running, str] | None = None

    def _agree_on_the_end(self) -> None:
        if self.channel.wait([wire.END], hang.EXIT_WAIT_S):
            try:
                self.pytest_session.exitstatus = self.channel.get(wire.END)["exitstatus"]
            except Forged as exc:  # this rank's own status stands
                hang.write_stderr(f"distbench rank {self.rank}: refused the end status: {exc}")
        # No store call of this rank may be in flight when rank 0 exits with the store it
        # hosts: torch prints each one cut off ("recvValue failed ... reset by peer"). So the
        # heartbeat stops before rank 0 may go (rank 0 beats until it exits: ranks on other
        # hosts see it go by that).
        if self._heartbeat is not None:
            self._heartbeat.stop()
        self.channel.set(wire.done(self.rank), 1)
        # Exit after rank 0: a launcher that stops every rank once one exits non-zero
        # (torchrun) then never stops rank 0 on its way out.
        self._wait_for_rank_0_to_exit(self.channel)

    def _wait_for_rank_0_to_exit(self, channel: StoreChannel) -> None:
        deadline = time.monotonic() + EXIT_AFTER_RANK_0_S
        if 0 in self.peers.pids:  # on this host: its process says, with no store call to cut
            while is_running(self.peers.pids[0]) and time.monotonic() < deadline:
                time.sleep(0.02)
            return
        try:
            while not self.peers.gone(channel, [0], RANK_0_ENDED_S):
                if time.monotonic() >= deadline:
                    return
                time.sleep(BEAT_S)
        except StoreLost:
            pass  # rank 0 hosted the store: gone with it

    def _stop_tests(self) -> None:
        """Say so in the store (rank 0 tells this rank from one that died), then stay until
        rank 0 has reported and exited."""
        try:
            channel = StoreChannel(open_store(self.launch.master_addr, self.launch.master_port,
                                              master=False, timeout_s=5.0), self.prefix)
            channel.set(wire.stopped(self.rank), 1)
            self._wait_for_rank_0_to_exit(channel)
        except (StoreLost, RuntimeError):  # RuntimeError: connecting failed
            pass  # rank 0 hosted the store and is gone
        hang.exit_now(hang.EXIT_CODE, f"distbench rank {self.rank}: stopped by the launcher "
                                      "(SIGTERM); exiting after rank 0")

    def _store_lost(self, item: pytest.Function, exc: StoreLost) -> list[Point]:
        # rank 0 hosted the store, and is gone
        if self.watch.disarm():
            self._lost_rank_0(item, f"the store stopped answering: {exc}")
        hang.park()  # the verdict watch ends the process
        return []

    def _send(self, running: hang.Running, outcome: wire.Outcome) -> None:
        self.channel.set_text(running.key(wire.outcome(self.rank)),
                              capped(outcome, self.rank))

    def _others_finished(self, running: hang.Running, outcome: wire.Outcome) -> bool:
        # Rank 0 gives its verdict once every rank has finished: that is what to wait for.
        self._send(running, outcome)
        return self.channel.poll([running.key(wire.VERDICT)], FAILURE_GRACE_S)

    def _after_body(self, item: pytest.Function, settings: Settings, key: WorldKey,
                    running: hang.Running, outcome: wire.Outcome) -> list[Point]:
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
        data = self._read_verdict(running)
        verdict = None if data is None else wire.Verdict.from_json(data)
        if verdict is None or verdict.status == "hung":
            if verdict is not None and self.watch.disarm():
                # Rank 0 ended the run during a test this rank had finished: once its report
                # is out there is nothing left to do here.
                try:
                    self.channel.wait([running.key(wire.EXIT)],
                                      hang.STACK_WAIT_S + hang.EXIT_WAIT_S)
                except StoreLost:
                    pass  # rank 0 hosted the store, and has exited
                hang.exit_now()
            hang.park()  # the verdict watch reports the stack and ends the process
            return
        self.watch.disarm()
        self.channel.delete(running.key(wire.outcome(self.rank)))  # rank 0 has read it
        if verdict.rebuild:
            self._close_world(graceful=False)
        if verdict.status == "failed" and provisional != "failed":
            _report_late_failure(running.item, verdict.message)

    def _read_verdict(self, running: hang.Running) -> Any | None:
        """Rank 0's verdict on the running test; None past the timeout and margin. Exits at
        once when rank 0 is gone (a hang's report is the verdict watch's to finish: it has
        disarmed nothing then)."""
        key = running.key(wire.VERDICT)
        assert self._heartbeat is not None
        self._heartbeat.expect([0], lambda r: key)
        try:
            if not self.channel.wait([key], running.timeout_s + hang.VERDICT_MARGIN_S):
                return None
            data = self.channel.get(key)
        except StoreLost as exc:
            if self.watch.disarm():
                self._lost_rank_0(running.item, f"the store stopped answering: {exc}")
            return None
        except Forged as exc:  # rank 0's verdict cannot be told: this rank cannot follow it
            if self.watch.disarm():
                self._lost_rank_0(running.item, str(exc))
            return None
        finally:
            self._heartbeat.expect_nothing()
        if data == GONE_VALUE:
            if self.watch.disarm():
                self._lost_rank_0(running.item, "it is gone: its process ended or its "
                                                "heartbeat stopped")
            return None
        return data

    def _lost_rank_0(self, item: pytest.Item, why: str) -> None:
        hang.exit_now(hang.EXIT_CODE, f"distbench rank {self.rank}: lost rank 0 during "
                                      f"{item.nodeid} ({why}); exiting")


def _report_late_failure(item: pytest.Item, message: str) -> None:
    """A test this rank ended as passed or skipped failed on rank 0's verdict: report it as
    failed now, through the same hook, so the session's failure count (exit code, --maxfail)
    is rank 0's."""
    now = time.time()
    item.ihook.pytest_runtest_logreport(report=pytest.TestReport(
        item.nodeid, item.location, {k: 1 for k in item.keywords}, "failed",
        f"failed on rank 0's verdict:\n{message}", "call", sections=[], duration=0.0,
        start=now, stop=now))


def capped(outcome: wire.Outcome, rank: int) -> str:
    """The outcome as posted: JSON, or a failure saying so where it is over the limit."""
    text = json.dumps(outcome.to_json(), default=repr)
    size = len(text.encode())
    if size <= wire.OUTCOME_LIMIT:
        return text
    return json.dumps(wire.Outcome(
        "failed", f"rank {rank}'s outcome of this test is {size} bytes as JSON, over the "
        f"{wire.OUTCOME_LIMIT} bytes a rank may post to rank 0 through the launcher's store "
        "(most of it is raw samples and printed output: measure fewer iterations or for a "
        "shorter duration, print less)", [], "", outcome.order, outcome.released,
        outcome.info, outcome.rebuild).to_json())
