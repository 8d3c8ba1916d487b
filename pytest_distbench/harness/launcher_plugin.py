"""pytest's side of launcher mode: detect it at configure time, quiet the ranks other than 0,
skip tests whose world sizes exclude the launcher's, agree on the collected items."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from .. import settings as settings_module
from .launcher import LaunchEnv, resolve

WORLD_SIZE_ARG = "distbench_world_size"  # the plugin's world-size parameter


def configure(config: pytest.Config) -> LaunchEnv | None:
    """Launcher mode's settings, before anything else resolves them; None in local mode."""
    launch = resolve(config, settings_module.launcher_mode(config))
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


def start(config: pytest.Config, launch: LaunchEnv,
          gate_check: Callable[[Any, list[dict[str, Any]], Any], None]) -> Any:
    """The session of this rank, with its hooks registered."""
    from .inprocess import LauncherSession

    session = LauncherSession(config, launch, gate_check)
    config.pluginmanager.register(LauncherPlugin(session), "distbench-launcher")
    return session


class LauncherPlugin:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.launch: LaunchEnv = session.launch

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        launch = self.launch
        return [f"distbench: launcher mode ({launch.launcher}): {launch.world_size} ranks, "
                f"this is rank 0 and reports for all; store {launch.master_addr}:"
                f"{launch.master_port} (the network is the launcher's and yours to choose)"]

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
