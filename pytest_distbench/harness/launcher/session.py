"""Launcher mode's session: this process is one rank, the test body runs right here.

Every rank runs the same items in the same order (agreement.py checks it before the first
test). Per test, each rank runs the body with the same in-rank code as a local world's rank
(harness/ranks/loop.py: fixtures, the `distbench` object). The ranks other than 0 send their
outcome to rank 0 (others.py); rank 0 judges them with its own through the same outcome
pipeline as local mode (rank0.py) and sends one verdict, which every rank applies, so
pass/fail and exit codes agree everywhere. Only rank 0 keeps records and reports. Outcomes,
verdicts and everything else travel through the launcher's store (wire.py names the keys); a
rank that waits on another looks whether it is gone meanwhile (liveness.py).
"""

from __future__ import annotations

import os
import signal
import socket
import time
import traceback
from collections.abc import Callable
from typing import Any

import pytest

from ...settings import Settings, of_run
from ..controller.live import LivePrinter
from ..controller.outcome import prepare
from ..controller.points import Point
from ..controller.session import Session
from ..wire import RankSpec, RunTest, TestOutcome, WorldKey
from . import hang, jobsecret, runkey, wire
from .agreement import Agreement
from .detect import LaunchEnv
from .liveness import Heartbeat, Peers, same_host_pids
from .storechannel import StoreChannel, StoreLost, open_store

START_TIMEOUT_S = 300.0  # every rank must have collected (or joined) within this
FAILURE_GRACE_S = 2.0  # a failed rank waits this long for the others before releasing them
DONE_TIMEOUT_S = 60.0  # rank 0 keeps the store up this long for the others to finish
STOP_LOOK_S = 2.0  # at the launcher's SIGTERM, how long rank 0 waits for the live ranks to say so

# outputs.after_test: the test's points, its settings, and the session's view of them.
GateCheck = Callable[[pytest.Function, list[Point], Settings, Any], None]


class LauncherSession(Session):
    """What every launched rank does; rank0.py and others.py add each role's part."""

    external = True  # the launcher started the ranks: no worlds are started here

    def __init__(self, config: pytest.Config, launch: LaunchEnv) -> None:
        super().__init__()
        try:  # first: a secret that cannot be used stops the rank before it opens the store
            self.job_secret = jobsecret.read()
        except jobsecret.SecretError as exc:
            raise pytest.UsageError(f"launcher mode: {exc}") from None
        self.config = config
        self.launch = launch
        self.rank = launch.rank
        self.world_size = launch.world_size
        self.timeout_s = of_run(config).timeout
        self.prefix = f"distbench/{launch.run_id}/"
        self._hosting = launch.rank == 0 and not launch.agent_store
        store = open_store(launch.master_addr, launch.master_port, master=self._hosting,
                           timeout_s=START_TIMEOUT_S)
        self.channel = StoreChannel(store, self.prefix)
        # The watch thread blocks in the store: it gets its own connection, since one client
        # serves one request at a time.
        self._watch_channel = StoreChannel(
            open_store(launch.master_addr, launch.master_port, master=False,
                       timeout_s=START_TIMEOUT_S), self.prefix)
        self.agreement = Agreement(self.channel, self.rank, self.world_size, START_TIMEOUT_S)
        self.peers = Peers({})  # known after the collection round
        self._heartbeat: Heartbeat | None = None
        hang.keep_stderr()  # exit_now's messages must outlive a test's output capture
        self.pytest_session: Any = None
        self.index_of: dict[str, int] = {}
        self._rank_obj: Any = None
        self._world_key: WorldKey | None = None
        self._worlds = 0
        self._new_world = False
        self._closed = False
        self.stopped = False  # the launcher sent SIGTERM
        self._stop = hang.LauncherStop(self._on_stop)

    @property
    def hosts(self) -> dict[int, str]:
        return self.agreement.hosts

    # -- each role's part -------------------------------------------------------------------

    watch: Any  # hang.DeadlineWatch on rank 0, hang.VerdictWatch on the others

    def settle(self) -> None:
        """Apply the verdict still pending, if any (the ranks other than 0 read it late)."""


    def _printer(self, item: pytest.Function, report_every_s: float | None
                 ) -> LivePrinter | None:
        """Where this rank's live progress reports go (rank 0 prints them)."""
        return None

    def _others_finished(self, running: hang.Running, outcome: wire.Outcome) -> bool:
        """A rank whose body did not pass: whether the others finished within the grace."""
        raise NotImplementedError

    def _after_body(self, item: pytest.Function, settings: Settings, key: WorldKey,
                    running: hang.Running, outcome: wire.Outcome) -> list[Point]:
        raise NotImplementedError

    def _close_own(self) -> None:
        """What the role holds until the end of the tests."""

    def _stop_tests(self) -> None:
        """The launcher's SIGTERM during the tests: end the run, rank 0's report first."""
        raise NotImplementedError

    def _on_stop(self) -> None:
        """The launcher's SIGTERM (from LauncherStop's thread)."""
        self.stopped = True
        if self._closed:
            return  # the tests are over: rank 0 writes its outputs, the others follow it out
        if not self.index_of:
            hang.exit_now(128 + signal.SIGTERM, f"distbench rank {self.rank}: stopped by the "
                                                "launcher (SIGTERM) before the tests began")
        self._stop_tests()

    # -- collection -------------------------------------------------------------------------

    def agree_on_collection(self, session: pytest.Session) -> None:
        """Stop every rank with the first difference when the ranks collected different items."""
        self.pytest_session = session
        error = self.agreement.collection([item.nodeid for item in session.items])
        if error:
            pytest.exit(error, returncode=pytest.ExitCode.USAGE_ERROR)
        self._agree_on_the_seal()
        self.peers = Peers(same_host_pids(self.hosts, self.agreement.pids,
                                          socket.gethostname(), self.rank, os.getpid()))
        self._heartbeat = Heartbeat(StoreChannel(open_store(
            self.launch.master_addr, self.launch.master_port, master=False,
            timeout_s=START_TIMEOUT_S), self.prefix, self.channel.seal), self.rank, self.peers)
        self.index_of = {item.nodeid: i for i, item in enumerate(session.items)}

    def _agree_on_the_seal(self) -> None:
        """From here on, what the ranks act on carries the run's seal (seal.py, runkey.py)."""
        try:
            run_seal = runkey.agree(self.channel, self.rank, self.world_size,
                                    self.launch.run_id, self.job_secret)
        except runkey.Disagreement as exc:
            pytest.exit(f"the ranks cannot agree on the run's seal: {exc}",
                        returncode=pytest.ExitCode.USAGE_ERROR)
        except RuntimeError as exc:
            pytest.exit(f"the ranks could not agree on the run's seal over a gloo process "
                        f"group of their own within {runkey.AGREE_TIMEOUT_S:g} s: the ranks "
                        "must reach each other directly, as their tests' process groups do "
                        "(GLOO_SOCKET_IFNAME names the interface); or a process that can write "
                        "the store tampered with the exchange (with a job secret there is none: "
                        f"{runkey.GIVE_IT}): {str(exc)[:300]}",
                        returncode=pytest.ExitCode.USAGE_ERROR)
        self.channel.seal = self._watch_channel.seal = run_seal

    @property
    def seal_held(self) -> str:
        """Which seal holds, in the words of rank 0's header line and the results file."""
        return runkey.HELD[self.job_secret is not None]

    # -- the in-process world ---------------------------------------------------------------

    def _world(self, key: WorldKey) -> Any:
        if self._rank_obj is not None and self._world_key == key:
            return self._rank_obj
        self._close_world(graceful=True)
        from ..ranks.loop import Rank

        self._worlds += 1
        spec = RankSpec(
            rank=self.rank, world_size=self.world_size, backend=key.backend,
            device_type=key.device_type, store_host=self.launch.master_addr,
            store_port=self.launch.master_port, store_prefix=f"{self.prefix}world{self._worlds}/",
            capture_path="", timeout_s=self.timeout_s, cpus=None,
            local_rank=self.launch.local_rank)
        began = time.perf_counter()
        self._rank_obj = Rank(spec)
        self._world_key = key
        self._new_world = True
        self.world_starts.append((str(key), time.perf_counter() - began))
        return self._rank_obj

    def _close_world(self, graceful: bool) -> None:
        rank_obj, self._rank_obj, self._world_key = self._rank_obj, None, None
        if rank_obj is None:
            return
        import torch.distributed as dist

        if rank_obj.rpc_name is not None:
            import torch.distributed.rpc as rpc

            try:
                rpc.shutdown(graceful=graceful, timeout=self.timeout_s)
            except Exception:  # noqa: BLE001 - a broken world is being dropped
                pass
        if dist.is_initialized():
            dist.destroy_process_group()

    # -- one test ---------------------------------------------------------------------------

    def run_item(self, item: pytest.Function, settings: Settings, key: WorldKey, *,
                 task: RunTest | None = None, fresh_world_after: bool = False,
                 keep: bool = True) -> list[Point]:
        """runs.Runner in the launcher's ranks: every rank runs the body here; its points are
        rank 0's (the others keep none). `fresh_world_after` cannot be honoured (the
        launcher's processes are the world), and nothing runs a point again here (no `task`,
        every run kept)."""
        try:
            return self._run_item(item, settings, key)
        except StoreLost as exc:
            return self._store_lost(item, exc)

    def _store_lost(self, item: pytest.Function, exc: StoreLost) -> list[Point]:
        raise exc  # rank 0 hosts the store: only another rank can lose it (others.py)

    def _run_item(self, item: pytest.Function, settings: Settings, key: WorldKey
                  ) -> list[Point]:
        self.settle()  # the verdict of the test before, before this body may use the world
        index = self.index_of[item.nodeid]
        reason = self.agreement.backend_reason(key.backend, key.device_type,
                                               self.launch.local_rank)
        if reason:
            pytest.skip(reason)
        running = hang.Running(index, item, settings.timeout, time.monotonic())
        self.watch.arm(running)
        outcome = self._run_here(item, settings, key)
        if outcome.status != "passed":
            self._wait_for_the_others(running, outcome)
        return self._after_body(item, settings, key, running, outcome)

    def _run_here(self, item: pytest.Function, settings: Settings, key: WorldKey
                  ) -> wire.Outcome:
        """Run the body in this process."""
        info = None
        try:
            task = prepare(item, settings)
        except pytest.fail.Exception as exc:  # an argument the ranks could not be sent
            task, result = None, TestOutcome(rank=self.rank, status="failed", message=exc.msg)
        if task is not None:
            try:
                rank_obj = self._world(key)
                if self._new_world:
                    info = dict(rank_obj.info(), host=socket.gethostname())
                    self._new_world = False
            except Exception:  # noqa: BLE001 - joining the process group failed here
                rank_obj, result = None, TestOutcome(
                    rank=self.rank, status="failed",
                    message="could not join the process group:\n" + traceback.format_exc())
            if rank_obj is not None:
                rank_obj.on_progress = self._printer(item, task.settings.report_every_s)
                result = rank_obj.run(task)
        return wire.Outcome(status=result.status, message=result.message,
                            measurements=result.measurements,
                            output=self._take_output(), info=info, rebuild=result.rebuild)

    def _wait_for_the_others(self, running: hang.Running, outcome: wire.Outcome) -> None:
        """A rank whose body did not pass gives the others FAILURE_GRACE_S to finish theirs,
        then releases them (and says so in its outcome)."""
        outcome.order = self.channel.add(running.key(wire.FAILURES), 1)
        if self._others_finished(running, outcome):
            return
        # Ranks still inside a collective with this one: closing its connections releases
        # them with an error instead of leaving them to the timeout. Said before it is done,
        # so rank 0, judging after the released ranks have failed, knows why.
        if self.rank != 0:
            self.channel.set(running.key(wire.released(self.rank)), 1)
        outcome.released = True
        self._close_world(graceful=False)

    def _take_output(self) -> str:
        capman = self.config.pluginmanager.getplugin("capturemanager")
        if capman is None or not capman.is_globally_capturing():
            return ""
        out, err = capman.read_global_capture()
        return out + err

    # -- the end ----------------------------------------------------------------------------

    aborting = False

    def environment_facts(self) -> dict[str, Any]:
        per_host: dict[str, int] = {}
        for r in sorted(self.hosts):
            per_host[self.hosts[r]] = per_host.get(self.hosts[r], 0) + 1
        return {"launcher": {
            "name": self.launch.launcher,
            "world_size": self.world_size,
            "hosts": list(per_host),
            "ranks_per_host": per_host,
            "store": f"{self.launch.master_addr}:{self.launch.master_port}",
            "seal": self.seal_held,
        }}

    def close(self) -> None:
        """End of the tests on every rank: leave the process group. Safe to call more than
        once."""
        if self._closed or self.aborting:
            return
        self._closed = True
        self.watch.stop()
        self._close_world(graceful=True)
        self._close_own()

    def finish(self) -> None:
        """The very end: no rank exits before rank 0 has finished reporting (a launcher such
        as torchrun stops every rank once one exits non-zero), and every rank exits with rank
        0's status."""
        if self.aborting or self.pytest_session is None:
            return
        self.close()
        from .storechannel import StoreLost

        try:
            self._agree_on_the_end()
        except (StoreLost, RuntimeError):
            pass  # the store's host is gone: nothing left to agree with
        self._stop.close()

    def _agree_on_the_end(self) -> None:
        raise NotImplementedError
