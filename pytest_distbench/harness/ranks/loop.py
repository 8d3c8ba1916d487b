"""The worker side: the loop a rank process runs for the lifetime of its world.

A rank joins the world's process group once, then runs test bodies on request. It never
outlives the controller: it dies with its parent (the forkserver, which exits with the
controller), and a lifeline pipe whose end only the controller holds kills it on EOF.
"""

from __future__ import annotations

import ctypes
import faulthandler
import importlib
import importlib.util
import os
import signal
import sys
import threading
import traceback
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any

from ..wire import Progress, RankReady, RankSpec, RunTest, Shutdown, TestOutcome
from . import leftovers
from .threads import intra_op_threads

_PR_SET_PDEATHSIG = 1
STACK_DUMP_SIGNAL = signal.SIGUSR1


def main(spec: RankSpec, conn: Connection, lifeline: Connection) -> None:
    """Entry point of a rank process (started by the controller through the forkserver)."""
    _redirect_output(spec.capture_path)
    _die_with_controller(lifeline)
    # A process group of its own: what a test body starts (a server, a `sleep`) is in it, and
    # the controller ends the whole group with the rank, so nothing outlives a killed world.
    os.setpgid(0, 0)
    # Before torch opens a socket: the world's listen interface, fork safety for RDMA, ...
    os.environ.update(dict(spec.env))
    try:
        rank = Rank(spec, conn)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(4)
    conn.send(RankReady(rank=spec.rank, pid=os.getpid(), info=rank.info()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            os._exit(0)
        if isinstance(message, Shutdown):
            rank.close(message.timeout_s)
            _flush_output()
            os._exit(0)
        outcome = rank.run(message)
        with rank.send_lock:
            conn.send(outcome)


def _flush_output() -> None:
    """Flush stdout and stderr; a stream whose descriptor the test closed (or replaced) is
    dropped, not raised: the error would take the place of the test's own outcome."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _redirect_output(path: str) -> None:
    # Ranks write to a per-rank file that the controller reads back per test; the
    # terminal stays the controller's.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    faulthandler.enable(file=sys.stderr, all_threads=True)
    faulthandler.register(STACK_DUMP_SIGNAL, file=sys.stderr, all_threads=True)


def _die_with_controller(lifeline: Connection) -> None:
    # Ctrl-C belongs to the controller, which tears worlds down in order.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    def watch() -> None:
        try:
            lifeline.recv()
        except (EOFError, OSError):
            pass
        os._exit(3)

    threading.Thread(target=watch, name="distbench-lifeline", daemon=True).start()


class Rank:
    def __init__(self, spec: RankSpec, conn: Connection | None = None) -> None:
        import torch
        import torch.distributed as dist

        self.spec = spec
        self.conn = conn
        # Rank 0's reporter thread sends Progress while the main thread may send its outcome.
        self.send_lock = threading.Lock()
        # The harness's deadline (--distbench-timeout) reports a hang with every rank's stack;
        # the store's and the process group's own timeouts are only a backstop behind it: equal
        # to it, a loaded machine let gloo fail the waiting rank first and lose its stack.
        timeout = timedelta(seconds=spec.timeout_s + max(5.0, spec.timeout_s / 4))
        self.base_store = dist.TCPStore(
            spec.store_host, spec.store_port, is_master=False, timeout=timeout
        )
        if spec.device_type == "cuda":
            on_host = spec.rank if spec.local_rank is None else spec.local_rank
            self.device = torch.device("cuda", on_host % max(torch.cuda.device_count(), 1))
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
        dist.init_process_group(
            spec.backend,
            store=dist.PrefixStore(spec.store_prefix + "pg/", self.base_store),
            rank=spec.rank,
            world_size=spec.world_size,
            timeout=timeout,
        )
        self.group = dist.group.WORLD
        # Barriers and calibration go through gloo on the host whatever backend is measured.
        self.control = self.group if spec.backend == "gloo" else dist.new_group(backend="gloo")
        # The first collectives of a fresh world run slow (buffers, page faults); pay for
        # them here rather than in the first benchmark.
        warm = torch.zeros(1)
        for _ in range(10):
            dist.all_reduce(warm, group=self.control)
        # Pressure threads run where the process may run, not on the rank's pinned core.
        self.process_cpus = (tuple(sorted(os.sched_getaffinity(0)))
                             if hasattr(os, "sched_getaffinity") else None)
        threads = intra_op_threads(
            os.environ, len(self.process_cpus or ()) or (os.cpu_count() or 1),
            int(os.environ.get("LOCAL_WORLD_SIZE", spec.world_size)),
            len(spec.cpus) if spec.cpus else None)
        if threads is not None:
            torch.set_num_threads(threads)
        if spec.cpus:
            # "core": only the calling thread; the backend's I/O threads, started above, stay
            # free to run on another core instead of queueing behind the thread that waits
            # for them. "pack": every thread, so no message between two ranks has to wake
            # another (possibly halted, virtual) CPU.
            pin_threads(spec.cpus, every_thread=spec.pin_threads)
        self.tests_run = 0
        # Only this process reports for the rank: a body's forked child that returns into the
        # harness must not (it would answer for the rank while the rank still runs).
        self.pid = os.getpid()
        self.rpc_name: str | None = None
        # Launcher mode's rank 0 reports for itself (no controller pipe): where its Progress
        # messages go during the current test.
        self.on_progress: Any = None

    def info(self) -> dict[str, Any]:
        from ...results.document.environment import rank_environment

        info = rank_environment(self.spec.backend, self.device)
        if self.device.type == "cuda":  # once per world: what its bandwidths are held to
            from .device_probe import device_copy_gbps

            info["device_copy_gbps"] = device_copy_gbps(self.device)
        return info

    def run(self, task: RunTest) -> TestOutcome:
        """Run one test body; then make sure it left this rank fit for the next one."""
        self.tests_run += 1
        before = leftovers.snapshot()
        outcome = self._run_body(task)
        if outcome.status == "failed":
            return outcome  # the world is rebuilt after a failure anyway
        left = leftovers.left_behind(before)
        if left:
            then = ("The world is rebuilt." if self.conn is not None else "This process is "
                    "the rank (launcher mode): a thread it left runs on through the later tests.")
            return TestOutcome(rank=self.spec.rank, status="failed", message=(
                "the test left running in this rank: " + "; ".join(left) + ". A test must "
                "stop what it starts: the next test in this world would be measured beside "
                f"it. {then}"), rebuild="leftovers")
        outcome.rebuild = leftovers.process_group_gone(self.group, self.control)
        return outcome

    def _run_body(self, task: RunTest) -> TestOutcome:
        import pytest  # the body's module imported it already

        try:
            function = _resolve(task)
            kwargs = dict(task.kwargs)
            distbench = None
            for name in task.rank_fixtures:
                kwargs[name] = self._fixture(name, task)
                if name == "distbench":
                    distbench = kwargs[name]
            if distbench is None:
                distbench = self._distbench(task)
            self._call_body(function, kwargs)
            self._stop_rpc(graceful=True)
        except (pytest.skip.Exception, pytest.xfail.Exception) as exc:  # in the body
            self._stop_rpc(graceful=False)
            status = "xfailed" if isinstance(exc, pytest.xfail.Exception) else "skipped"
            return TestOutcome(rank=self.spec.rank, status=status, message=str(exc.msg))
        except BaseException:
            message = _format_exception(task)
            self._stop_rpc(graceful=False)
            return TestOutcome(rank=self.spec.rank, status="failed", message=message)
        finally:
            _flush_output()
        return TestOutcome(
            rank=self.spec.rank, status="passed", measurements=distbench.measurements
        )

    def _call_body(self, function: Any, kwargs: dict[str, Any]) -> None:
        """The test body; a child it forked that comes back here exits at once, silently
        (its exit status is its parent's to read: 0 if the body returned, 1 if it raised)."""
        try:
            function(**kwargs)
        except BaseException:
            if os.getpid() != self.pid:
                os._exit(1)
            raise
        if os.getpid() != self.pid:
            os._exit(0)

    def _distbench(self, task: RunTest) -> Any:
        from .measure import Distbench

        return Distbench(
            rank=self.spec.rank,
            world_size=self.spec.world_size,
            backend=self.spec.backend,
            device=self.device,
            group=self.group,
            control_group=self.control,
            settings=task.settings,
            progress=self._progress_sink(),
            pressure_cpus=self.process_cpus,
        )

    def _progress_sink(self) -> Any:
        """Rank 0's live reports: up the pipe to the controller, or (launcher mode, where
        rank 0 is the reporting process) to its own printer."""
        if self.spec.rank != 0:
            return None
        return self.send_progress if self.conn is not None else self.on_progress

    def send_progress(self, progress: Progress) -> None:
        with self.send_lock:
            self.conn.send(progress)

    def _fixture(self, name: str, task: RunTest) -> Any:
        import torch.distributed as dist

        if name == "distbench":
            return self._distbench(task)
        if name == "rank":
            return self.spec.rank
        if name == "world_size":
            return self.spec.world_size
        if name == "device":
            return self.device
        if name == "process_group":
            return self.group
        if name == "tcp_store":
            # A fresh key space per test, so tests in one world cannot see each other's keys.
            prefix = f"{self.spec.store_prefix}user/{self.tests_run}/"
            return dist.PrefixStore(prefix, self.base_store)
        if name == "rpc_agent":
            return self._rpc_agent()
        raise LookupError(f"unknown rank-local fixture {name!r}")

    def _rpc_agent(self) -> Any:
        from .rpc import RpcContext, fixture_transports, start_rpc, worker_name

        # One agent per test, rendezvous under the test's own prefix; run() shuts it down.
        transports = fixture_transports(self.spec.world_size)
        self.rpc_name = start_rpc(
            self.base_store,
            f"{self.spec.store_prefix}rpc/{self.tests_run}/",
            self.spec.rank,
            self.spec.world_size,
            self.spec.timeout_s,
            transports=transports,
        )
        return RpcContext(
            name=self.rpc_name,
            rank=self.spec.rank,
            world_size=self.spec.world_size,
            worker_names=[worker_name(r) for r in range(self.spec.world_size)],
            transports=None if transports is None else tuple(transports),
        )

    def _stop_rpc(self, graceful: bool) -> None:
        """End this test's agent. After a failure only locally: the peer may be the culprit."""
        if self.rpc_name is None:
            return
        from .rpc import stop_rpc

        self.rpc_name = None
        stop_rpc(self.spec.timeout_s, graceful=graceful)

    def close(self, timeout_s: float) -> None:
        import torch.distributed as dist

        if self.rpc_name is not None:
            from .rpc import stop_rpc

            stop_rpc(timeout_s, graceful=False)
        if dist.is_initialized():
            dist.destroy_process_group()


def _resolve(task: RunTest) -> Any:
    """Find the test function in this process, importing its module the way pytest did."""
    for entry in reversed(task.sys_path):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    module = sys.modules.get(task.module_name)
    if module is None or getattr(module, "__file__", None) != task.module_file:
        try:
            module = importlib.import_module(task.module_name)
        except ImportError:
            module = None
        if module is None or getattr(module, "__file__", None) != task.module_file:
            spec = importlib.util.spec_from_file_location(task.module_name, task.module_file)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot import {task.module_file}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[task.module_name] = module
            spec.loader.exec_module(module)
    target: Any = module
    parts = task.qualname.split(".")
    for i, part in enumerate(parts):
        target = getattr(target, part)
        if isinstance(target, type) and i < len(parts) - 1:
            target = target()  # a test class: pytest calls methods on a fresh instance
            if i == len(parts) - 2:  # the method's own: as the test's set-up left it
                target.__dict__.update(task.instance_state)
    return target


def _format_exception(task: RunTest) -> str:
    exc_type, exc, tb = sys.exc_info()
    # Drop the harness frames so the report starts at the user's test body.
    frames = traceback.extract_tb(tb)
    keep = [i for i, f in enumerate(frames) if f.filename == task.module_file]
    start = keep[0] if keep else 0
    lines = traceback.format_list(frames[start:])
    lines += traceback.format_exception_only(exc_type, exc)
    return "".join(lines)


def pin_threads(cpus: tuple[int, ...], *, every_thread: bool) -> None:
    """Pin the calling thread, or every thread of this process, to `cpus`.

    Threads started later inherit the affinity of the thread that starts them.
    """
    if not every_thread:
        os.sched_setaffinity(0, cpus)
        return
    for task in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(task), cpus)
        except (ProcessLookupError, PermissionError):
            pass  # a thread that ended meanwhile
