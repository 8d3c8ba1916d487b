"""One test's outcome pipeline, the same in every launch mode.

Before the ranks run: `prepare` turns a pytest item into the task every rank runs (its
arguments checked picklable, its memory pressure checked against the machine). After: `judge`
turns what the ranks sent back (a RunResult, however it travelled: a local world's pipes, a
launcher's store, an A/B variant's world) into the test's points, or into the failure or skip
pytest shows (its words: harness/failures.py). Local, A/B and launcher mode all call these
two, so a report section, a rank's tag or a check added here reaches every mode at once.
"""

from __future__ import annotations

import pickle
import sys
from typing import Any

import pytest

from ...results.document.record import Record
from ...settings import Settings
from .. import options
from ..failures import (
    ENDED_EARLY,
    RunResult,
    describe_problems,
    end_early,
    only_released_by,
    prefix_output,
)
from ..ranks.pressure import memory_problem
from ..wire import (
    RANK_FIXTURES,
    MeasureSettings,
    PressureSettings,
    RunTest,
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


def _add_environment_section(item: pytest.Function, records: list[Record]) -> None:
    """--distbench-print-env: the pressured ranks' environment, in the test's report."""
    lines = []
    for record in records:
        for r, env in sorted(((record.get("pressure") or {}).get("env") or {}).items()):
            lines.append(f"--- {record['name']}: environment of rank {r} ---")
            lines.extend(f"{k}={v}" for k, v in sorted(env.items()))
    if lines:
        item.add_report_section("call", "environment of the pressured ranks", "\n".join(lines))
