"""Launcher mode's session: this process is one rank, the test body runs right here.

Every rank runs the same items in the same order (checked through the launcher's store before
the first test). Per test, each rank runs the body with the same in-rank code as a local
world's rank (harness/rank.py: fixtures, the `distbench` object); the ranks other than 0 post
their outcome to the store; rank 0 gathers the outcomes, judges them with its own exactly as
local mode does (records, wrong results, the gate) and posts one verdict, which every rank
then applies, so pass/fail and exit codes agree everywhere. Only rank 0 keeps records and
reports. Outcomes and verdicts travel over one direct connection from each rank to rank 0
(harness/peerlink.py): per test, a rank sends one frame and reads one, one test late. The
store carries what is not per test: the agreement rounds, releases, a hang's verdict and
stacks, and the end of the session.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import pytest

from ..settings import Settings, resolve
from . import hang
from .launcher import LaunchEnv
from .live import LivePrinter, terminal_stream
from .peerlink import LinkError, PeerLink, RankZeroLink, listen_address, new_token
from .session import DistbenchSession, _task_for, build_records, fail_on_wrong_results
from .storechannel import StoreChannel, StoreLost, open_store
from .wire import Measurement, RankSpec, TestOutcome
from .world import RunResult, WorldKey, prefix_output

START_TIMEOUT_S = 300.0  # every rank must have collected (or joined) within this
FAILURE_GRACE_S = 2.0  # a failed rank waits this long for the others before releasing them
DONE_TIMEOUT_S = 60.0  # rank 0 keeps the store up this long for the others to finish


class LauncherSession(DistbenchSession):
    """The DistbenchSession of one launched rank (records and reports on rank 0 only)."""

    external = True  # the launcher started the ranks: no worlds are started here

    def __init__(self, config: pytest.Config, launch: LaunchEnv,
                 gate_check: Callable[[pytest.Function, list[dict[str, Any]], Settings], None],
                 ) -> None:
        super().__init__()
        self.config = config
        self.launch = launch
        self.rank = launch.rank
        self.world_size = launch.world_size
        self.gate_check = gate_check
        self.timeout_s = resolve(config).timeout
        self.prefix = f"distbench/{launch.run_id}/"
        hosting = launch.rank == 0 and not launch.agent_store
        store = open_store(launch.master_addr, launch.master_port, master=hosting,
                           timeout_s=START_TIMEOUT_S)
        self._hosting = hosting
        self.channel = StoreChannel(store, self.prefix)
        # The watch thread blocks in the store: it gets its own connection, since one client
        # serves one request at a time.
        watch_channel = StoreChannel(
            open_store(launch.master_addr, launch.master_port, master=False,
                       timeout_s=START_TIMEOUT_S), self.prefix)
        self._watch_channel = watch_channel
        if self.rank == 0:
            self.watch: Any = hang.DeadlineWatch(self._report_hang)
        else:
            self.watch = hang.VerdictWatch(watch_channel, self.rank)
        hang.keep_stderr()  # exit_now's messages must outlive a test's output capture
        self._zero_link: RankZeroLink | None = None
        self._peer_link: PeerLink | None = None
        self._open_link()
        # Rank 0 prints the live reports of its own Reporter thread (harness/live.py).
        self._live_stream = terminal_stream() if self.rank == 0 else None
        self._live: LivePrinter | None = None
        self.pytest_session: Any = None
        self.index_of: dict[str, int] = {}
        self.hosts: dict[int, str] = {}
        self._rank_obj: Any = None
        self._world_key: WorldKey | None = None
        self._worlds = 0
        self._unavailable: dict[tuple[str, str], str] = {}
        self._new_world = False
        self._closed = False
        # Ranks other than 0: the test whose verdict is not read yet, and this rank's status.
        self._pending: tuple[hang.Running, str] | None = None
        # Rank 0 posts no outcome: the hang report reads its own from here.
        self._own: tuple[int, dict[str, Any]] | None = None  # (test index, outcome)

    # -- the per-test link ------------------------------------------------------------------

    def _open_link(self) -> None:
        """Rank 0 listens and says where in the store; the others connect (rank 0 takes the
        connections after the collection round, when every rank is known to be there)."""
        if self.world_size == 1:
            return
        launch = self.launch
        try:
            if self.rank == 0:
                single_host = launch.local_world_size == launch.world_size
                address = listen_address(launch.master_addr, launch.master_port, single_host)
                self._zero_link = RankZeroLink(address, self.world_size)
                self.channel.set("link", [address, self._zero_link.port])
                return
            # Rank 0 admits only a hello that proves this token: joining takes reading the store.
            token = new_token()
            self.channel.set(f"link-token/{self.rank}", token.hex())
            if not self.channel.wait(["link"], START_TIMEOUT_S):
                raise LinkError(f"rank 0 did not say where to connect within "
                                f"{START_TIMEOUT_S:g} s")
            address, port = self.channel.get("link")
            self._peer_link = PeerLink(address, int(port), self.rank, START_TIMEOUT_S, token)
        except (LinkError, OSError) as exc:
            raise pytest.UsageError(f"launcher mode: rank {self.rank}: {exc}") from None

    def _accept_link(self) -> None:
        if self._peer_link is not None:
            try:
                self._peer_link.join(START_TIMEOUT_S)
            except LinkError as exc:
                pytest.exit(f"launcher mode: rank {self.rank}: {exc}",
                            returncode=pytest.ExitCode.USAGE_ERROR)
        if self._zero_link is None:
            return
        # Every rank published its token before the collection round that preceded this.
        tokens: dict[int, bytes] = {}
        for r in range(1, self.world_size):
            try:
                tokens[r] = bytes.fromhex(self.channel.get(f"link-token/{r}"))
            except (TypeError, ValueError):
                pass  # not a token: that rank cannot join, and is named below
        missing = self._zero_link.accept(START_TIMEOUT_S, tokens)
        if missing:
            pytest.exit(f"launcher mode: ranks {missing} did not connect to rank 0 at "
                        f"{self._zero_link.address}:{self._zero_link.port} within "
                        f"{START_TIMEOUT_S:g} s (a firewall between the hosts?)",
                        returncode=pytest.ExitCode.USAGE_ERROR)

    # -- agreement rounds -------------------------------------------------------------------

    def _round(self, name: str, mine: Any, decide: Callable[[dict[int, Any], list[int]], Any],
               timeout_s: float) -> Any:
        """Every rank posts `mine`; rank 0 decides from all of them; every rank gets the answer."""
        self.channel.set(f"{name}/{self.rank}", mine)
        if self.rank == 0:
            keys = [f"{name}/{r}" for r in range(self.world_size)]
            self.channel.wait(keys, timeout_s)
            values = {r: self.channel.get(k) for r, k in enumerate(keys) if self.channel.has(k)}
            missing = [r for r in range(self.world_size) if r not in values]
            self.channel.set(f"{name}/decision", decide(values, missing))
        if not self.channel.wait([f"{name}/decision"], timeout_s + hang.VERDICT_MARGIN_S):
            hang.exit_now(hang.EXIT_CODE, f"distbench rank {self.rank}: no answer from rank 0 "
                                          f"on {name} within {timeout_s:g} s; exiting")
        return self.channel.get(f"{name}/decision")

    def agree_on_collection(self, session: pytest.Session) -> None:
        """Stop every rank with the first difference when the ranks collected different items."""
        self.pytest_session = session
        ids = [item.nodeid for item in session.items]
        self.channel.set(f"collected/{self.rank}", ids)
        mine = {"digest": hashlib.sha256(json.dumps(ids).encode()).hexdigest(),
                "count": len(ids), "host": socket.gethostname(), "pid": os.getpid()}

        def decide(values: dict[int, Any], missing: list[int]) -> dict[str, Any]:
            hosts = {str(r): v["host"] for r, v in values.items()}
            if missing:
                return {"hosts": hosts, "error": (
                    f"ranks {missing} did not report their collected tests within "
                    f"{START_TIMEOUT_S:g} s: every process the launcher started must run pytest "
                    "with the same arguments (a SLURM batch script must start pytest through "
                    "srun; --distbench-launcher=local ignores the launcher)")}
            differing = [r for r, v in values.items() if v["digest"] != mine["digest"]]
            if not differing:
                return {"hosts": hosts, "error": None}
            first = differing[0]
            return {"hosts": hosts, "error": (
                "the ranks collected different tests; every rank must run the same items in "
                f"the same order ({len(differing)} of {self.world_size} ranks differ from rank "
                f"0): {first_difference(ids, self.channel.get(f'collected/{first}'), first)}")}

        answer = self._round("collect", mine, decide, START_TIMEOUT_S)
        self.hosts = {int(r): h for r, h in answer["hosts"].items()}
        if answer["error"]:
            pytest.exit(answer["error"], returncode=pytest.ExitCode.USAGE_ERROR)
        self._accept_link()
        self.index_of = {item.nodeid: i for i, item in enumerate(session.items)}

    def _backend_reason(self, key: WorldKey) -> str:
        """Why this backend cannot run on some rank ("" if it can), agreed once per backend."""
        name = (key.backend, key.device_type)
        if name not in self._unavailable:
            from ..plugin import _backend_unavailable

            # Each rank needs a GPU of its own on its host: cuda:<local rank>.
            mine = _backend_unavailable(key.backend, self.launch.local_rank + 1) or ""

            def decide(values: dict[int, Any], missing: list[int]) -> str:
                bad = {r: v for r, v in sorted(values.items()) if v}
                if not bad:
                    return ""
                r, reason = next(iter(bad.items()))
                return f"rank {r} ({self.hosts.get(r, '?')}): {reason}" + (
                    f" (and {len(bad) - 1} more ranks)" if len(bad) > 1 else "")

            self._unavailable[name] = self._round(
                f"backend/{key.backend}-{key.device_type}", mine, decide, START_TIMEOUT_S)
        return self._unavailable[name]

    # -- the in-process world ---------------------------------------------------------------

    def _world(self, key: WorldKey) -> Any:
        if self._rank_obj is not None and self._world_key == key:
            return self._rank_obj
        self._close_world(graceful=True)
        from .rank import _Rank

        self._worlds += 1
        spec = RankSpec(
            rank=self.rank, world_size=self.world_size, backend=key.backend,
            device_type=key.device_type, store_host=self.launch.master_addr,
            store_port=self.launch.master_port, store_prefix=f"{self.prefix}world{self._worlds}/",
            capture_path="", timeout_s=self.timeout_s, cpus=None,
            local_rank=self.launch.local_rank)
        began = time.perf_counter()
        self._rank_obj = _Rank(spec)
        self._world_key = key
        self._new_world = True
        if self.rank == 0:
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

    def run_item(self, item: pytest.Function, settings: Settings, key: WorldKey,
                 fresh_world_after: bool = False) -> list[dict[str, Any]]:
        # fresh_world_after cannot be honoured: the launcher's processes are the world.
        self.settle()  # the verdict of the test before, before this body may use the world
        index = self.index_of[item.nodeid]
        reason = self._backend_reason(key)
        if reason:
            pytest.skip(reason)
        running = hang.Running(index, item, settings.timeout, time.monotonic())
        self.watch.arm(running)
        outcome = self._run_here(item, settings, key, running)
        if self.rank != 0:
            if outcome["status"] == "passed":  # the others posted before their grace wait
                self._send_outcome(running, outcome)
            return self._provisional(running, outcome)
        # Rank 0 posts no outcome of its own (its verdict says it finished): it reads every
        # other rank's outcome, then sends the verdict.
        self._own = (running.index, outcome)
        # The deadline watch acts at the test's deadline; this bound is a backstop.
        others = self._gather(running, settings.timeout + hang.STACK_WAIT_S)
        if not self.watch.disarm():
            hang.park()  # the deadline watch reports the hang and ends the process
        if others is None:  # past the deadline before the watch thread got to run
            self._report_hang(running)
            hang.exit_now()
        posted = {0: outcome, **others}
        if any(o["status"] != "passed" for o in posted.values()):
            self._read_releases(running, posted)
        verdict = self._judge(item, settings, key, posted)
        self._send_verdict(running, verdict)
        if verdict["rebuild"]:  # a rank that released the others has already closed its own
            self._close_world(graceful=False)
        if verdict["output"]:
            item.add_report_section("call", "ranks", verdict["output"])
        if verdict["status"] == "failed":
            pytest.fail(verdict["message"], pytrace=False)
        if verdict["status"] == "skipped":
            pytest.skip(verdict["message"])
        return []  # rank 0 keeps the records and has already gated them

    def _gather(self, running: hang.Running, timeout_s: float) -> dict[int, Any] | None:
        """Rank 0: the other ranks' outcomes of the running test; None if some did not come."""
        if self._zero_link is None:
            return {}
        return self._zero_link.gather(running.index, timeout_s)

    def _send_verdict(self, running: hang.Running, verdict: dict[str, Any]) -> None:
        """Rank 0: the verdict to every other rank (what they apply: not the output)."""
        if self._zero_link is None:
            return
        self._zero_link.forget(running.index)
        applied = {k: verdict[k] for k in ("status", "message", "rebuild")}
        self._zero_link.broadcast(running.index, applied)
        if time.monotonic() - running.started > running.timeout_s / 2:
            # A rank that started later may reach its own deadline before it reads this: its
            # verdict watch then looks in the store.
            self.channel.set(running.key("verdict"), applied)

    def _send_outcome(self, running: hang.Running, outcome: dict[str, Any]) -> None:
        assert self._peer_link is not None
        self._peer_link.send(running.index, outcome)

    # -- ranks other than 0: the verdict, one test late -----------------------------------

    def _provisional(self, running: hang.Running, outcome: dict[str, Any]
                     ) -> list[dict[str, Any]]:
        """End the test on this rank without waiting for rank 0's verdict.

        Rank 0 judges while this rank finishes the test's bookkeeping and starts the next
        one; `settle` reads the verdict before the next body runs (or at the end of the
        session). This rank's own outcome is its provisional result: a failure stays a failure
        (any failed rank fails the test); a pass or skip that rank 0 turns into a failure is
        counted when the verdict is read, so exit codes and --maxfail agree with rank 0.
        """
        self._pending = (running, outcome["status"])
        if outcome["status"] == "failed":
            pytest.fail(outcome["message"], pytrace=False)
        if outcome["status"] == "skipped":
            pytest.skip(outcome["message"])
        return []

    def settle(self) -> None:
        """Ranks other than 0: read and apply the verdict still pending, if any (blocking)."""
        if self._pending is None:
            return
        running, provisional = self._pending
        self._pending = None
        assert self._peer_link is not None
        verdict = self._peer_link.verdict(running.index,
                                          running.timeout_s + hang.VERDICT_MARGIN_S)
        if verdict is None and self._peer_link.lost and self.watch.disarm():
            # Rank 0 ends its connection only after its last verdict, or when it is gone (a
            # hang's report is the verdict watch's to finish: it has disarmed nothing then).
            hang.exit_now(hang.EXIT_CODE, f"distbench rank {self.rank}: lost rank 0 during "
                                          f"{running.item.nodeid} (its connection closed); "
                                          "exiting")
        if verdict is None or verdict["status"] == "hung":
            hang.park()  # the verdict watch reports the stack and ends the process
        self.watch.disarm()
        if verdict["rebuild"]:
            self._close_world(graceful=False)
        if verdict["status"] == "failed" and provisional != "failed":
            _report_late_failure(running.item, verdict["message"])

    def _run_here(self, item: pytest.Function, settings: Settings, key: WorldKey,
                  running: hang.Running) -> dict[str, Any]:
        """Run the body in this process; the outcome as JSON ("released": this rank closed its
        process group to release the others)."""
        info = None
        self._live = None
        try:
            task = _task_for(item, settings)
        except pytest.fail.Exception as exc:  # an argument that the ranks could not be sent
            task, outcome = None, TestOutcome(rank=self.rank, status="failed", message=exc.msg)
        if task is not None:
            try:
                rank_obj = self._world(key)
                if self._new_world:
                    info = dict(rank_obj.info(), host=socket.gethostname())
                    self._new_world = False
            except Exception:  # noqa: BLE001 - joining the process group failed here
                rank_obj, outcome = None, TestOutcome(
                    rank=self.rank, status="failed",
                    message="could not join the process group:\n" + traceback.format_exc())
            if rank_obj is not None:
                if self.rank == 0 and task.settings.report_every_s:
                    self._live = LivePrinter(self.config, item.nodeid, self._live_stream)
                rank_obj.on_progress = self._live
                outcome = rank_obj.run(task)
        posted = {"status": outcome.status, "message": outcome.message,
                  "measurements": [asdict(m) for m in outcome.measurements],
                  "output": self._take_output(), "order": None, "released": False,
                  "info": info}
        if outcome.status != "passed":
            self._wait_for_the_others(running, posted)
        return posted

    def _wait_for_the_others(self, running: hang.Running, posted: dict[str, Any]) -> None:
        """A rank whose body did not pass gives the others FAILURE_GRACE_S to finish theirs,
        then releases them (and says so in `posted`).

        Ranks other than 0 post their outcome first: once every rank has finished, rank 0
        posts its verdict, which is what they wait for. Rank 0 waits for the outcomes.
        """
        posted["order"] = self.channel.add(running.key("failures"), 1)
        if self.rank == 0:
            finished = self._gather(running, FAILURE_GRACE_S) is not None
        else:
            self._send_outcome(running, posted)
            assert self._peer_link is not None
            finished = self._peer_link.ready(FAILURE_GRACE_S)
        if finished:
            return
        # Ranks still inside a collective with this one: closing its connections releases
        # them with an error instead of leaving them to the timeout. Said before it is done,
        # so rank 0, judging after the released ranks have failed, knows why.
        if self.rank != 0:
            self.channel.set(running.key(f"released/{self.rank}"), 1)
        posted["released"] = True
        self._close_world(graceful=False)

    def _read_releases(self, running: hang.Running, posted: dict[int, dict[str, Any]]) -> None:
        """Rank 0, when some rank did not pass: which ranks released the others (they said
        so after posting their outcome)."""
        for r in range(1, self.world_size):
            if self.channel.has(running.key(f"released/{r}")):
                posted[r]["released"] = True

    def _take_output(self) -> str:
        capman = self.config.pluginmanager.getplugin("capturemanager")
        if capman is None or not capman.is_globally_capturing():
            return ""
        out, err = capman.read_global_capture()
        return out + err

    # -- rank 0: judging --------------------------------------------------------------------

    def _judge(self, item: pytest.Function, settings: Settings, key: WorldKey,
               posted: dict[int, dict[str, Any]]) -> dict[str, Any]:
        for o in posted.values():
            if o["info"]:
                self.rank_infos.append(o["info"])
        output = prefix_output({r: o["output"] for r, o in posted.items() if o["output"]})
        rebuild = any(o["status"] == "failed" or o["released"] for o in posted.values())
        verdict = {"status": "passed", "message": "", "rebuild": rebuild, "output": output}
        try:
            self._judge_outcomes(item, settings, key, posted)
        except pytest.fail.Exception as exc:
            verdict.update(status="failed", message=str(exc.msg))
        except pytest.skip.Exception as exc:
            verdict.update(status="skipped", message=str(exc.msg))
        except Exception:  # noqa: BLE001 - a harness bug still gives every rank one verdict
            verdict.update(status="failed", message=traceback.format_exc(), rebuild=True)
        return verdict

    def _judge_outcomes(self, item: pytest.Function, settings: Settings, key: WorldKey,
                        posted: dict[int, dict[str, Any]]) -> None:
        failure = describe_failures(posted)
        if failure:
            pytest.fail(failure, pytrace=False)
        if any(o["status"] == "skipped" for o in posted.values()):
            reasons = sorted({o["message"] for o in posted.values() if o["message"]})
            pytest.skip("; ".join(reasons) or "skipped in a rank")
        result = RunResult(outcomes={
            r: TestOutcome(rank=r, status=o["status"], message=o["message"],
                           measurements=[Measurement(**m) for m in o["measurements"]])
            for r, o in posted.items()})
        records = build_records(item, key, result, settings)
        live = self._live.reports if self._live is not None else {}
        for record, measurement in zip(records, result.outcomes[0].measurements, strict=True):
            if live.get(measurement.name):
                record["live_reports"] = live[measurement.name]
        self.records.extend(records)
        fail_on_wrong_results(records)
        self.gate_check(item, records, settings)

    def _report_hang(self, running: hang.Running) -> None:
        """Rank 0's deadline watch, in its own thread: declare, collect stacks, report, exit."""
        ch = self._watch_channel
        own = self._own[1] if self._own is not None and self._own[0] == running.index else None
        arrived = self._zero_link.received(running.index) if self._zero_link else {}
        pending = [r for r in range(self.world_size)
                   if (own is None if r == 0 else r not in arrived)]
        ch.set(running.key("verdict"), {"status": "hung", "pending": pending})
        stacks = {0: hang.main_thread_stack(str(running.item.path))} if 0 in pending else {}
        others = [r for r in pending if r != 0]
        ch.wait([running.key(f"stack/{r}") for r in others], hang.STACK_WAIT_S)
        for r in others:
            key = running.key(f"stack/{r}")
            stacks[r] = ch.get(key) if ch.has(key) else "(no stack: the rank did not answer)"
        finished = {r: own if r == 0 else arrived[r]
                    for r in range(self.world_size) if r not in pending}
        lines = [
            f"timed out after {running.timeout_s:g} s (--distbench-timeout): ranks {pending} did "
            "not finish. In launcher mode the ranks cannot be replaced: the remaining tests are "
            "not run and every rank exits. Stacks of the live ranks:"]
        for r, stack in sorted(stacks.items()):
            lines.append(f"--- rank {r} ({self.hosts.get(r, '?')}) ---")
            lines.extend(f"[rank {r}] {line}" for line in stack.splitlines())
        failure = describe_failures(finished)
        if failure:
            lines += ["", "Before that:", failure]
        self.aborting = True
        try:
            hang.report_hang_and_exit(self.config, self.pytest_session, running, "\n".join(lines))
        finally:
            hang.flush()
            ch.set(running.key("exit"), 1)  # the others may exit now: the report is out

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
        }}

    def close(self) -> None:
        """End of the session on every rank: leave the process group, let rank 0's store
        outlive the others' last use of it. Safe to call more than once."""
        if self._closed or self.aborting:
            return
        self._closed = True
        self.watch.stop()
        self._close_world(graceful=True)
        for link in (self._zero_link, self._peer_link):
            if link is not None:
                link.close()
        if self._live_stream is not None:
            self._live_stream.close()
            self._live_stream = None
        try:
            self.channel.set(f"done/{self.rank}", 1)
            if self._hosting:
                self.channel.wait([f"done/{r}" for r in range(self.world_size)], DONE_TIMEOUT_S)
        except (StoreLost, RuntimeError):
            pass


def _report_late_failure(item: pytest.Item, message: str) -> None:
    """A test this rank ended as passed or skipped failed on rank 0's verdict: report it as
    failed now, through the same hook, so the session's failure count (exit code, --maxfail)
    is rank 0's."""
    from _pytest.reports import TestReport

    now = time.time()
    item.ihook.pytest_runtest_logreport(report=TestReport(
        item.nodeid, item.location, {k: 1 for k in item.keywords}, "failed",
        f"failed on rank 0's verdict:\n{message}", "call", sections=[], duration=0.0,
        start=now, stop=now))


def first_difference(mine: list[str], theirs: list[str], rank: int) -> str:
    """Where rank `rank`'s collected ids first differ from rank 0's."""
    for i, (a, b) in enumerate(zip(mine, theirs, strict=False)):
        if a != b:
            return f"item {i}: rank 0 has {a!r}, rank {rank} has {b!r}"
    if len(mine) > len(theirs):
        return (f"rank 0 collected {len(mine)} items, rank {rank} {len(theirs)}; "
                f"the first missing on rank {rank} is {mine[len(theirs)]!r}")
    if len(theirs) > len(mine):
        return (f"rank 0 collected {len(mine)} items, rank {rank} {len(theirs)}; "
                f"the first extra on rank {rank} is {theirs[len(mine)]!r}")
    return "the same items (but a different digest)"


def describe_failures(posted: dict[int, dict[str, Any]]) -> str:
    """The failed ranks' tracebacks, tagged with their rank, the first to fail first."""
    failed = sorted((o["order"] or 0, r) for r, o in posted.items() if o["status"] == "failed")
    if not failed:
        return ""
    parts = []
    first = failed[0][1]
    released = [r for r, o in sorted(posted.items()) if o["released"]]
    for position, (_, r) in enumerate(failed):
        body = "\n".join(f"[rank {r}] {line}" for line in posted[r]["message"].splitlines())
        if position == 0 or not released:
            parts.append(f"rank {r} raised:\n{body}")
        else:
            parts.append(f"rank {r} failed after rank {first} did (released from waiting for "
                         f"it):\n{body}")
    if released:
        parts.append(f"ranks {released} closed their process group to release the others; "
                     "every rank rebuilds it for the next test")
    return "\n\n".join(parts)
