"""pytest's side of launcher mode: detect it at configure time, quiet the ranks other than 0,
skip tests whose world sizes exclude the launcher's, agree on the collected items; pytest's own
runner runs each test on every rank."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from ... import settings as settings_module
from ..controller.outcome import WORLD_SIZE_ARG
from . import runkey
from .detect import LaunchEnv, resolve

if TYPE_CHECKING:
    from .session import GateCheck, LauncherSession


def configure(config: pytest.Config) -> LaunchEnv | None:
    """Launcher mode's settings, before anything else resolves them; None in local mode."""
    launch = resolve(config, settings_module.of_session(config).launcher)
    if launch is None:
        return None
    # The launcher fixed the world: its size is the default world size.
    config.stash.setdefault(settings_module.RUN_DEFAULTS, {})["world_size"] = str(
        launch.world_size)
    if launch.rank != 0:
        _quiet(config)
    return launch


def _quiet(config: pytest.Config) -> None:
    """Only rank 0 talks to the terminal (as under pytest-xdist's workers, which run without
    a terminal reporter); the others' failures reach rank 0 through the store."""
    manager = config.pluginmanager
    reporter = manager.get_plugin("terminalreporter")
    if reporter is not None:
        manager.unregister(reporter)
    manager.set_blocked("terminalreporter")
    # Report files are rank 0's too (junitxml's configure comes after this one and reads it).
    config.option.xmlpath = None


def _drop_log_capture(session: pytest.Session, rank: int) -> None:
    """No per-test log capture where it would only differ from local mode.

    pytest's logging plugin attaches its handlers, three phases a test, to every
    non-propagating logger (importing torch makes 42), which is the largest part of a quiet
    rank's per-test work and 17 % of rank 0's. Without the plugin a warning logged in a test
    body reaches stderr, which is captured and shown on rank 0 prefixed `[rank N]`: what local
    mode shows, where bodies run in rank processes and the controller's log capture sees none
    of their records. The ranks other than 0 have no terminal and their reports go nowhere, so
    their captured records were dropped anyway. Rank 0 also runs the session's plain tests,
    whose logs local mode does capture: it drops the plugin only when every test is a
    distbench test, and keeps it for live logging (log_cli). Kept everywhere when a test uses
    `caplog` or a log file is asked for."""
    config = session.config
    if config.getoption("log_file", None) or config.getini("log_file"):
        return
    if any("caplog" in getattr(item, "fixturenames", ()) for item in session.items):
        return
    if rank == 0:
        from ..controller.outcome import is_distbench

        if config.getoption("log_cli_level", None) or config.getini("log_cli"):
            return
        if not all(is_distbench(item) for item in session.items):
            return
    plugin = config.pluginmanager.get_plugin("logging-plugin")
    if plugin is not None:
        config.pluginmanager.unregister(plugin)


def start(config: pytest.Config, launch: LaunchEnv, gate_check: GateCheck) -> LauncherSession:
    """The session of this rank (rank 0's role or the others'), with its hooks registered."""
    if launch.rank == 0:
        from .rank0 import RankZeroSession

        session: LauncherSession = RankZeroSession(config, launch, gate_check)
    else:
        from .others import OtherRankSession

        session = OtherRankSession(config, launch)
    config.pluginmanager.register(LauncherPlugin(session), "distbench-launcher")
    return session


class LauncherPlugin:
    def __init__(self, session: LauncherSession) -> None:
        self.session = session
        self.launch: LaunchEnv = session.launch

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        from ...results.rendering.fit import wrap  # fitted as every session line (120 columns)

        launch = self.launch
        said = [f"distbench: launcher mode ({launch.launcher}): {launch.world_size} ranks, "
                f"this is rank 0 and reports for all; store {launch.master_addr}:"
                f"{launch.master_port} (the network is the launcher's and yours to choose)",
                self._seal_line()]
        return [part for line in said for part in wrap(line)]

    def _seal_line(self) -> str:
        """Which seal holds the ranks' messages, said once (runkey.py)."""
        secret = self.session.job_secret
        if secret is not None:
            return f"distbench: seal: {self.session.seal_held} ({secret.source})"
        return f"distbench: seal: {self.session.seal_held}; {runkey.GIVE_IT}"

    def pytest_collection_modifyitems(self, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        size = self.launch.world_size
        for item in items:
            callspec = getattr(item, "callspec", None)
            wanted = callspec.params.get(WORLD_SIZE_ARG) if callspec else None
            if wanted is not None and wanted != size:
                item.add_marker(pytest.mark.skip(reason=(
                    f"launcher mode: {self.launch.launcher} started {size} ranks; this test's "
                    f"world size is {wanted}")))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.session.agree_on_collection(session)
        _drop_log_capture(session, self.launch.rank)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        """Ranks other than 0 read the verdict of the test before here when a failure may stop
        the session (--maxfail, -x, --stepwise): rank 0 stopped after that test, so must they,
        before this one starts. Otherwise the verdict is read just before the next body runs,
        and rank 0's judging overlaps this rank's bookkeeping."""
        if self.launch.rank == 0:
            return None
        if self._stops_on_failure(item.config):
            self.session.settle()
            if item.session.shouldfail or item.session.shouldstop:
                return True  # not run here either; the run loop ends after this item
        return None

    @staticmethod
    def _stops_on_failure(config: pytest.Config) -> bool:
        return bool(config.getoption("maxfail", 0) or config.getoption("stepwise", False))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Any:
        outcome = yield
        # The last test's verdict, before pytest turns the failure count into the exit code
        # (not after an interruption: rank 0 may never give it).
        if self.launch.rank != 0 and outcome.excinfo is None:
            self.session.settle()
