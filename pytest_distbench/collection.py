"""Which tests are distbench tests, their settings, and how they are parametrized.

pytest's collection hooks (plugin.py) call these: world size and backend become parameters
of every distbench test (so they appear in its id), a setting that parametrizes (tensor size,
credits, ...) too, and requested sizes that move the same bytes are measured once.
"""

from __future__ import annotations

from typing import Any

import pytest

from . import settings as settings_module
from .harness.controller.outcome import (
    BACKEND_ARG,
    WORLD_SIZE_ARG,
    is_distbench,
    uses_rpc,
    uses_store,
)
from .harness.controller.records import REQUESTED_KEY

# Re-exported for plugin.py.
__all__ = ["BACKEND_ARG", "WORLD_SIZE_ARG", "is_distbench", "uses_rpc", "uses_store"]

def _user_parametrizes(definition: Any, name: str) -> bool:
    for mark in definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", "")
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",")]
        if name in names:
            return True
    return False


def parametrize(metafunc: pytest.Metafunc) -> None:
    """World size, backend and every parametrizing setting, as parameters of the test."""
    resolved = settings_module.of_test(metafunc.config, metafunc.definition)
    # The world coordinates are parameters, not fixtures the body asks for: add them to the
    # closure so pytest accepts the direct parametrization and puts them in the test id.
    for name in (BACKEND_ARG, WORLD_SIZE_ARG):
        if name not in metafunc.fixturenames:
            metafunc.fixturenames.append(name)
    empty = [n for n in settings_module.NARROWABLE if not getattr(resolved, n)]
    if empty:
        marker = metafunc.definition.get_closest_marker("distbench")
        supports = "; ".join(f"{n}={marker.kwargs[n]!r}" for n in empty
                             if marker is not None and n in marker.kwargs)
        reason = (f"the command line selects no {', '.join(empty)} this test supports "
                  f"(it supports {supports or 'others'}: see its @pytest.mark.distbench)")
        metafunc.parametrize(BACKEND_ARG, [pytest.param(None, id="none",
                                                        marks=pytest.mark.skip(reason=reason))])
        metafunc.parametrize(WORLD_SIZE_ARG, [None], ids=["none"])
        return
    # An unavailable backend still gets its ids; each such test skips with the reason when run.
    metafunc.parametrize(BACKEND_ARG, resolved.backend, ids=resolved.backend)
    metafunc.parametrize(WORLD_SIZE_ARG, resolved.world_size,
                         ids=[f"ws{n}" for n in resolved.world_size])
    for setting in settings_module.PARAMETRIZING:
        name = setting.param
        if name in metafunc.fixturenames and not _user_parametrizes(metafunc.definition, name):
            values = getattr(resolved, setting.name)
            metafunc.parametrize(name, values, ids=[setting.param_id(v) for v in values])


def skip_unavailable(items: list[pytest.Item]) -> None:
    """Skip, before any world starts, each test whose backend cannot run here at its world
    size (harness/environment/backends.py says why). Skipped at collection, a test is not
    among those the session's family-wise rate is shared by (gating.distbench_tests): it
    cannot fail."""
    from .harness.environment.backends import unavailable

    reasons: dict[tuple[str, int], str | None] = {}
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or not is_distbench(item):
            continue
        where = (callspec.params[BACKEND_ARG], callspec.params[WORLD_SIZE_ARG])
        if where not in reasons:
            reasons[where] = unavailable(*where)
        if reasons[where]:
            item.add_marker(pytest.mark.skip(reason=reasons[where]))


def merge_equal_sizes(config: pytest.Config, items: list[pytest.Item]) -> str | None:
    """Run once the requested sizes that a test turns into the same effective size; a note
    saying so, or None.

    A test module may define ``distbench_effective_nbytes(test_name, nbytes, world_size,
    dtype) -> int | None`` (the built-in collectives suite does: all_gather of 4 B and 16 B at
    8 ranks both move 32 B). Of items that differ only in a requested nbytes with the same
    effective size, the first runs and its records list every requested size; the others are
    deselected.
    """
    kept: dict[Any, pytest.Item] = {}
    dropped: list[pytest.Item] = []
    for item in items:
        effective = _effective_nbytes(config, item)
        if effective is None:
            continue
        key = _merge_key(item, effective)
        first = kept.setdefault(key, item)
        requested = item.callspec.params["nbytes"]
        sizes = first.stash.setdefault(REQUESTED_KEY, [])
        sizes.append(requested)
        if first is not item:
            dropped.append(item)
    for key, first in kept.items():
        # One requested size is worth keeping only where it is not what was measured (an
        # all_gather's 4 B is 8 B at 2 ranks): the table then says which it shows.
        if first.stash[REQUESTED_KEY] == [key[-1]]:
            del first.stash[REQUESTED_KEY]
    if not dropped:
        return None
    config.hook.pytest_deselected(items=dropped)
    gone = {id(item) for item in dropped}
    items[:] = [item for item in items if id(item) not in gone]
    return (f"distbench: {len(dropped)} test(s) deselected: their requested size moves the "
            "same bytes as another size of the same test (measured once; see the table notes)")


def _merge_key(item: Any, effective: int) -> tuple[Any, ...]:
    others = sorted((k, repr(v)) for k, v in item.callspec.params.items() if k != "nbytes")
    return (str(item.path), item.originalname, tuple(others), effective)


def _effective_nbytes(config: pytest.Config, item: pytest.Item) -> int | None:
    hook = getattr(getattr(item, "module", None), "distbench_effective_nbytes", None)
    callspec = getattr(item, "callspec", None)
    if hook is None or callspec is None or "nbytes" not in callspec.params:
        return None
    world_size = callspec.params.get(WORLD_SIZE_ARG)
    if world_size is None:
        return None
    dtype = settings_module.of_test(config, item).dtype
    return hook(item.originalname, callspec.params["nbytes"], world_size, dtype)
