"""One test's outcome pipeline, the same in every launch mode.

Before the ranks run: `prepare` turns a pytest item into the task every rank runs (its
arguments checked picklable, its memory pressure checked against the machine). After: `judge`
turns what the ranks sent back (a RunResult, however it travelled: a local world's pipes, a
launcher's store, an A/B variant's world) into the test's records, or into the failure or skip
pytest shows. Local, A/B and launcher mode all call these two, so a report section, a rank's
tag or a check added here reaches every mode at once.
"""

from __future__ import annotations

import pickle
import signal
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest

from ...results.document.record import Record
from ...settings import Settings
from .. import options
from ..ranks.pressure import memory_problem
from ..wire import (
    RANK_FIXTURES,
    MeasureSettings,
    PressureSettings,
    RunTest,
    TestOutcome,
    from_settings,
)
from .points import Point, Points
from .records import points_of_run
from .session import SESSION_KEY

WORLD_SIZE_ARG = "distbench_world_size"  # the parameters every distbench test gets
BACKEND_ARG = "distbench_backend"


def is_distbench(node: Any) -> bool:
    """A distbench test: marked, or asking for the `distbench` fixture."""
    return node.get_closest_marker("distbench") is not None or "distbench" in getattr(
        node, "fixturenames", ()
    )


def uses_store(item: pytest.Item) -> bool:
    """A TCPStore study test: a store and a number of clients that connect in a burst."""
    names = getattr(item, "fixturenames", ())
    return "tcp_store" in names and "clients" in names


def uses_rpc(item: pytest.Item) -> bool:
    return "rpc_agent" in getattr(item, "fixturenames", ()) or (
        item.get_closest_marker("distbench_rpc") is not None)


class RankLocal:
    """Controller-side stand-in for a fixture whose value exists only inside a rank."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}: provided inside each rank>"


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


# -- before the ranks run ----------------------------------------------------------------------

def prepare(item: pytest.Function, settings: Settings,
            sampling: tuple[float, bool] | None = None) -> RunTest:
    """The task every rank runs; fails the test on what no rank could run. `sampling`: the
    sampling target a precision-targeted run stops at instead of the user's, and whether that
    stop is the noise's (controller/revisits.py)."""
    task = _task_for(item, settings, sampling)
    pressure = task.settings.pressure
    # Memory no single rank could have fails here, before any rank is disturbed.
    problem = memory_problem(pressure, sharing=1) if pressure is not None else None
    if problem:
        pytest.fail(problem, pytrace=False)
    return task


def _task_for(item: pytest.Function, settings: Settings,
              sampling: tuple[float, bool] | None) -> RunTest:
    kwargs: dict[str, Any] = {}
    rank_fixtures = []
    for name in item._fixtureinfo.argnames:
        value = item.funcargs[name]
        if name in RANK_FIXTURES and isinstance(value, RankLocal):
            rank_fixtures.append(name)
            continue
        _check_sendable(value, f"argument {name!r}", "parametrize and fixture values of a "
                        "distbench test must be picklable")
        kwargs[name] = value
    module = item.module
    return RunTest(
        nodeid=item.nodeid,
        module_name=module.__name__,
        module_file=str(module.__file__),
        qualname=item.function.__qualname__,
        kwargs=kwargs,
        rank_fixtures=tuple(rank_fixtures),
        settings=from_settings(MeasureSettings, settings,
                               report_every_s=options.report_every_s(settings),
                               pressure=_pressure_settings(settings),
                               sampling_target=None if sampling is None else sampling[0],
                               noise_stop=sampling is not None and sampling[1]),
        sys_path=tuple(p for p in sys.path if isinstance(p, str)),
        instance_state=_instance_state(item),
    )


def _check_sendable(value: Any, what: str, rule: str) -> None:
    try:
        pickle.dumps(value)
    except Exception as exc:  # noqa: BLE001 - any pickling failure is the user's to fix
        pytest.fail(f"{what} cannot be sent to the ranks ({type(exc).__name__}: {exc}); {rule}",
                    pytrace=False)


def _instance_state(item: pytest.Function) -> dict[str, Any]:
    """A test method's instance attributes, as its set-up left them (setup_method, a class
    fixture writing to `self`): every rank's fresh instance gets a copy."""
    instance = getattr(item, "instance", None)
    state = dict(getattr(instance, "__dict__", None) or {})
    for name, value in state.items():
        _check_sendable(value, f"attribute self.{name} of {type(instance).__name__}",
                        "each rank gets a copy of the test instance's attributes, which must "
                        "be picklable (docs/user-guide.md, \"Test classes\")")
    return state


def _pressure_settings(settings: Settings) -> PressureSettings | None:
    if not options.pressure_used(settings):
        return None
    return from_settings(PressureSettings, settings)


# -- after the ranks ran -----------------------------------------------------------------------

def judge(item: pytest.Function, key: Any, result: RunResult, settings: Settings, *,
          variant: str = "", live_reports: dict[str | None, list[Any]] | None = None,
          keep: Points | None = None) -> list[Point]:
    """The test's points, or its failure or skip (raised as pytest does).

    `variant`: A/B mode's "baseline" or "candidate", named in every section and message.
    `keep`: the session's points, which get this test's before a wrong result fails it
    (the results file shows what was measured, and that it was wrong).
    """
    label = f"{variant} variant: " if variant else ""
    shown = prefix_output(result.output)
    if shown:
        item.add_report_section("call", f"{variant} ranks" if variant else "ranks", shown)
    ended = {r for r, o in result.outcomes.items() if o.status in ENDED_EARLY}
    failure = "" if only_released_by(result, ended) else describe_problems(
        result, settings.timeout)
    if failure:
        pytest.fail(label + failure, pytrace=False)
    if ended:
        end_early(result, ended, key.world_size, label)
    session = item.config.stash.get(SESSION_KEY, None)
    points, broken = points_of_run(
        item, key, [result.outcomes[r].measurements for r in range(key.world_size)], settings,
        live_reports or {}, one_host=session is None or not session.external)
    records = [p.first.record for p in points]
    _add_environment_section(item, records)
    if keep is not None:
        keep.add(points)
    if broken:
        pytest.fail(label + broken, pytrace=False)
    wrong = sum(r["wrong"] or 0 for r in records)
    if wrong:
        pytest.fail(
            f"{label}{wrong} wrong element(s) in the checked result "
            f"({', '.join(r['id'] for r in records if r['wrong'])}): "
            "a collective that computes the wrong answer is a failure, not a fast number",
            pytrace=False,
        )
    return points


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


def _add_environment_section(item: pytest.Function, records: list[Record]) -> None:
    """--distbench-print-env: the pressured ranks' environment, in the test's report."""
    lines = []
    for record in records:
        for r, env in sorted(((record.get("pressure") or {}).get("env") or {}).items()):
            lines.append(f"--- {record['name']}: environment of rank {r} ---")
            lines.extend(f"{k}={v}" for k, v in sorted(env.items()))
    if lines:
        item.add_report_section("call", "environment of the pressured ranks", "\n".join(lines))
