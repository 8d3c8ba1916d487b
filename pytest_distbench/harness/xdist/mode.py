"""pytest-xdist: each worker runs its own local worlds and hands its records to the controller,
which prints one set of tables and writes each file (results file, baseline) once.

The hand-over uses xdist's `workeroutput`, the dict a worker fills during pytest_sessionfinish
and the controller reads in pytest_testnodedown (the convention pytest-cov uses). Records
travel as JSON text.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from ..controller.points import Point, Run
from ..controller.session import Session

OUTPUT_KEY = "distbench"


def is_worker(config: pytest.Config) -> bool:
    return getattr(config, "workerinput", None) is not None


def worker_count(config: pytest.Config) -> int:
    return len(config.getoption("tx", None) or [])


def hands_out_tests(config: pytest.Config) -> bool:
    """Whether this process hands its tests to xdist workers: `-n N` or `--tx`; `--dist`
    alone (a project's addopts, `--dist=loadgroup`) starts no worker."""
    return (not is_worker(config) and config.getoption("dist", "no") not in (None, "no")
            and worker_count(config) > 0)


def is_controller(config: pytest.Config) -> bool:
    """The process that hands tests to xdist workers and runs none itself."""
    return hands_out_tests(config) and not config.getoption("collectonly", False)


def configure(config: pytest.Config, session: Session) -> None:
    if is_controller(config):
        session.extra_facts["xdist_workers"] = worker_count(config)
        config.pluginmanager.register(ControllerPlugin(session, worker_count(config)),
                                      "distbench-xdist")


def hand_over(config: pytest.Config, distbench: Session, session: pytest.Session) -> bool:
    """On an xdist worker: put what it measured in workeroutput (and write no file)."""
    if not is_worker(config):
        return False
    position = {item.nodeid: i for i, item in enumerate(session.items)}
    config.workeroutput[OUTPUT_KEY] = json.dumps({  # type: ignore[attr-defined]
        "records": [[_position(position, r["id"]), r] for r in distbench.records],
        "rank_infos": distbench.rank_infos,
        "world_starts": distbench.world_starts,
        "notes": distbench.notes,
    }, default=repr)
    return True


def _position(position: dict[str, int], record_id: str) -> int:
    # A record's id is the test's node id, plus "::name" for a named measurement.
    if record_id in position:
        return position[record_id]
    return position.get(record_id.rsplit("::", 1)[0], len(position))


class ControllerPlugin:
    def __init__(self, session: Session, workers: int) -> None:
        self.session = session
        self.workers = workers

    def warning(self) -> str:
        return (f"WARNING: pytest-xdist runs {self.workers} workers at once on "
                f"{os.cpu_count()} CPUs: their worlds compete for the cores and distort each "
                "other's numbers; use -n to check that benchmarks work, not to measure "
                "(the results environment records xdist_workers)")

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        from ...results.rendering.fit import wrap  # fitted as every session line (120 columns)

        return wrap(self.warning())

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        from ...results.rendering.fit import wrap

        for line in wrap(self.warning()):
            terminalreporter.line(line, yellow=True, bold=True)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        worker = getattr(node, "workerinput", {}).get("workerid", "?")
        text = getattr(node, "workeroutput", {}).get(OUTPUT_KEY)
        if text is None:
            if error is not None:
                self.session.notes.append(
                    f"distbench: xdist worker {worker} went down ({error}) without handing over "
                    "its records; they are missing from the results")
            return
        data = json.loads(text)
        for position, record in data["records"]:
            self.session.points.add([Point(record["id"], Run(record), sealed=record)],
                                    position)
        self.session.add_rank_infos(data["rank_infos"])
        self.session.world_starts.extend(
            (f"{worker} {key}", seconds) for key, seconds in data["world_starts"])
        self.session.notes.extend(data["notes"])
