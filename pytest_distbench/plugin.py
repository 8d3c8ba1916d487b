"""pytest hooks: options, parametrization, dispatch of distbench tests to rank worlds, output."""

from __future__ import annotations

import atexit
import sys
from pathlib import Path
from typing import Any

import pytest

from . import settings as settings_module
from .harness.lean import RANK_LOCAL_ATTR
from .harness.session import DistbenchSession, RankLocal
from .harness.wire import RANK_FIXTURES

SESSION_KEY = pytest.StashKey[DistbenchSession]()
GATE_KEY = pytest.StashKey["Gate"]()
SAVE_PATH_KEY = pytest.StashKey[Path]()
WARNINGS_KEY = pytest.StashKey[list[str]]()
HEADLINE_KEY = pytest.StashKey[str]()
REQUESTED_KEY = pytest.StashKey[list[int]]()
SKIP_REASON = "distbench benchmark: run with --distbench"
WORLD_SIZE_ARG = "distbench_world_size"
BACKEND_ARG = "distbench_backend"
# A/B mode and baseline history (options, checks, their summary) live in their own plugin module.
pytest_plugins = ["pytest_distbench.gating"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("distbench", "distributed benchmarks (pytest-distbench)")
    group.addoption("--distbench", action="store_true", default=False,
                    help="run distbench benchmarks (without it they are skipped)")
    group.addoption("--distbench-json", metavar="PATH", default=None,
                    help="write every benchmark's parameters, environment, summaries and raw "
                         "samples to PATH (atomic write)")
    group.addoption("--distbench-save", metavar="NAME", default=None,
                    help="store this run as the baseline NAME (baselines/NAME.json)")
    group.addoption("--distbench-overwrite", action="store_true", default=False,
                    help="allow --distbench-save to replace an existing baseline")
    group.addoption("--distbench-compare", metavar="NAME|PATH", default=None,
                    help="compare against a baseline; each real regression fails its test")
    group.addoption("--distbench-strict", action="store_true", default=False,
                    help="with --distbench-compare: a different environment is an error")
    group.addoption("--distbench-plot", metavar="DIR", default=None,
                    help="at the end of the session write one PNG plot per family and sweep "
                         "to DIR (needs matplotlib: pip install 'pytest-distbench[plot]')")
    group.addoption("--distbench-markdown", metavar="PATH", default=None,
                    help="append the result tables (and the comparison) as GitHub markdown "
                         "to PATH, e.g. \"$GITHUB_STEP_SUMMARY\"")
    parser.addini("distbench_baseline_dir", default="baselines",
                  help="directory of named baselines, relative to the rootdir")
    settings_module.add_options(parser)


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
    if not config.getoption("distbench"):
        return
    from .harness import launcher_plugin, xdist

    launch = launcher_plugin.configure(config)  # None in local mode
    settings_module.resolve(config)  # a bad option stops the run here, naming the option
    if launch is None or launch.rank == 0:  # in launcher mode rank 0 alone reads and writes
        _configure_baselines(config)
        _configure_reports(config)
    from .harness.world import warm_up_forkserver
    from .results.document.environment import cpu_probe

    session = DistbenchSession() if launch is None else launcher_plugin.start(
        config, launch, _check_gate)
    # Before the forkserver starts: its torch import would compete with the probe for a core.
    session.cpu_probes.append(cpu_probe())
    if launch is None and not xdist.is_controller(config):
        warm_up_forkserver()  # its torch import overlaps collection
    xdist.configure(config, session)
    config.stash[SESSION_KEY] = session
    atexit.register(session.close)


def _configure_baselines(config: pytest.Config) -> None:
    """Check baseline options before any rank starts: a bad one must not cost a whole run."""
    from .results import document as storage

    baseline_dir = config.rootpath / config.getini("distbench_baseline_dir")
    save = config.getoption("distbench_save")
    if save:
        try:
            path = storage.resolve_baseline(save, baseline_dir)
        except ValueError as exc:
            raise pytest.UsageError(f"--distbench-save: {exc}") from None
        if (path.exists() and not config.getoption("distbench_overwrite")
                and not config.getoption("distbench_append")):
            raise pytest.UsageError(
                f"--distbench-save: baseline {path} already exists; pass --distbench-overwrite "
                "to replace it"
            )
        config.stash[SAVE_PATH_KEY] = path
    compare = config.getoption("distbench_compare")
    if compare:
        from .results.comparison.gate import Gate
        from .results.document.environment import controller_environment

        gate = Gate.load(compare, baseline_dir, config.getoption("distbench_strict"))
        differences = gate.environment_differences(controller_environment())
        if differences and gate.strict:
            raise pytest.UsageError(
                f"--distbench-strict: baseline {gate.path} was measured in another environment: "
                + "; ".join(differences)
            )
        config.stash[GATE_KEY] = gate
        config.stash[WARNINGS_KEY] = [
            f"WARNING: baseline {gate.path} was measured in another environment; differences "
            "may not come from your change:"
        ] + [f"  {line}" for line in differences] if differences else []


def _configure_reports(config: pytest.Config) -> None:
    """Refuse a plot request without matplotlib now, not after an hour of benchmarks."""
    if config.getoption("distbench_plot"):
        from .results.rendering.plot import MISSING_MATPLOTLIB, matplotlib_available

        if not matplotlib_available():
            raise pytest.UsageError(f"--distbench-plot: {MISSING_MATPLOTLIB}")


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = []
    gate = config.stash.get(GATE_KEY, None)
    if gate is not None:
        lines.append(f"distbench: comparing against {gate.path}; {gate.noise_note}")
    return lines + config.stash.get(WARNINGS_KEY, [])


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        session.close()


def is_distbench(node: Any) -> bool:
    return node.get_closest_marker("distbench") is not None or "distbench" in getattr(
        node, "fixturenames", ()
    )


# Resolved settings per distbench marker object (None: no marker), with the marker held so its
# id cannot be reused: every parametrized item of one function shares its marker objects, and
# resolving (every setting through its parser) once per test was a fifth of a launched rank's
# per-test Python work. Only successes are kept: a bad value fails every test it reaches.
SETTINGS_CACHE_KEY = pytest.StashKey[dict[int, tuple[Any, settings_module.Settings]]]()


def _marker_settings(config: pytest.Config, definition: Any) -> settings_module.Settings:
    marker = definition.get_closest_marker("distbench")
    cache = config.stash.setdefault(SETTINGS_CACHE_KEY, {})
    cached = cache.get(id(marker))
    if cached is not None and cached[0] is marker:
        return cached[1]
    try:
        # `where` only names the test in error messages: a success holds for every test with
        # this marker (the run's defaults are fixed at configure time, before any test).
        resolved = settings_module.resolve(
            config, marker.kwargs if marker else {}, where=f" on {definition.name}"
        )
    except pytest.UsageError as exc:
        pytest.fail(str(exc), pytrace=False)
    cache[id(marker)] = (marker, resolved)
    return resolved


def _backend_unavailable(backend: str, world_size: int) -> str | None:
    import torch
    import torch.distributed as dist

    if backend == "gloo" and not dist.is_gloo_available():
        return "backend gloo is not built into this torch"
    if backend == "mpi" and not dist.is_mpi_available():
        return "backend mpi is not built into this torch"
    if backend == "nccl":
        if not dist.is_nccl_available() or not torch.cuda.is_available():
            return "backend nccl needs CUDA: no GPU is visible"
        if torch.cuda.device_count() < world_size:
            return (f"backend nccl: world size {world_size} needs one GPU per rank, "
                    f"{torch.cuda.device_count()} visible")
    return None


def _user_parametrizes(definition: Any, name: str) -> bool:
    for mark in definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", "")
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",")]
        if name in names:
            return True
    return False


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    config = metafunc.config
    if not config.getoption("distbench") or not is_distbench(metafunc.definition):
        return
    resolved = _marker_settings(config, metafunc.definition)
    # The world coordinates are parameters, not fixtures the body asks for: add them to the
    # closure so pytest accepts the direct parametrization and puts them in the test id.
    for name in (BACKEND_ARG, WORLD_SIZE_ARG):
        if name not in metafunc.fixturenames:
            metafunc.fixturenames.append(name)
    empty = [n for n in settings_module.NARROWABLE if not getattr(resolved, n)]
    if empty:
        reason = (f"the command line selects no {', '.join(empty)} this test supports "
                  "(see its @pytest.mark.distbench)")
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


# trylast: merge equal sizes among the items that -k/-m left, never drop the one they kept.
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("distbench"):
        _merge_equal_sizes(config, items)
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if is_distbench(item):
            item.add_marker(skip)


def _merge_equal_sizes(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run once the requested sizes that a test turns into the same effective size.

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
    for first in kept.values():
        if len(first.stash[REQUESTED_KEY]) < 2:
            del first.stash[REQUESTED_KEY]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        gone = {id(item) for item in dropped}
        items[:] = [item for item in items if id(item) not in gone]
        config.stash[SESSION_KEY].notes.append(
            f"distbench: {len(dropped)} test(s) deselected: their requested size moves the same "
            "bytes as another size of the same test (measured once; see the table notes)")


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
    dtype = _marker_settings(config, item).dtype
    return hook(item.originalname, callspec.params["nbytes"], world_size, dtype)


def uses_rpc(item: pytest.Item) -> bool:
    return "rpc_agent" in getattr(item, "fixturenames", ()) or (
        item.get_closest_marker("distbench_rpc") is not None)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Before any rank starts: the RPC pitfall checks, printed, and their fixes for the ranks."""
    distbench = session.config.stash.get(SESSION_KEY, None)
    if distbench is None or not any(uses_rpc(item) for item in session.items):
        return
    import torch

    from .harness import pitfalls

    checks = pitfalls.run_checks(gpu_visible=torch.cuda.device_count() > 0,
                                 sizes=settings_module.resolve(session.config).tensor_size)
    distbench.rpc_checks = checks
    distbench.rank_env.update(pitfalls.rank_env(checks))
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        for check in checks:
            reporter.write_line(f"distbench rpc check {check.line()}",
                                yellow=check.status != "ok")


def _rank_local_fixture(name: str) -> Any:
    def fixture() -> RankLocal:
        return RankLocal(name)

    fixture.__doc__ = f"distbench: `{name}` inside each rank of the test's world."
    # How launcher mode's lean runs know a placeholder from a user's fixture of the same name.
    setattr(fixture, RANK_LOCAL_ATTR, name)
    return pytest.fixture(name=name)(fixture)


# pytest finds fixtures by module attribute; each rank-local name gets a placeholder here.
for _name in RANK_FIXTURES:
    globals()[f"_fixture_{_name}"] = _rank_local_fixture(_name)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    session = pyfuncitem.config.stash.get(SESSION_KEY, None)
    if session is None or not is_distbench(pyfuncitem):
        return None
    from .harness.world import WorldKey, effective_bind

    params = pyfuncitem.callspec.params
    backend = params[BACKEND_ARG]
    resolved = _marker_settings(pyfuncitem.config, pyfuncitem)
    device_type = "cuda" if backend == "nccl" else "cpu"
    from .gating import AB_KEY

    ab_mode = pyfuncitem.config.stash.get(AB_KEY, None)
    # Under a launcher, placing ranks is the launcher's job (docs/launchers.md).
    bind = ("launcher" if session.external
            else effective_bind(resolved.bind, device_type, ab_mode is not None))
    key = WorldKey(params[WORLD_SIZE_ARG], backend, device_type, bind)
    # Launcher mode agrees on availability across its ranks (harness/inprocess.py).
    reason = None if session.external else _backend_unavailable(backend, key.world_size)
    if reason:
        pytest.skip(reason)
    if ab_mode is not None:  # A/B rounds; each regression fails inside
        ab_mode.run_item(session, pyfuncitem, resolved, key)
        return True
    records = session.run_item(pyfuncitem, resolved, key,
                               fresh_world_after=uses_rpc(pyfuncitem))
    requested = pyfuncitem.stash.get(REQUESTED_KEY, None)
    if requested:
        for record in records:
            record["requested_nbytes"] = requested
    _check_gate(pyfuncitem, records, resolved)
    return True


def _check_gate(item: pytest.Function, records: list[dict[str, Any]],
                resolved: settings_module.Settings) -> None:
    """The gate's verdicts, the test's figures (-v, JUnit), and a failure per regression."""
    gate = item.config.stash.get(GATE_KEY, None)
    failures, verdicts = [], {}
    if gate is not None:
        for record in records:
            v = gate.judge(record, resolved.threshold)
            verdicts[record["id"]] = v
            if v is not None and v.kind == "regression":
                failures.append(gate.failure_message(v, len(record["samples"])))
    _report_figures(item, records, verdicts)
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)


def _report_figures(item: pytest.Function, records: list[dict[str, Any]],
                    verdicts: dict[str, Any]) -> None:
    """JUnit properties of the test, and the figures its `-v` line ends with."""
    from .results.rendering.junit import properties
    from .results.rendering.plot_spec import headline

    item.user_properties.extend(properties(records, verdicts))
    text = headline(records)
    if text:
        item.stash[HEADLINE_KEY] = text


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    text = item.stash.get(HEADLINE_KEY, None)
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
    if session is None:
        return
    tr = terminalreporter
    if session.records:
        from .results.rendering.table import LEGEND, render_tables

        tr.section("distbench results")
        tr.line(LEGEND)
        tr.line("")
        tr.line(render_tables(session.records))
    if session.world_starts:
        starts = ", ".join(f"{key} {seconds:.2f} s" for key, seconds in session.world_starts)
        tr.line("")
        tr.line(f"worlds started: {starts}")
    if session.comparison is not None:
        from .results.rendering.report import render

        tr.section("distbench comparison")
        tr.line(render(session.comparison, "table").rstrip("\n"))
    for line in config.stash.get(WARNINGS_KEY, []):
        tr.line(line, yellow=True, bold=True)
    for line in session.notes:
        tr.line(line)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    distbench = config.stash.get(SESSION_KEY, None)
    if distbench is None:
        return
    distbench.close()
    from .harness import xdist

    if xdist.hand_over(config, distbench, session):  # an xdist worker: the controller writes
        return
    if not distbench.records:
        return
    from .results import document as storage
    from .results.document.environment import controller_environment, cpu_probe, merge_rank_facts

    distbench.cpu_probes.append(cpu_probe())
    environment = controller_environment()
    merge_rank_facts(environment, distbench.rank_infos)
    environment["world_sizes"] = sorted({r["world_size"] for r in distbench.records})
    environment["cpu_probe_s"] = distbench.cpu_probes
    if distbench.rpc_checks is not None:
        environment["rpc_checks"] = [check.as_dict() for check in distbench.rpc_checks]
    environment.update(distbench.environment_facts())  # launcher, hosts, xdist workers
    document = storage.make_document(distbench.records, environment, list(sys.argv))
    json_path = config.getoption("distbench_json")
    if json_path:
        _write(distbench, document, Path(json_path), overwrite=True, what="results file")
    save_path = config.stash.get(SAVE_PATH_KEY, None)
    if save_path is not None and config.getoption("distbench_append"):
        from .results.document.history import append_run

        distbench.notes.append(append_run(document, save_path))
    elif save_path is not None:
        _write(distbench, document, save_path, overwrite=config.getoption("distbench_overwrite"),
               what="baseline")
    gate = config.stash.get(GATE_KEY, None)
    if gate is not None:
        from .results.comparison.verdict import speed_difference

        threshold = settings_module.resolve(config).threshold
        distbench.comparison = gate.comparison(document, threshold)
        speed = speed_difference(gate.document["distbench"]["environment"], environment)
        if speed:
            config.stash.setdefault(WARNINGS_KEY, []).append(f"WARNING: {speed}")
    plot_dir = config.getoption("distbench_plot")
    if plot_dir:
        baseline = gate.document if gate is not None else None
        _write_plots(distbench, document, Path(plot_dir), baseline)
    markdown_path = config.getoption("distbench_markdown")
    if markdown_path:
        _write_markdown(distbench, document, Path(markdown_path))


def _write_plots(distbench: DistbenchSession, document: dict[str, Any], out: Path,
                 baseline: dict[str, Any] | None) -> None:
    from .results.rendering.plot import PlotUnavailable, plot_comparison, plot_document

    try:
        written = plot_document(document, out)
        if baseline is not None and distbench.comparison is not None:
            written += plot_comparison(baseline, document, distbench.comparison, out)
    except (OSError, PlotUnavailable) as exc:
        distbench.notes.append(f"distbench: could not write plots to {out}: {exc}")
        return
    names = ", ".join(r.path.name for r in written) or "none (no family here has a plot)"
    distbench.notes.append(f"distbench: wrote {len(written)} plot(s) to {out}: {names}")


def _write_markdown(distbench: DistbenchSession, document: dict[str, Any], path: Path) -> None:
    from .results import document as storage
    from .results.rendering import markdown

    text = markdown.render(storage.records(document).values(),
                           document["distbench"]["environment"], distbench.comparison)
    try:
        markdown.append(path, text)
    except OSError as exc:
        distbench.notes.append(f"distbench: could not append markdown to {path}: {exc}")
        return
    distbench.notes.append(f"distbench: appended markdown tables to {path}")


def _write(distbench: DistbenchSession, document: dict[str, Any], path: Path, *,
           overwrite: bool, what: str) -> None:
    from .results import document as storage

    existed = path.exists()
    try:
        storage.write_document(document, path, overwrite=overwrite)
    except storage.ResultsFileExistsError:
        distbench.notes.append(
            f"distbench: {what} {path} appeared during the run; not replaced "
            "(pass --distbench-overwrite to replace it)")
        return
    except (OSError, storage.ResultsFileError) as exc:
        distbench.notes.append(f"distbench: could not write {what} {path}: {exc}")
        return
    distbench.notes.append(f"distbench: {'replaced' if existed else 'wrote'} {what} {path}")
