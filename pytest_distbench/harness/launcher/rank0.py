"""Launcher mode, rank 0: gathers every rank's outcome, judges the test, sends the verdict,
reports for all (and, when a test outlives its timeout, reports the hang and ends the run)."""

from __future__ import annotations

import json
import sys
import time
import traceback

import pytest

from ...settings import Settings
from ..controller.live import LivePrinter, terminal_stream
from ..controller.outcome import judge
from ..controller.points import Point
from ..failures import RunResult, describe_problems, tag
from ..wire import TestOutcome, WorldKey
from . import hang, wire
from .detect import LaunchEnv
from .liveness import is_gone
from .seal import Forged
from .session import DONE_TIMEOUT_S, FAILURE_GRACE_S, STOP_LOOK_S, GateCheck, LauncherSession
from .storechannel import StoreChannel


class RankZeroSession(LauncherSession):
    def __init__(self, config: pytest.Config, launch: LaunchEnv, gate_check: GateCheck) -> None:
        super().__init__(config, launch)
        self.gate_check = gate_check
        self.watch = hang.DeadlineWatch(self._report_hang)
        # Rank 0 prints the live reports of its own Reporter thread (harness/controller/live.py).
        self._live_stream = terminal_stream()
        self._live: LivePrinter | None = None
        # Rank 0 sends no outcome: the hang report reads its own from here.
        self._own: tuple[int, wire.Outcome] | None = None  # (test index, outcome)

    # -- the per-test outcomes -------------------------------------------------------------

    def _gather(self, running: hang.Running, timeout_s: float, poll: bool = False
                ) -> dict[int, wire.Outcome] | None:
        """The other ranks' outcomes of the running test; None if some did not come in time
        or a rank is gone (liveness.py). `poll` for a short wait that may time out."""
        others = list(range(1, self.world_size))
        keys = [running.key(wire.outcome(r)) for r in others]
        assert self._heartbeat is not None
        self._heartbeat.expect(others, lambda r: running.key(wire.outcome(r)))
        try:
            wait = self.channel.poll if poll else self.channel.wait
            if not wait(keys, timeout_s):
                return None
            raws = self.channel.get_texts(keys)
        finally:
            self._heartbeat.expect_nothing()
        if any(map(is_gone, raws)):
            return None
        return {r: _read_outcome(r, raw) for r, raw in zip(others, raws, strict=True)}

    def _agree_on_the_end(self) -> None:
        # The report must be out before the others may exit (a pipe holds it in a buffer).
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            if stream is not None:
                stream.flush()
        status = int(self.pytest_session.exitstatus)
        self.channel.set(wire.END, {"exitstatus": status})
        if self._hosting:  # the store must outlive the others' last read of it
            self.channel.wait([wire.done(r) for r in range(1, self.world_size)], DONE_TIMEOUT_S)

    def _posted(self, running: hang.Running, channel: StoreChannel
                ) -> tuple[dict[int, wire.Outcome], list[int], list[int]]:
        """The outcomes of the running test posted so far; the ranks whose outcome has not
        come; those of them already marked gone."""
        others = range(1, self.world_size)
        present = [r for r in others if channel.has(running.key(wire.outcome(r)))]
        raws = dict(zip(present, channel.get_texts(
            [running.key(wire.outcome(r)) for r in present]), strict=True))
        gone = [r for r, raw in raws.items() if is_gone(raw)]
        posted = {r: _read_outcome(r, raw) for r, raw in raws.items() if r not in gone}
        return posted, [r for r in others if r not in posted], gone

    def _dead(self, running: hang.Running, channel: StoreChannel | None = None) -> list[int]:
        """Ranks gone before they posted this test's outcome: they died."""
        channel = channel or self.channel
        _, pending, gone = self._posted(running, channel)
        return sorted(set(gone) | set(self.peers.gone(channel, [r for r in pending
                                                                if r not in gone])))

    def _close_own(self) -> None:
        if self._live_stream is not None:
            self._live_stream.close()
            self._live_stream = None

    # -- one test ---------------------------------------------------------------------------

    def _printer(self, item: pytest.Function, report_every_s: float | None
                 ) -> LivePrinter | None:
        self._live = None
        if report_every_s:
            self._live = LivePrinter(self.config, self._live_stream)
        return self._live

    def _others_finished(self, running: hang.Running, outcome: wire.Outcome) -> bool:
        return self._gather(running, FAILURE_GRACE_S, poll=True) is not None

    def _after_body(self, item: pytest.Function, settings: Settings, key: WorldKey,
                    running: hang.Running, outcome: wire.Outcome) -> list[Point]:
        self._own = (running.index, outcome)
        # The deadline watch acts at the test's deadline; this bound is a backstop.
        others = self._gather(running, settings.timeout + hang.STACK_WAIT_S)
        if not self.watch.disarm():
            hang.park()  # the deadline watch reports the hang and ends the process
        if others is None:  # a rank is gone, or past the deadline before the watch ran
            self._report_hang(running, dead=self._dead(running))
            hang.exit_now()
        posted = {0: outcome, **others}
        if any(o.status != "passed" for o in posted.values()):
            self._read_releases(running, posted)
        _, verdict = self._judge(item, settings, key, posted)
        self._send_verdict(running, verdict)
        if verdict.rebuild:  # a rank that released the others has already closed its own
            self._close_world(graceful=False)
        if verdict.status == "failed":
            pytest.fail(verdict.message, pytrace=False)
        if verdict.status == "skipped":
            pytest.skip(verdict.message)
        if verdict.status == "xfailed":
            pytest.xfail(verdict.message)
        return []  # kept and gated in _judge, before the verdict

    def _send_verdict(self, running: hang.Running, verdict: wire.Verdict) -> None:
        if self.world_size > 1:
            self.channel.set(running.key(wire.VERDICT), verdict.to_json())

    def _read_releases(self, running: hang.Running, posted: dict[int, wire.Outcome]) -> None:
        """Which ranks released the others (they said so after sending their outcome)."""
        for r in range(1, self.world_size):
            key = running.key(wire.released(r))
            if self.channel.has(key) and not isinstance(self.channel.get_texts([key])[0],
                                                        Forged):
                posted[r].released = True

    def _judge(self, item: pytest.Function, settings: Settings, key: WorldKey,
               posted: dict[int, wire.Outcome]) -> tuple[list[Point], wire.Verdict]:
        """The test's points (kept, gated) and the verdict every rank applies."""
        self.add_rank_infos(o.info for o in posted.values() if o.info)
        rebuild = any(o.status == "failed" or o.released or o.rebuild for o in posted.values())
        verdict = wire.Verdict("passed", "", rebuild)
        points: list[Point] = []
        try:
            live = self._live.reports if self._live is not None else {}
            points = judge(item, key, run_result(posted), settings, live_reports=live,
                           keep=self.points)
            if self._live is not None:
                self._live.finish(self.view(points))
            self.gate_check(item, points, settings, self.view)
        except pytest.xfail.Exception as exc:  # before pytest.fail's: XFailed is a Failed
            verdict.status, verdict.message = "xfailed", str(exc.msg)
        except pytest.fail.Exception as exc:
            verdict.status, verdict.message = "failed", str(exc.msg)
        except pytest.skip.Exception as exc:
            verdict.status, verdict.message = "skipped", str(exc.msg)
        except Exception:  # noqa: BLE001 - a harness bug still gives every rank one verdict
            verdict.status, verdict.message = "failed", traceback.format_exc()
            verdict.rebuild = True
        return points, verdict

    def _stop_tests(self) -> None:
        # The deadline watch reports the running test (or the next one armed) at once.
        self.watch.expire_now()

    def _dead_at_stop(self, running: hang.Running) -> list[int]:
        """The ranks that died, as the launcher's SIGTERM comes: every live rank says in the
        store that it got the SIGTERM too; a rank that has not posted its outcome and says
        nothing within STOP_LOOK_S (or whose process is gone first) died."""
        ch = self._watch_channel
        deadline = time.monotonic() + STOP_LOOK_S
        while True:
            silent = [r for r in self._posted(running, ch)[1] if not ch.has(wire.stopped(r))]
            gone = self.peers.gone(ch, silent)
            if len(gone) == len(silent) or time.monotonic() >= deadline:
                return silent
            time.sleep(0.02)

    def _report_hang(self, running: hang.Running, dead: list[int] | None = None) -> None:
        """The deadline watch, in its own thread (or the main thread when ranks died): declare,
        collect the live ranks' stacks, report, exit. Also when the launcher stops the run."""
        ch = self._watch_channel
        stopped = self.stopped
        if dead is None and stopped:
            dead = self._dead_at_stop(running)
        dead = dead or []
        own = self._own[1] if self._own is not None and self._own[0] == running.index else None
        arrived, missing, _ = self._posted(running, ch)
        pending = ([0] if own is None else []) + missing
        ch.set(running.key(wire.VERDICT), {"status": "hung", "pending": pending})
        stacks = {0: hang.main_thread_stack(str(running.item.path))} if 0 in pending else {}
        others = [r for r in pending if r != 0 and r not in dead]
        # A death or the launcher's stop ends the run now (the launcher's SIGKILL follows):
        # the live ranks' stacks come at their deadline only.
        if not dead and not stopped:
            ch.wait([running.key(wire.stack(r)) for r in others], hang.STACK_WAIT_S)
            for r in others:
                stacks[r] = _stack(ch, running.key(wire.stack(r)))
        finished = {r: own if r == 0 else arrived[r]
                    for r in range(self.world_size) if r not in pending}
        cannot = ("In launcher mode the ranks cannot be replaced: the remaining tests are not "
                  "run and every rank exits.")
        by_launcher = f"{self.launch.launcher} stopped the ranks (SIGTERM)"
        if dead:
            lines = [f"rank {r} ({self.hosts.get(r, '?')}) died during the test: it left "
                     "without posting its outcome (its exit status is in the launcher's log)"
                     for r in dead]
            lines += [f"{by_launcher} after that."] if stopped else []
            lines.append(cannot)
            cause = f"lost rank {dead[0]}" if len(dead) == 1 else f"lost ranks {dead}"
        elif stopped:
            lines = [f"{by_launcher} during the test, with every rank still there "
                     f"(ranks {pending} had not finished it). {cannot}"]
            cause = "was stopped by the launcher"
        else:
            lines = [f"timed out after {running.timeout_s:g} s (--distbench-timeout): ranks "
                     f"{pending} did not finish. {cannot} Stacks of the live ranks:"]
            for r, stack in sorted(stacks.items()):
                lines.append(f"--- rank {r} ({self.hosts.get(r, '?')}) ---")
                lines.append(tag(r, stack))
            cause = "hung"
        failure = describe_problems(run_result(finished), running.timeout_s)  # type: ignore[arg-type]
        if failure:
            lines += ["", "Before that:", failure]
        self.aborting = True
        try:
            hang.report_hang_and_exit(self.config, self.pytest_session, running,
                                      "\n".join(lines), cause)
        finally:
            hang.flush()
            ch.set(running.key(wire.EXIT), 1)  # the others may exit now: the report is out
            ch.set(wire.END, {"exitstatus": hang.EXIT_CODE})


def _read_outcome(rank: int, raw: bytes | Forged) -> wire.Outcome:
    """A rank's posted outcome; a failed one naming the fault when it is not one."""
    if isinstance(raw, Forged):
        return wire.Outcome("failed", f"rank 0 refused rank {rank}'s outcome: {raw}", [], "")
    try:
        if len(raw) > wire.OUTCOME_LIMIT:
            raise wire.WireError(f"{len(raw)} bytes, over the {wire.OUTCOME_LIMIT} byte limit")
        return wire.Outcome.from_json(json.loads(raw))
    except (ValueError, RecursionError) as exc:  # WireError, bad JSON, nested too deep
        return wire.Outcome("failed", f"rank {rank} posted an outcome rank 0 cannot read: "
                                      f"{str(exc)[:200]}", [], "")


def _stack(channel: StoreChannel, key: str) -> str:
    """A hung rank's stack as it posted it."""
    if not channel.has(key):
        return "(no stack: the rank did not answer)"
    try:
        return str(channel.get(key))
    except Forged as exc:
        return f"(no stack: {exc})"


def run_result(posted: dict[int, wire.Outcome]) -> RunResult:
    """The ranks' outcomes as the outcome pipeline takes them."""
    return RunResult(
        outcomes={r: TestOutcome(rank=r, status=o.status, message=o.message,
                                 measurements=o.measurements,
                                 rebuild=o.rebuild)
                  for r, o in posted.items()},
        output={r: o.output for r, o in posted.items() if o.output},
        # Also of the ranks that skipped: a failure after their release is not one (judge).
        failure_order={r: o.order or 0 for r, o in posted.items() if o.status != "passed"},
        releasers=[r for r, o in sorted(posted.items()) if o.released])
