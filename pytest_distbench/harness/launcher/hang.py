"""Hangs in launcher mode: the processes cannot be rebuilt, so the session ends, loudly.

Rank 0 keeps a deadline per test (DeadlineWatch). Past it, from its own thread (the main thread
may be stuck in the test body), it declares the test hung in the store, collects the stack of
every rank that did not finish, reports the test as failed and every later test as not run,
finishes the session (tables, results file) and exits non-zero. The other ranks each keep a
VerdictWatch: past the same timeout, a thread reads rank 0's verdict on the running test from
the store; on "hung" it posts its main thread's stack, waits for rank 0 to finish reporting
and exits
non-zero; if rank 0 gives no verdict at all in time (it died, or the store is gone) it exits
non-zero by itself.

A launcher that stops the run (torchrun sends SIGTERM to every rank about 0.1 s after one
dies, and SIGKILL 30 s later) ends it the same way: LauncherStop sees the SIGTERM in a thread of
its own, rank 0's deadline watch fires at once and reports (the dead ranks named, the tests
that passed kept, every requested output written), and the other ranks stay until rank 0 has
exited, so that rank 0 tells the rank that died from those the launcher stopped.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from . import wire
from .seal import Forged
from .storechannel import StoreChannel, StoreLost

if TYPE_CHECKING:
    import pytest

STACK_WAIT_S = 10.0  # how long rank 0 waits for the stacks of the ranks that did not finish
EXIT_WAIT_S = 120.0  # how long a rank waits for rank 0 to finish its report before exiting
VERDICT_MARGIN_S = 60.0  # past the test timeout, how long a rank waits for rank 0's verdict
EXIT_CODE = 1


@dataclass(frozen=True)
class Running:
    """The test a watch is armed for."""

    index: int  # position in the collected items, the same on every rank
    item: pytest.Item
    timeout_s: float
    started: float  # time.monotonic()

    def key(self, name: str) -> str:
        return wire.of_test(self.index, name)


def main_thread_stack(test_file: str | None = None) -> str:
    """The main thread's stack, from the test body down (or from the harness, when the body
    has returned and the rank waits for the others)."""
    frame = sys._current_frames().get(threading.main_thread().ident or -1)
    if frame is None:
        return "(no Python frame in the main thread)"
    frames = traceback.extract_stack(frame)
    starts = [i for i, f in enumerate(frames) if f.filename == test_file]
    if not starts:
        starts = [i for i, f in enumerate(frames) if _HARNESS in f.filename]
    return "".join(traceback.format_list(frames[starts[0] if starts else 0:]))


_HARNESS = os.path.join("pytest_distbench", "harness", "")


def flush() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass


_stderr_fd: int | None = None  # a copy of descriptor 2 from before any test's capture


def keep_stderr() -> None:
    """Take a copy of descriptor 2 now, at the session's start, while pytest's capture is
    suspended: a message written there by exit_now reaches the user even from inside a test,
    whose output pytest captures and which os._exit would lose."""
    global _stderr_fd
    if _stderr_fd is None:
        try:
            _stderr_fd = os.dup(2)
        except OSError:
            _stderr_fd = None


def write_stderr(message: str) -> None:
    """One line to the process's own stderr, past any test's output capture."""
    if _stderr_fd is not None:
        try:
            os.write(_stderr_fd, (message + "\n").encode(errors="replace"))
            return
        except OSError:
            pass
    sys.stderr.write(message + "\n")


def exit_now(code: int = EXIT_CODE, message: str | None = None) -> NoReturn:
    if message:
        write_stderr(message)
    flush()
    os._exit(code)


def park() -> None:
    """The main thread's place once a watch has taken over: the watch ends the process."""
    threading.Event().wait(STACK_WAIT_S + EXIT_WAIT_S + VERDICT_MARGIN_S)
    exit_now(EXIT_CODE, "distbench: the session was ended by a hang and did not exit in time")


class _Watch:
    """One thread that acts when the armed test outlives its timeout.

    Arming and disarming do not wake the thread (a wake-up per test would cost every test a
    thread switch): it sleeps until the deadline of the test it last saw, then looks again.
    """

    def __init__(self, name: str, extra_s: float = 0.0) -> None:
        self._cond = threading.Condition()
        self._running: Running | None = None
        self._extra_s = extra_s
        self._idle = True
        self._fired = False
        self._stopped = False
        self._now = False  # expire_now: every test armed is past its deadline
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def arm(self, running: Running) -> None:
        with self._cond:
            self._running = running
            if self._idle:
                self._cond.notify_all()

    def disarm(self) -> bool:
        """False when the watch already took over the running test (the caller must park)."""
        with self._cond:
            if self._fired:
                return False
            self._running = None
            return True

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def expire_now(self) -> None:
        """The armed test, and any armed later, is past its deadline now."""
        with self._cond:
            self._now = True
            self._cond.notify_all()

    def _claim(self, running: Running) -> bool:
        with self._cond:
            if self._running is not running or self._fired:
                return False
            self._fired = True
            return True

    def _loop(self) -> None:
        done: Running | None = None
        while True:
            with self._cond:
                running = self._running
                if self._stopped:
                    return
                if running is None or running is done:
                    self._idle = True
                    self._cond.wait()
                    self._idle = False
                    continue
                remaining = 0.0 if self._now else (
                    running.started + running.timeout_s + self._extra_s - time.monotonic())
                if remaining > 0:
                    self._cond.wait(remaining)
                    continue
            done = running
            self._expired(running)

    def _expired(self, running: Running) -> None:
        raise NotImplementedError


class DeadlineWatch(_Watch):
    """Rank 0: `on_hang(running)` when a test outlives its timeout, then the process exits."""

    def __init__(self, on_hang: Callable[[Running], None]) -> None:
        self._on_hang = on_hang
        super().__init__("distbench-deadline")

    def _expired(self, running: Running) -> None:
        if self._claim(running):
            try:
                self._on_hang(running)
            except BaseException:  # noqa: BLE001 - the report failed; still end the session
                traceback.print_exc()
            exit_now()


class VerdictWatch(_Watch):
    """Ranks other than 0, past the test's timeout: read rank 0's verdict; on "hung" hand in
    the main thread's stack and exit; without a verdict in time, rank 0 is lost: exit."""

    def __init__(self, channel: StoreChannel, rank: int) -> None:
        self._channel = channel
        self._rank = rank
        super().__init__("distbench-verdict")

    def _expired(self, running: Running) -> None:
        key = running.key(wire.VERDICT)
        try:
            arrived = self._channel.wait([key], VERDICT_MARGIN_S)
            verdict = self._channel.get(key) if arrived else None
        except (StoreLost, RuntimeError) as exc:
            self._lost(running, f"the store stopped answering ({exc})")
            return
        except Forged as exc:
            self._lost(running, str(exc))
            return
        if verdict is None:
            self._lost(running, f"no verdict from rank 0 within "
                                f"{running.timeout_s + VERDICT_MARGIN_S:g} s")
            return
        if verdict.get("status") != "hung" or not self._claim(running):
            return  # the test ended in time after all; the main thread carries on
        try:
            self._channel.set(running.key(wire.stack(self._rank)),
                              main_thread_stack(str(running.item.path)))
            self._channel.wait([running.key(wire.EXIT)], STACK_WAIT_S + EXIT_WAIT_S)
        except (StoreLost, RuntimeError):
            pass  # rank 0 finished and took the store with it
        exit_now()

    def _lost(self, running: Running, why: str) -> None:
        if self._claim(running):
            exit_now(EXIT_CODE, f"distbench rank {self._rank}: lost rank 0 during "
                                f"{running.item.nodeid}: {why}; exiting")


class LauncherStop:
    """The launcher's SIGTERM, acted on by `on_stop` in a thread of its own.

    Python runs a signal's handler in the main thread only, and only between bytecodes: a main
    thread inside a collective with a dead rank may not get there before the launcher's
    SIGKILL. The interpreter also writes the number of each signal it catches to its wakeup
    descriptor, at once, from any thread: this class reads it. Left alone (inactive) where
    someone else already handles SIGTERM or uses the wakeup descriptor."""

    def __init__(self, on_stop: Callable[[], None]) -> None:
        self._on_stop = on_stop
        self._write_fd: int | None = None
        if (threading.current_thread() is not threading.main_thread()
                or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
            return
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)  # the interpreter's write must never block
        if signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False) != -1:
            signal.set_wakeup_fd(-1)  # taken (an asyncio loop in the main thread): leave it
            os.close(read_fd)
            os.close(write_fd)
            return
        self._write_fd = write_fd
        signal.signal(signal.SIGTERM, _caught)
        _reset_in_children()
        threading.Thread(target=self._read, args=(read_fd,), name="distbench-sigterm",
                         daemon=True).start()

    def _read(self, read_fd: int) -> None:
        stopped = False
        try:
            while data := os.read(read_fd, 64):  # b"": close() closed the other end
                if signal.SIGTERM in data and not stopped:
                    stopped = True
                    self._on_stop()
        finally:
            os.close(read_fd)

    def close(self) -> None:
        """SIGTERM's default again, and the thread ended (from the main thread)."""
        if self._write_fd is None or threading.current_thread() is not threading.main_thread():
            return
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        os.close(self._write_fd)
        self._write_fd = None


def _caught(signum: int, frame: Any) -> None:
    """SIGTERM's Python handler: nothing to do in the main thread (LauncherStop's thread acts);
    what the main thread was doing goes on until that thread ends the process."""


_resetting = False


def _reset_in_children() -> None:
    """A child a test body forks (multiprocessing's fork) gets SIGTERM's default back: with the
    handler it would ignore `terminate()`, and write to the wakeup pipe it shares with its
    rank, which would take the child's SIGTERM for the launcher's."""
    global _resetting
    if _resetting:
        return
    _resetting = True

    def reset() -> None:
        if signal.getsignal(signal.SIGTERM) is _caught:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.set_wakeup_fd(-1)

    os.register_at_fork(after_in_child=reset)


def report_hang_and_exit(config: pytest.Config, session: pytest.Session, running: Running,
                         message: str, cause: str = "hung") -> None:
    """From a thread other than the (stuck) main one: fail the running test, report every later
    test as not run (`cause`: what became of the running one), finish the session (tables,
    results file). The caller then exits."""
    import pytest

    hook = config.hook
    items = session.items
    now = time.time()
    item = running.item
    duration = time.monotonic() - running.started

    def report(node: pytest.Item, outcome: Literal["passed", "failed", "skipped"],
               longrepr: str | tuple[str, int, str] | None,
               when: Literal["setup", "call", "teardown"], took: float = 0.0) -> None:
        hook.pytest_runtest_logreport(report=pytest.TestReport(
            node.nodeid, node.location, {k: 1 for k in node.keywords}, outcome, longrepr, when,
            sections=[], duration=took, start=now - took, stop=now))

    report(item, "failed", message, "call", duration)
    report(item, "passed", None, "teardown")
    hook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    reason = (f"not run: {item.nodeid} {cause}, and in launcher mode the ranks cannot be "
              "replaced; every rank exits")
    for later in items[running.index + 1:]:
        hook.pytest_runtest_logstart(nodeid=later.nodeid, location=later.location)
        line = (later.location[1] or 0) + 1
        report(later, "skipped", (str(later.path), line, f"Skipped: {reason}"), "setup")
        report(later, "passed", None, "teardown")
        hook.pytest_runtest_logfinish(nodeid=later.nodeid, location=later.location)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
    hook.pytest_sessionfinish(session=session, exitstatus=pytest.ExitCode.TESTS_FAILED)
    config._ensure_unconfigure()
