"""Worker management: starting, driving and tearing down one world of rank processes.

Ranks are forked by a multiprocessing forkserver that imported torch once, so a world of 8
starts in a fraction of a second instead of 8 interpreters importing torch. The forkserver
never touches CUDA, so forking from it is safe for the nccl path too.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from pathlib import Path

from ..failures import RunResult, describe_exit, prefix_output
from ..ranks import loop as rank_module
from ..ranks.leftovers import is_running, proc_stat
from ..wire import Progress, RankReady, RankSpec, RunTest, Shutdown, TestOutcome, WorldKey
from .loopback import rank_listen_env

PRELOAD = ["torch", "torch.distributed", "pytest", "pytest_distbench.harness.ranks.loop",
           "pytest_distbench.harness.ranks.measure",
           "pytest_distbench.harness.local.forkserver_exit"]
# After one rank fails, how long the others get to finish before they are released (killed).
FAILURE_GRACE_S = 2.0
STACK_DUMP_WAIT_S = 5.0
# What of a rank's output one test keeps (its start and its end, where a stack dump lands):
# pressure log threads can write gigabytes that no report could show.
OUTPUT_HEAD_BYTES = 64 * 1024
OUTPUT_TAIL_BYTES = 1024 * 1024


def forkserver_context() -> multiprocessing.context.BaseContext:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def warm_up_forkserver() -> None:
    """Start the forkserver now so its torch import overlaps the controller's collection."""
    from multiprocessing import forkserver

    forkserver_context()
    forkserver.ensure_running()


def rank_cpus(rank: int, bind: str) -> tuple[int, ...] | None:
    """The CPU a rank is pinned to: round robin over the CPUs this process may use ("core"),
    or the first of them for every rank ("pack").

    Unpinned ranks of a small world migrate between cores and their latency jumps between
    modes from one test to the next; pinned, back-to-back runs agree better (docs/gating.md).
    """
    if bind not in ("core", "pack") or not hasattr(os, "sched_getaffinity"):
        return None
    usable = sorted(os.sched_getaffinity(0))
    return (usable[0],) if bind == "pack" else (usable[rank % len(usable)],)


# What multiprocessing reports for a process whose forkserver closed its status pipe unsaid.
FORKSERVER_GONE_CODE = 255


def _exited(pid: int, wait_s: float = 1.0) -> bool:
    """Whether the process `pid` has ended (a zombie, or gone), waiting up to `wait_s` for
    one that is exiting: its children die (parent-death signal) before it becomes a zombie,
    and until then multiprocessing would take the forkserver for alive and connect to it."""
    deadline = time.monotonic() + wait_s
    while is_running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class WorldStartError(Exception):
    pass


class World:
    def __init__(
        self,
        key: WorldKey,
        *,
        store_host: str,
        store_port: int,
        store_prefix: str,
        capture_dir: Path,
        timeout_s: float,
        loopback_only: bool = True,
        env: dict[str, str] | None = None,
        context: multiprocessing.context.BaseContext | None = None,
        enter: Callable[..., None] | None = None,
    ) -> None:
        """`loopback_only`: gloo and TensorPipe listen on loopback (a local world); launcher
        mode passes False to keep the interface the user chose. `env`: more rank environment.
        `context`: where the ranks are forked from (default: the preloaded forkserver).
        `enter`: runs the call that starts the rank processes (and the forkserver, if it
        must be started again) where the world's network is (netns.PrivateNetwork.run)."""
        self.enter = enter
        self.key = key
        self.context = context
        self.store_host = store_host
        self.store_port = store_port
        self.store_prefix = store_prefix
        self.capture_paths = [
            capture_dir / f"{store_prefix.strip('/').replace('/', '-')}-rank{r}.log"
            for r in range(key.world_size)
        ]
        self.timeout_s = timeout_s
        self.rank_env = dict(rank_listen_env()) if loopback_only else {}
        self.rank_env.update(env or {})
        self.processes: list[multiprocessing.process.BaseProcess] = []
        self.conns: list[Connection] = []
        self._lifelines: list[Connection] = []
        self.info: dict[int, dict] = {}
        self.busy = False
        self.start_s = 0.0

    # -- life cycle -------------------------------------------------------------------------

    def _spawn(self) -> None:
        """Start the rank processes (each rank then joins the world by itself)."""
        ctx = self.context or forkserver_context()
        for r in range(self.key.world_size):
            spec = RankSpec(
                rank=r,
                world_size=self.key.world_size,
                backend=self.key.backend,
                device_type=self.key.device_type,
                store_host=self.store_host,
                store_port=self.store_port,
                store_prefix=self.store_prefix,
                capture_path=str(self.capture_paths[r]),
                timeout_s=self.timeout_s,
                cpus=rank_cpus(r, self.key.bind),
                pin_threads=self.key.bind == "pack",
                env=tuple(sorted(self.rank_env.items())),
            )
            conn, child_conn = ctx.Pipe(duplex=True)
            lifeline_read, lifeline_write = ctx.Pipe(duplex=False)
            process = ctx.Process(
                target=rank_module.main,
                args=(spec, child_conn, lifeline_read),
                name=f"distbench-{self.key.backend}-ws{self.key.world_size}-rank{r}",
                daemon=True,
            )
            process.start()
            child_conn.close()
            lifeline_read.close()
            self.processes.append(process)
            self.conns.append(conn)
            self._lifelines.append(lifeline_write)

    def start(self, start_timeout_s: float) -> None:
        began = time.perf_counter()
        if self.enter is None:
            self._spawn()
        else:
            self.enter(self._spawn)
        pending = set(range(self.key.world_size))
        deadline = time.monotonic() + start_timeout_s
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise WorldStartError(
                    f"world {self.key}: ranks {sorted(pending)} not ready after "
                    f"{start_timeout_s:.0f} s\n{self._all_output()}"
                )
            for r in self._ready(pending, remaining):
                message = self._receive(r)
                if not isinstance(message, RankReady):
                    code = self.processes[r].exitcode
                    self.kill()
                    raise WorldStartError(
                        f"world {self.key}: rank {r} failed to start ({describe_exit(code)})\n"
                        f"{self._all_output()}"
                    )
                self.info[r] = message.info
                pending.discard(r)
        self.start_s = time.perf_counter() - began
        # The forkserver forked every rank: its death kills them (their parent-death signal)
        # and multiprocessing then reports each one as "exit code 255".
        self.forkserver_pid = proc_stat(self.processes[0].pid, 1)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Shut down in order (RPC, process group), then make sure nothing is left."""
        if self.alive() and not self.busy:
            for conn in self.conns:
                try:
                    conn.send(Shutdown(timeout_s=timeout_s))
                except OSError:
                    pass
            deadline = time.monotonic() + timeout_s
            for process in self.processes:
                process.join(max(0.0, deadline - time.monotonic()))
        self.kill()

    def kill(self) -> None:
        """Kill every rank and whatever its test started (each rank leads its own process
        group: a dead rank's children are still in it)."""
        for process in self.processes:
            if process.pid is None:
                continue
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass  # the group is empty: the rank and its children are gone
            if process.exitcode is None:
                try:
                    os.kill(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for process in self.processes:
            process.join(5.0)
        for conn in self.conns + self._lifelines:
            conn.close()
        self.processes, self.conns, self._lifelines = [], [], []

    def alive(self) -> bool:
        return bool(self.processes) and all(p.exitcode is None for p in self.processes)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes if p.pid is not None]

    # -- running a test ---------------------------------------------------------------------

    def run(self, task: RunTest, timeout_s: float,
            on_progress: Callable[[Progress], None] | None = None) -> RunResult:
        """Run one test in every rank; Progress reports go to `on_progress` as they arrive."""
        marks = [self._size(p) for p in self.capture_paths]
        result = RunResult()
        began = time.monotonic()
        self.busy = True
        for conn in self.conns:
            conn.send(task)
        pending = set(range(self.key.world_size))
        deadline = began + timeout_s
        grace_deadline: float | None = None
        while pending:
            limit = deadline if grace_deadline is None else min(deadline, grace_deadline)
            remaining = limit - time.monotonic()
            if remaining <= 0:
                break
            for r in self._ready(pending, remaining):
                message = self._receive(r)
                if isinstance(message, Progress):
                    if on_progress is not None:
                        on_progress(message)
                    continue  # the rank is still running its test
                pending.discard(r)
                if isinstance(message, TestOutcome):
                    result.outcomes[r] = message
                    failed = message.status != "passed"
                else:
                    result.died[r] = self.processes[r].exitcode
                    if (result.died[r] == FORKSERVER_GONE_CODE and self.forkserver_pid
                            and _exited(int(self.forkserver_pid))):
                        result.forkserver_gone = int(self.forkserver_pid)
                    failed = True
                if failed and grace_deadline is None:
                    grace_deadline = time.monotonic() + FAILURE_GRACE_S
        result.elapsed_s = time.monotonic() - began
        if pending:
            if grace_deadline is not None and time.monotonic() < deadline:
                result.stopped = sorted(pending)
            else:
                result.hung = sorted(pending)
                result.stacks, before = self._dump_stacks(sorted(pending), marks)
        result.output = {
            r: self._read_from(path, marks[r]) for r, path in enumerate(self.capture_paths)
        }
        if result.hung:
            result.output.update(before)  # the stacks are in the failure, under each header
        self.busy = False
        return result

    def _ready(self, pending: set[int], timeout: float) -> list[int]:
        """Block (no polling) until a pending rank answers or dies; return those ranks."""
        waitables: dict[object, int] = {}
        for r in pending:
            waitables[self.conns[r]] = r
            waitables[self.processes[r].sentinel] = r
        ready = wait(list(waitables), timeout)
        return sorted({waitables[obj] for obj in ready})

    def _receive(self, r: int) -> object:
        """The rank's message, or None if it died without one."""
        conn = self.conns[r]
        try:
            if conn.poll():
                return conn.recv()
        except (EOFError, OSError):
            pass
        self.processes[r].join(1.0)
        return None

    def _dump_stacks(self, ranks: list[int], marks: list[int]
                     ) -> tuple[dict[int, str], dict[int, str]]:
        """Each rank's stacks, and what it printed before them: the report shows the stacks
        once, under the rank's header, and the output without them."""
        for r in ranks:
            try:
                os.kill(self.processes[r].pid, rank_module.STACK_DUMP_SIGNAL)
            except ProcessLookupError:
                pass
        # faulthandler writes from the signal handler once the rank is scheduled: on a loaded
        # machine that can take a while, so wait for the main thread's part (written last).
        deadline = time.monotonic() + STACK_DUMP_WAIT_S
        while time.monotonic() < deadline and not all(
                "Current thread" in self._read_from(self.capture_paths[r], marks[r])
                for r in ranks):
            time.sleep(0.05)
        time.sleep(0.1)  # the rest of the dump, written in the same handler
        stacks, before = {}, {}
        for r in ranks:
            text = self._read_from(self.capture_paths[r], marks[r])
            found = [i for i in (text.find("Thread 0x"), text.find("Current thread")) if i >= 0]
            if found:
                before[r], stacks[r] = text[:min(found)], text[min(found):]
            else:
                stacks[r] = "(no stack dump: the rank did not respond)"
        return stacks, before

    # -- captured output --------------------------------------------------------------------

    @staticmethod
    def _size(path: Path) -> int:
        try:
            return path.stat().st_size
        except FileNotFoundError:
            return 0

    @staticmethod
    def _read_from(path: Path, offset: int) -> str:
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size - offset
                f.seek(offset)
                if size <= OUTPUT_HEAD_BYTES + OUTPUT_TAIL_BYTES:
                    return f.read().decode("utf-8", errors="replace")
                head = f.read(OUTPUT_HEAD_BYTES)
                f.seek(-OUTPUT_TAIL_BYTES, os.SEEK_END)
                tail = f.read()
        except FileNotFoundError:
            return ""
        skipped = size - len(head) - len(tail)
        return (head.decode("utf-8", errors="replace")
                + f"\n[... {skipped} bytes of this rank's output not shown ...]\n"
                + tail.decode("utf-8", errors="replace"))

    def _all_output(self) -> str:
        return prefix_output({r: self._read_from(p, 0) for r, p in enumerate(self.capture_paths)})
