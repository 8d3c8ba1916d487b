"""pytest hooks: options, parametrization, dispatch of distbench tests to rank worlds, output.

Hooks only: what they do lives in collection.py (which tests, their settings and parameters),
harness/ (running a test in its ranks, per launch mode), gating.py (every baseline option)
and outputs.py (the end-of-session document and everything made from it).
"""

from __future__ import annotations

import atexit
from typing import TYPE_CHECKING, Any

import pytest

from . import collection, gating, outputs, registry
from . import settings as settings_module
from .harness.controller.outcome import RankLocal
from .harness.controller.revisits import Once
from .harness.controller.runs import SCHEDULE_KEY
from .harness.controller.session import SESSION_KEY
from .harness.local import limits
from .harness.wire import RANK_FIXTURES

if TYPE_CHECKING:
    from .harness.launcher.session import LauncherSession

SKIP_REASON = "distbench benchmark: run with --distbench"
# A/B mode and baseline options (checks, their summary) live in their own plugin module;
# settings.py adds every option and resolves the session's settings. Registered last, its
# tryfirst pytest_configure runs before gating's (pluggy calls later registrations first).
pytest_plugins = ["pytest_distbench.gating", "pytest_distbench.settings"]


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "distbench(**settings): a distributed benchmark run in every rank of a world; keywords "
        + ", ".join(s.name for s in settings_module.SETTINGS)
        + " override the command line and ini for this test",
    )
    config.addinivalue_line(
        "markers",
        "distbench_rpc: the test uses torch.distributed.rpc (the RPC environment checks run; "
        "tests that request rpc_agent need no marker)",
    )
    options = settings_module.of_session(config)
    if not options.run:
        return
    collected = [path for family in registry.families() if family.collect is not None
                 for path in family.collect(options)]
    if collected and config.args_source != pytest.Config.ArgsSource.ARGS:
        # The option names what to run: the ini's testpaths (or the current folder) would add
        # every other suite to it (`--distbench-replay=trace` ran the whole main job).
        config.args[:] = collected
    else:
        config.args.extend(p for p in collected if p not in config.args)
    from .harness.launcher import plugin as launcher_plugin
    from .harness.xdist import mode as xdist

    launch = launcher_plugin.configure(config)  # None in local mode
    resolved = settings_module.resolve_run(config)  # a bad option stops the run here
    if launch is None:
        limits.check_request(config, resolved)  # a world too large for this machine, too
    reports = launch is None or launch.rank == 0  # in launcher mode rank 0 alone reports
    gating.configure(config, launch, reports)
    if reports:
        outputs.configure(config)
        if not xdist.is_controller(config) and not xdist.is_worker(config):
            # Under xdist the controller shows its workers' results as they come.
            config.pluginmanager.register(outputs.SuiteProgress(config), outputs.SuiteProgress.NAME)
    from .results.document.environment import cpu_probe

    if launch is None:
        from .harness.local.netns import NamespaceUnavailable
        from .harness.local.session import LocalSession

        try:
            session: LocalSession | LauncherSession = LocalSession(force=options.force,
                                        private_network=options.private_network,
                                        revisits=options.revisits)
        except NamespaceUnavailable as exc:
            raise pytest.UsageError(f"--distbench-private-network: this machine does not "
                                    f"allow a private network namespace: {exc}") from None
        session.interrupt_on_sigterm()
    else:
        if options.private_network:
            raise pytest.UsageError("--distbench-private-network: applies to local worlds; "
                                    f"the ranks of this run were started by {launch.launcher}")
        session = launcher_plugin.start(config, launch, outputs.after_test)
    # Before the forkserver starts: its torch import would compete with the probe for a core.
    session.cpu_probes.append(cpu_probe())
    if launch is None and not xdist.is_controller(config):
        from .harness.local.world import warm_up_forkserver

        session.inside(warm_up_forkserver)  # its torch import overlaps collection
    xdist.configure(config, session)
    config.stash[SESSION_KEY] = session
    # The one place the mode's schedule is chosen: A/B rounds, or each test once.
    config.stash[SCHEDULE_KEY] = gating.ab_mode(config) or Once(session.revisits)
    atexit.register(session.close)


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        session.finish()
        session.close()


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if (settings_module.of_session(metafunc.config).run
            and collection.is_distbench(metafunc.definition)):
        collection.parametrize(metafunc)


# trylast: merge equal sizes among the items that -k/-m left, never drop the one they kept.
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if settings_module.of_session(config).run:
        note = collection.merge_equal_sizes(config, items)
        if note:  # no file named in it: it may wrap (outputs keeps the lines that name one)
            from .results.rendering.fit import wrap

            config.stash[SESSION_KEY].notes.extend(wrap(note))
        # Launcher mode agrees on availability across its ranks (harness/launcher/agreement.py).
        if not config.stash[SESSION_KEY].external:
            collection.skip_unavailable(items)
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if collection.is_distbench(item):
            item.add_marker(skip)


# A wrapper, under the hook's own name: pytest registers no hook implementation whose name
# does not start with "pytest_" (a specname'd wrapper was silently never called).
@pytest.hookimpl(wrapper=True)
def pytest_report_header(config: pytest.Config) -> Any:
    """The oversubscription warning; without pytest-benchmark's defaults banner in a distbench
    run (176 columns, and none of its settings apply to a distbench test; it has no option to
    turn the banner off)."""
    headers = yield
    # An external family that could not be used (registry.py), whether distbench runs or not.
    headers.extend(registry.family_problems())
    distbench = config.stash.get(SESSION_KEY, None)
    if distbench is None:
        return headers
    headers = [h for h in headers if not (isinstance(h, str) and h.startswith("benchmark: "))]
    if not distbench.external:
        from .results.rendering.fit import wrap

        lines = distbench.announce_oversubscription(settings_module.of_run(config).world_size)
        # Last in the list: pytest writes the hooks' lines in reverse, so it comes first.
        headers.append([part for line in lines for part in wrap(line)])
    return headers


def pytest_collection_finish(session: pytest.Session) -> None:
    """Before any rank starts: the sizes markers chose checked against the machine; the RPC
    pitfall checks, printed, and their fixes for the ranks."""
    distbench = session.config.stash.get(SESSION_KEY, None)
    if distbench is None:
        return
    from .harness.xdist import mode as xdist

    progress = session.config.pluginmanager.get_plugin(outputs.SuiteProgress.NAME)
    if progress is not None:
        progress.plan(session.items)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if not distbench.external:
        if not xdist.is_worker(session.config):  # a worker's worlds are checked as they start
            limits.check_items(session.config, session.items)
        sizes = [item.callspec.params.get(collection.WORLD_SIZE_ARG) for item in session.items
                 if collection.is_distbench(item) and hasattr(item, "callspec")]
        for line in distbench.announce_oversubscription(sizes):
            if reporter is not None:
                outputs.write_lines(reporter, line, yellow=True)
    if any(collection.uses_store(item) for item in session.items):
        from .harness.environment.resolver import check_reverse_lookup

        check = check_reverse_lookup()
        distbench.store_checks = [check]
        if reporter is not None:
            outputs.write_lines(reporter, f"distbench store check {check.line()}",
                                yellow=check.status != "ok")
    if not any(collection.uses_rpc(item) for item in session.items):
        return
    import torch

    from .harness.environment import pitfalls

    checks = pitfalls.run_checks(gpu_visible=torch.cuda.device_count() > 0,
                                 sizes=settings_module.of_run(session.config).tensor_size)
    distbench.rpc_checks = checks
    distbench.rank_env.update(pitfalls.rank_env(checks))
    if reporter is None:
        return
    if session.config.get_verbosity() < 1:  # a check that found nothing shows under -v only
        checks = [c for c in checks if c.status != "ok"]
    for check in checks:
        outputs.write_lines(reporter, f"distbench rpc check {check.line()}",
                            yellow=check.status != "ok")


def _rank_local_fixture(name: str) -> Any:
    def fixture() -> RankLocal:
        return RankLocal(name)

    fixture.__doc__ = f"distbench: `{name}` inside each rank of the test's world."
    return pytest.fixture(name=name)(fixture)


# pytest finds fixtures by module attribute; each rank-local name gets a placeholder here.
for _name in RANK_FIXTURES:
    globals()[f"_fixture_{_name}"] = _rank_local_fixture(_name)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    session = pyfuncitem.config.stash.get(SESSION_KEY, None)
    if session is None or not collection.is_distbench(pyfuncitem):
        return None
    from .harness.wire import WorldKey

    params = pyfuncitem.callspec.params
    backend = params[collection.BACKEND_ARG]
    resolved = settings_module.of_test(pyfuncitem.config, pyfuncitem)
    device_type = "cuda" if backend == "nccl" else "cpu"
    # Under a launcher, placing ranks is the launcher's job (docs/launchers.md).
    bind = ("launcher" if session.external else settings_module.effective_bind(
        resolved.bind, device_type, gating.ab_mode(pyfuncitem.config) is not None))
    key = WorldKey(params[collection.WORLD_SIZE_ARG], backend, device_type, bind)
    schedule = pyfuncitem.config.stash[SCHEDULE_KEY]
    points = schedule.run_test(session, pyfuncitem, resolved, key,
                               collection.uses_rpc(pyfuncitem))
    if points:  # A/B mode judged its rounds itself; launcher mode: rank 0 has gated its
        # points already, the others keep none
        outputs.after_test(pyfuncitem, points, resolved, session.view)
    return True


@pytest.hookimpl(hookwrapper=True)
def pytest_runtestloop(session: pytest.Session) -> Any:
    outcome = yield
    distbench = session.config.stash.get(SESSION_KEY, None)
    if distbench is None:
        return
    if distbench.revisits is not None:
        # A session interrupted (Ctrl-C, SIGTERM) or stopped early (-x, --maxfail) runs no
        # more: no closing revisits.
        stopped = outcome.excinfo is not None or session.shouldfail or session.shouldstop
        distbench.revisits.finish(distbench, distbench.notes, more=not stopped)
    outputs.show_records(session.config, distbench, distbench.seal())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    text = outputs.headline_of(item)
    if text and call.when == "call":
        # An attribute (not a property) so it crosses to an xdist controller with the report.
        outcome.get_result().distbench_headline = text


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> Any:
    # Passed tests only: pytest reuses this word in the short summary of failures, where
    # "FAILED p50 ... test_x.py::..." would break the line CI tools parse.
    text = getattr(report, "distbench_headline", None)
    if not text or report.when != "call" or not report.passed:
        return None
    return "passed", ".", (f"PASSED {text}", {"green": True})


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        outputs.terminal_summary(terminalreporter, config, session)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    distbench = config.stash.get(SESSION_KEY, None)
    if distbench is None:
        return
    distbench.close()
    from .harness.xdist import mode as xdist

    if xdist.hand_over(config, distbench, session):  # an xdist worker: the controller writes
        return
    note = outputs.benchmark_json_note(config, session.items)
    if note:
        distbench.notes.append(note)
    try:
        written = (outputs.finish(config, distbench) if distbench.records
                   else outputs.nothing_measured(config, distbench))
    except outputs.OutputsInterrupted:  # the terminal summary says what was written
        session.exitstatus = pytest.ExitCode.INTERRUPTED
        return
    if not written:
        # A requested output that was not written fails the session (terminal summary says
        # which); an interrupted or failing session keeps its own exit status.
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
