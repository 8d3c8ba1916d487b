"""Repository-root conftest: `pytest` runs the plugin's own tests, `pytest --distbench` the
built-in benchmark suites.

Both directories are testpaths; with --distbench and no explicit paths the plugin's own tests
(slow pytester sessions, no benchmarks) are left out, so the main job is only benchmarks.
"""

from __future__ import annotations

import pytest

from pytest_distbench.settings import of_session


def pytest_configure(config: pytest.Config) -> None:
    if (
        of_session(config).run
        and config.args_source == pytest.Config.ArgsSource.TESTPATHS
    ):
        config.args[:] = [arg for arg in config.args if arg != "tests"]
