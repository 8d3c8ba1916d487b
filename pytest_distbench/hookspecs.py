"""Hooks a conftest.py or another plugin may implement (plugin.py adds them in
`pytest_addhooks`, as pytest-xdist adds its newhooks.py). docs/architecture.md, "Extending",
shows both in a conftest.py."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.hookspec
def pytest_distbench_environment(config: pytest.Config) -> dict[str, Any] | None:
    """Facts to add to the results document's environment section (`distbench.environment`),
    e.g. ``{"cluster": "lab-a"}``: JSON values under names the plugin does not use itself.

    Called once, where the document is built (the pytest process that writes the results: the
    controller under xdist, rank 0 under a launcher); a name the plugin sets, or a value JSON
    cannot hold, fails the session with a line naming it.
    """


@pytest.hookspec
def pytest_distbench_record(config: pytest.Config, record: dict[str, Any]) -> None:
    """One benchmark record as the results file holds it (the fields of
    docs/results-schema.md's ``distbench`` object), its printed interval final.

    Called once per record at the end of the test loop, after the session's last revisit
    wrote every interval: in the pytest process that started the ranks (an xdist worker under
    xdist), or in rank 0's under a launcher (torchrun started every rank's pytest); never
    inside a rank's test body. The hook gets a copy: what it changes reaches neither the
    results file nor the baseline. A hook that raises fails the session once, in one line
    naming its plugin, and is not called again (docs/failure-model.md).
    """
