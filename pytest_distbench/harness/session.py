"""The controller side of a run: the rendezvous store, the pool of worlds, and the results."""

from __future__ import annotations

import pickle
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from ..registry import completed_figures
from ..results.document.schema import check_record
from ..results.statistics import stats
from ..settings import Settings
from . import options
from .live import LivePrinter
from .pressure import memory_problem
from .wire import RANK_FIXTURES, Measurement, MeasureSettings, PressureSettings, RunTest
from .world import RunResult, World, WorldKey, WorldStartError, describe_exit, prefix_output

# Idle worlds are kept for reuse; past this many ranks the least recently used go first.
MAX_LIVE_RANKS = 32
START_TIMEOUT_S = 120.0


class RankLocal:
    """Controller-side stand-in for a fixture whose value exists only inside a rank."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}: provided inside each rank>"


class DistbenchSession:
    external = False  # True where a launcher (torchrun, srun, mpirun) started the ranks

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.worlds: dict[WorldKey, World] = {}
        self.world_starts: list[tuple[str, float]] = []
        self.notes: list[str] = []
        self.comparison: Any = None  # verdict.Comparison of the whole run, when gating
        self.cpu_probes: list[float] = []  # machine speed at start and end (environment)
        self.rank_infos: list[dict[str, Any]] = []  # what each started rank saw (GPU, NCCL)
        self.rank_env: dict[str, str] = {}  # more environment for every rank (pitfall fixes)
        self.rpc_checks: list[Any] | None = None  # pitfalls.Check list, when a test uses RPC
        self.extra_facts: dict[str, Any] = {}  # more for the results environment (xdist workers)
        self._store: Any = None
        self._capture_dir: Path | None = None
        self._worlds_started = 0

    # -- worlds -------------------------------------------------------------------------------

    def world(self, key: WorldKey, timeout_s: float) -> World:
        world = self.worlds.pop(key, None)
        if world is not None and world.alive():
            self.worlds[key] = world  # re-insert: dict order is the LRU order
            return world
        if world is not None:
            world.kill()
        self._make_room(key.world_size)
        store = self._rendezvous_store()
        self._worlds_started += 1
        world = World(
            key,
            store_host="127.0.0.1",
            store_port=store.port,
            store_prefix=f"world{self._worlds_started}/",
            capture_dir=self._captures(),
            timeout_s=timeout_s,
            env=self.rank_env,
        )
        world.start(START_TIMEOUT_S)
        self.world_starts.append((str(key), world.start_s))
        self.rank_infos.extend(world.info.values())
        self.worlds[key] = world
        return world

    def retire(self, world: World) -> None:
        world.kill()
        if self.worlds.get(world.key) is world:
            del self.worlds[world.key]

    def _make_room(self, ranks: int) -> None:
        while self.worlds and sum(w.key.world_size for w in self.worlds.values()) + ranks > (
            MAX_LIVE_RANKS
        ):
            oldest = next(iter(self.worlds))
            self.worlds.pop(oldest).stop()

    def _rendezvous_store(self) -> Any:
        if self._store is None:
            from .loopback import loopback_store

            # Port 0: the kernel picks a free port, so parallel sessions never collide; bound to
            # 127.0.0.1 only (a bare TCPStore master listens on every interface).
            self._store = loopback_store()
        return self._store

    def _captures(self) -> Path:
        if self._capture_dir is None:
            self._capture_dir = Path(tempfile.mkdtemp(prefix="distbench-ranks-"))
        return self._capture_dir

    def close(self) -> None:
        """Stop every world; kill what does not stop. Safe to call more than once."""
        for world in list(self.worlds.values()):
            world.stop(timeout_s=5.0)
        self.worlds.clear()
        self._store = None
        if self._capture_dir is not None:
            shutil.rmtree(self._capture_dir, ignore_errors=True)
            self._capture_dir = None

    def environment_facts(self) -> dict[str, Any]:
        """What this launch mode adds to the results environment."""
        import socket

        return {"launcher": {"name": "local", "hosts": [socket.gethostname()]},
                **self.extra_facts}

    # -- tests --------------------------------------------------------------------------------

    def run_item(
        self, item: pytest.Function, settings: Settings, key: WorldKey,
        fresh_world_after: bool = False,
    ) -> list[dict[str, Any]]:
        """Run one test in its world; return its records, or fail/skip it as pytest does.

        `fresh_world_after`: stop the world after this test even if it ended cleanly (torch's
        RRef context stays bound to a process's first RPC agent, so a process that ran an RPC
        test cannot host another one that uses RRefs).
        """
        task = _task_for(item, settings)
        pressure = task.settings.pressure
        # Memory no single rank could have fails here, before any rank is disturbed.
        problem = memory_problem(pressure, sharing=1) if pressure is not None else None
        if problem:
            pytest.fail(problem, pytrace=False)
        try:
            world = self.world(key, settings.timeout)
        except WorldStartError as exc:
            pytest.fail(f"could not start the world: {exc}", pytrace=False)
        live = LivePrinter(item.config, item.nodeid)
        result = world.run(task, settings.timeout, on_progress=live)
        if not result.clean:
            self.retire(world)
        elif fresh_world_after:
            world.stop()
            self.retire(world)
        shown = prefix_output(result.output)
        if shown:
            item.add_report_section("call", "ranks", shown)
        _raise_for_problems(result, settings.timeout)
        statuses = {o.status for o in result.outcomes.values()}
        if "skipped" in statuses:
            reasons = sorted({o.message for o in result.outcomes.values() if o.message})
            pytest.skip("; ".join(reasons) or "skipped in a rank")
        records = build_records(item, key, result, settings)
        for record, measurement in zip(records, result.outcomes[0].measurements, strict=True):
            reports = live.reports.get(measurement.name)
            if reports:
                record["live_reports"] = reports
        _add_environment_section(item, records)
        self.records.extend(records)
        fail_on_wrong_results(records)
        return records


def fail_on_wrong_results(records: list[dict[str, Any]]) -> None:
    """A benchmark whose checked result is wrong fails: it is not a fast number."""
    wrong = sum(r["wrong"] or 0 for r in records)
    if wrong:
        pytest.fail(
            f"{wrong} wrong element(s) in the checked result "
            f"({', '.join(r['id'] for r in records if r['wrong'])}): "
            "a collective that computes the wrong answer is a failure, not a fast number",
            pytrace=False,
        )


def _task_for(item: pytest.Function, settings: Settings) -> RunTest:
    kwargs: dict[str, Any] = {}
    rank_fixtures = []
    for name in item._fixtureinfo.argnames:
        value = item.funcargs[name]
        if name in RANK_FIXTURES and isinstance(value, RankLocal):
            rank_fixtures.append(name)
            continue
        try:
            pickle.dumps(value)
        except Exception as exc:  # noqa: BLE001 - any pickling failure is the user's to fix
            pytest.fail(
                f"argument {name!r} cannot be sent to the ranks ({type(exc).__name__}: {exc}); "
                "parametrize and fixture values of a distbench test must be picklable",
                pytrace=False,
            )
        kwargs[name] = value
    module = item.module
    return RunTest(
        nodeid=item.nodeid,
        module_name=module.__name__,
        module_file=str(module.__file__),
        qualname=item.function.__qualname__,
        kwargs=kwargs,
        rank_fixtures=tuple(rank_fixtures),
        settings=MeasureSettings(
            warmup=settings.warmup,
            iterations=settings.iterations,
            min_iterations=settings.min_iterations,
            max_iterations=settings.max_iterations,
            budget_s=settings.budget,
            dtype=settings.dtype,
            duration_s=settings.duration,
            report_every_s=options.report_every_s(settings),
            pressure=_pressure_settings(settings),
        ),
        sys_path=tuple(p for p in sys.path if isinstance(p, str)),
    )


def _pressure_settings(settings: Settings) -> PressureSettings | None:
    if not options.pressure_used(settings):
        return None
    return PressureSettings(
        cpu_threads=settings.cpu_threads,
        allocate_bytes=settings.allocate,
        touch_bytes=settings.touch,
        touch_once=settings.touch_once,
        log_threads=settings.log_threads,
        log_lines=settings.log_lines,
        print_env=settings.print_env,
    )


def _add_environment_section(item: pytest.Function, records: list[dict[str, Any]]) -> None:
    """--distbench-print-env: the pressured ranks' environment, in the test's report."""
    lines = []
    for record in records:
        for r, env in sorted(((record.get("pressure") or {}).get("env") or {}).items()):
            lines.append(f"--- {record['name']}: environment of rank {r} ---")
            lines.extend(f"{k}={v}" for k, v in sorted(env.items()))
    if lines:
        item.add_report_section("call", "environment of the pressured ranks", "\n".join(lines))


def _pressure_record(ms: list[Measurement]) -> dict[str, Any] | None:
    """The record's `pressure`: what ran, in which ranks, and their environment if asked."""
    pressured = [(r, m.pressure) for r, m in enumerate(ms) if m.pressure is not None]
    if not pressured:
        return None
    first = dict(pressured[0][1])
    first.pop("env", None)
    out: dict[str, Any] = {"ranks": [r for r, _ in pressured], **first}
    out["log_lines_written"] = sum(p.get("log_lines_written", 0) for _, p in pressured)
    envs = {str(r): p["env"] for r, p in pressured if "env" in p}
    if envs:
        out["env"] = envs
    return out


def _raise_for_problems(result: RunResult, timeout_s: float) -> None:
    parts = []
    for r, code in sorted(result.died.items()):
        parts.append(f"rank {r} died during the test: {describe_exit(code)}")
    for r, outcome in sorted(result.outcomes.items()):
        if outcome.status == "failed":
            body = "\n".join(f"[rank {r}] {line}" for line in outcome.message.splitlines())
            parts.append(f"rank {r} raised:\n{body}")
    if result.hung:
        lines = [
            f"timed out after {timeout_s:g} s (--distbench-timeout): ranks {result.hung} did not "
            "finish; the world was killed and will be rebuilt. Stacks of the live ranks:"
        ]
        for r, stack in sorted(result.stacks.items()):
            lines.append(f"--- rank {r} ---")
            lines.extend(f"[rank {r}] {line}" for line in stack.splitlines())
        parts.append("\n".join(lines))
    if result.released and parts:
        parts.append(
            f"ranks {result.released} were still running after that and were stopped; "
            "the world will be rebuilt"
        )
    if parts:
        pytest.fail("\n\n".join(parts), pytrace=False)


def build_records(
    item: pytest.Function, key: WorldKey, result: RunResult, settings: Settings
) -> list[dict[str, Any]]:
    """Merge what every rank measured into one record per measure() call."""
    per_rank = [result.outcomes[r].measurements for r in range(key.world_size)]
    shapes = {tuple((m.name, len(m.samples)) for m in ms) for ms in per_rank}
    if len(shapes) != 1:
        pytest.fail(
            "the ranks made different distbench.measure() calls (names and iteration counts "
            f"per rank: {[[(m.name, len(m.samples)) for m in ms] for ms in per_rank]}); "
            "every rank must measure the same things",
            pytrace=False,
        )
    callspec = getattr(item, "callspec", None)
    # storage turns values JSON cannot hold into their repr when the file is written.
    params = {
        k: v for k, v in (callspec.params.items() if callspec else ()) if not k.startswith(
            "distbench_")
    }
    marker = item.get_closest_marker("distbench")
    threshold = settings.threshold if marker and "threshold" in marker.kwargs else None
    records = []
    for index, first in enumerate(per_rank[0]):
        ms: list[Measurement] = [per_rank[r][index] for r in range(key.world_size)]
        rank_samples = [m.samples for m in ms]
        samples = stats.per_iteration_max(rank_samples)
        summary = stats.summarize(samples)
        algbw = (
            stats.algbw_gbps(first.nbytes, summary.p50)
            if first.nbytes and summary.p50 > 0 else None
        )
        wrong = None if first.wrong is None else sum(m.wrong or 0 for m in ms)
        records.append(
            {
                "id": item.nodeid + (f"::{first.name}" if first.name else ""),
                "name": item.name + (f"::{first.name}" if first.name else ""),
                "family": first.family or item.originalname,
                "backend": key.backend,
                "world_size": key.world_size,
                "device": key.device_type,
                "placement": key.bind,
                "params": params,
                "nbytes": first.nbytes,
                "count": first.count,
                "dtype": first.dtype,
                "busbw_factor": first.busbw_factor,
                "warmup": first.warmup,
                "iterations": len(samples),
                "samples": samples,
                "rank_samples": rank_samples,
                "summary": summary.as_dict(),
                "algbw_gbps": algbw,
                "busbw_gbps": None if algbw is None else stats.busbw_gbps(
                    algbw, first.busbw_factor),
                "wrong": wrong,
                "skew": stats.rank_skew(rank_samples),
                "stalls": stats.stall_count(samples),
                "threshold": threshold,
                "figures": first.figures,
                "peak_rss_bytes": (None if any(m.peak_rss_bytes is None for m in ms)
                                   else [m.peak_rss_bytes for m in ms]),
                "duration_s": first.duration_s,
                "pressure": _pressure_record(ms),
            }
        )
        records[-1]["figures"] = completed_figures(records[-1])
        check_record(records[-1])  # a bad record fails its own test, naming the field
    return records
