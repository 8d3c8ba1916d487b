"""Launcher mode, ranks other than 0: a lean run of each plain distbench test.

Every launched rank is a pytest process, and on a machine with fewer cores than ranks pytest's
own per-test work (three phases of hooks, a report object per phase, its logging, the fixture
machinery) done by every rank adds up to more than the test. The ranks other than 0 have no
terminal and no report files: rank 0 reports for all, and what these ranks need from a test
is that its body runs (with the same arguments as on rank 0), that a failure counts towards
their exit code and --maxfail exactly as on rank 0, and that setup and teardown of the
collectors around it happen as pytest does them.

So a test qualifies for the lean run when nothing else can tell the difference: its
arguments are parametrize values and distbench's rank-local placeholders only (no other
fixture, no autouse fixture, no `request`), it carries no skip, skipif, xfail or benchmark
mark and is no hypothesis test, and the session has no plugin or conftest hook in the
per-test phases that this module would bypass (see `session_allows`). Then, per test: the
collectors' setup through pytest's SetupState (with the arguments filled in beforehand, so
no fixture is looked up), the body through pytest_pyfunc_call (the plugin's run_item: the
store exchange, the verdict), the teardown through SetupState, all inside one window of
pytest's global capture; logstart and logfinish are announced. A report is made and logged
(makereport, logreport, exception_interact, as pytest's runner does) only for a phase that
raised: a passed phase's report changed nothing on these ranks. Every other test runs
pytest's full protocol.
"""

from __future__ import annotations

import bdb
import os
import sys
import types
from collections.abc import Callable
from typing import Any

import pytest

from ..controller.outcome import RankLocal
from ..wire import RANK_FIXTURES

# Per-test hooks whose implementations a lean run bypasses (it calls pytest_pyfunc_call,
# logstart and logfinish itself; makereport and logreport only for a phase that raised). Any
# implementation outside these modules (a conftest, another plugin) keeps the full protocol.
_PHASE_HOOKS = ("pytest_runtest_setup", "pytest_runtest_call", "pytest_runtest_teardown")
_PHASE_MODULES = frozenset({
    "_pytest.runner",  # SetupState setup / teardown_exact, item.runtest(): done here
    "_pytest.capture",  # the global capture window: done here, once per test
    "_pytest.skipping",  # skip/skipif/xfail marks: items with them are not lean
    "_pytest.unraisableexception",  # collected after the body, as in the call phase
    "_pytest.threadexception",
    "_pytest.logging",  # only while its plugin is registered: then nothing is lean
    # Plugins that act only on their own tests: a `benchmark` mark (not lean) or fixture (not
    # a lean item's), a @given test (not lean).
    "pytest_benchmark.plugin",
    "_hypothesis_pytestplugin",
})
_THIRD_PARTY = frozenset({"pytest_benchmark.plugin", "_hypothesis_pytestplugin"})
# Report hooks: a passed phase's report is not made; pytest's own do nothing with one that
# matters on a quiet rank (counts of failures, the last-failed cache: see `lean_now`). pytest's
# fixture hooks act only under --setup-only/--setup-plan, which keep the full protocol.
_REPORT_HOOKS = ("pytest_runtest_makereport", "pytest_runtest_logreport",
                 # Fixtures: a lean item's values are filled in without executing a fixture.
                 "pytest_fixture_setup", "pytest_fixture_post_finalizer")
_REPORT_MODULE_PREFIXES = ("_pytest.", "pytest_distbench.")
# Options under which pytest runs tests differently or interactively.
_FULL_PROTOCOL_OPTIONS = ("stepwise", "setuponly", "setupplan", "setupshow", "usepdb", "trace")
_MARKS = ("skip", "skipif", "xfail", "benchmark")  # marks that per-test hooks act on
RANK_LOCAL_ATTR = "_distbench_rank_local"  # set on the plugin's placeholder fixture functions


def _module_of(plugin: Any) -> str:
    """The module a hook implementation comes from (a conftest's is its own module name)."""
    if isinstance(plugin, types.ModuleType):
        return plugin.__name__
    return type(plugin).__module__


def session_allows(config: pytest.Config, protocol_owner: Any) -> bool:
    """Whether this session's plugins and options leave room for lean runs at all."""
    manager = config.pluginmanager
    if manager.get_plugin("logging-plugin") is not None:
        return False  # kept for caplog or a log file: its per-phase capture must run
    if any(config.getoption(name, False) for name in _FULL_PROTOCOL_OPTIONS):
        return False
    hook = config.hook
    for name in _PHASE_HOOKS:
        if any(_module_of(impl.plugin) not in _PHASE_MODULES
               for impl in getattr(hook, name).get_hookimpls()):
            return False
    for name in _REPORT_HOOKS:
        if any(not _module_of(impl.plugin).startswith(_REPORT_MODULE_PREFIXES)
               and _module_of(impl.plugin) not in _THIRD_PARTY
               for impl in getattr(hook, name).get_hookimpls()):
            return False
    # Another plugin that runs the protocol itself (reruns, timeouts in-process) keeps it.
    for impl in hook.pytest_runtest_protocol.get_hookimpls():
        if not impl.hookwrapper and not impl.wrapper and impl.plugin is not protocol_owner \
                and _module_of(impl.plugin) != "_pytest.runner":
            return False
    return True


def _direct_param_def() -> type | None:
    try:
        from _pytest.python import DirectParamFixtureDef
    except ImportError:  # another pytest: no lean runs rather than a guess
        return None
    return DirectParamFixtureDef


def arguments(item: pytest.Item) -> dict[str, Any] | None:
    """The item's fixture values when each is a parametrize value or a rank-local placeholder
    (then no fixture needs setting up); None for any other item."""
    if not isinstance(item, pytest.Function) or any(
            item.get_closest_marker(name) is not None for name in _MARKS) or getattr(
            item.obj, "is_hypothesis_test", False):
        return None
    direct = _direct_param_def()
    callspec = getattr(item, "callspec", None)
    info = getattr(item, "_fixtureinfo", None)
    if direct is None or callspec is None or info is None:
        return None
    values: dict[str, Any] = {}
    for name in info.names_closure:
        defs = info.name2fixturedefs.get(name)
        if not defs:
            return None
        fixturedef = defs[-1]  # the one that applies to this item
        if isinstance(fixturedef, direct) and name in callspec.params:
            values[name] = callspec.params[name]
        elif name in RANK_FIXTURES and getattr(fixturedef.func, RANK_LOCAL_ATTR, None) == name:
            values[name] = RankLocal(name)
        else:
            return None
    return values


def lean_now(item: pytest.Item) -> bool:
    """Run-time part of the check: a test in the last-failed cache reports its pass in full
    (the cache plugin drops it from the list on that report)."""
    lf = item.config.pluginmanager.get_plugin("lfplugin")
    return lf is None or item.nodeid not in getattr(lf, "lastfailed", {})


def _collectors() -> tuple[Callable[[pytest.Config], None], ...]:
    found = []
    for module, name in (("_pytest.unraisableexception", "collect_unraisable"),
                         ("_pytest.threadexception", "collect_thread_exception")):
        try:
            found.append(getattr(__import__(module, fromlist=[name]), name))
        except (ImportError, AttributeError):
            pass
    return tuple(found)


_COLLECT = _collectors()
_CURRENT = "PYTEST_CURRENT_TEST"


def run(item: pytest.Function, nextitem: pytest.Item | None, values: dict[str, Any]) -> None:
    """pytest's run protocol for one qualifying item, minus what only reporting needs."""
    ihook = item.ihook
    config = item.config
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    capman = config.pluginmanager.get_plugin("capturemanager")
    reraise: tuple[type[BaseException], ...] = (pytest.exit.Exception, KeyboardInterrupt)
    setupstate = item.session._setupstate
    if not item._request:  # a re-run item, as pytest's runner handles it
        item._initrequest()
    item.funcargs = dict(values)  # Function.setup fills only what is missing: nothing
    capturing = capman is not None and capman.is_globally_capturing()
    if capturing:
        capman.resume_global_capture()
    try:
        setup = pytest.CallInfo.from_call(lambda: _setup(item, setupstate), "setup",
                                          reraise=reraise)
        if setup.excinfo is not None:
            _report(item, setup)
        else:
            _report(item, pytest.CallInfo.from_call(lambda: _call(item), "call",
                                                    reraise=reraise))
        if item.session.shouldfail or item.session.shouldstop:
            nextitem = None  # as pytest does: tear everything down now
        _report(item, pytest.CallInfo.from_call(lambda: _teardown(item, setupstate, nextitem),
                                                "teardown", reraise=reraise))
    finally:
        os.environ.pop(_CURRENT, None)
        item._request = False  # as pytest's runner leaves a finished item
        item.funcargs = None  # type: ignore[assignment]
        if capturing:
            capman.suspend_global_capture(in_=False)
            capman.read_global_capture()  # output after the body's own read goes nowhere
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)


def _teardown(item: pytest.Function, setupstate: Any, nextitem: pytest.Item | None) -> None:
    os.environ[_CURRENT] = f"{item.nodeid} (teardown)".replace("\x00", "(null)")
    setupstate.teardown_exact(nextitem)


def _setup(item: pytest.Function, setupstate: Any) -> None:
    os.environ[_CURRENT] = f"{item.nodeid} (setup)".replace("\x00", "(null)")
    setupstate.setup(item)


def _call(item: pytest.Function) -> None:
    os.environ[_CURRENT] = f"{item.nodeid} (call)".replace("\x00", "(null)")
    item.runtest()
    for collect in _COLLECT:
        collect(item.config)


def _report(item: pytest.Function, call: pytest.CallInfo[None]) -> None:
    """A phase that raised is reported as pytest reports it; a passed one is not."""
    if call.excinfo is None:
        return
    ihook = item.ihook
    report = ihook.pytest_runtest_makereport(item=item, call=call)
    ihook.pytest_runtest_logreport(report=report)
    unittest = sys.modules.get("unittest")
    quiet = (pytest.skip.Exception, bdb.BdbQuit) + ((unittest.SkipTest,) if unittest else ())
    if not hasattr(report, "wasxfail") and not isinstance(call.excinfo.value, quiet):
        ihook.pytest_exception_interact(node=item, call=call, report=report)
