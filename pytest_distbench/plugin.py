"""pytest hooks: options, parametrization, dispatch of distbench tests to rank worlds, output."""

from __future__ import annotations

import atexit
import sys
from pathlib import Path
from typing import Any

import pytest

from . import settings as settings_module
from .harness.session import DistbenchSession, RankLocal
from .harness.wire import RANK_FIXTURES

SESSION_KEY = pytest.StashKey[DistbenchSession]()
GATE_KEY = pytest.StashKey["Gate"]()
SAVE_PATH_KEY = pytest.StashKey[Path]()
WARNINGS_KEY = pytest.StashKey[list[str]]()
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
    if not config.getoption("distbench"):
        return
    settings_module.resolve(config)  # a bad option stops the run here, naming the option
    _configure_baselines(config)
    from .harness.world import warm_up_forkserver
    from .results.environment import cpu_probe

    session = DistbenchSession()
    # Before the forkserver starts: its torch import would compete with the probe for a core.
    session.cpu_probes.append(cpu_probe())
    warm_up_forkserver()  # its torch import overlaps collection
    config.stash[SESSION_KEY] = session
    atexit.register(session.close)


def _configure_baselines(config: pytest.Config) -> None:
    """Check baseline options before any rank starts: a bad one must not cost a whole run."""
    from .results import storage

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
        from .results.environment import controller_environment
        from .results.gate import Gate

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


def _marker_settings(config: pytest.Config, definition: Any) -> settings_module.Settings:
    marker = definition.get_closest_marker("distbench")
    try:
        return settings_module.resolve(
            config, marker.kwargs if marker else {}, where=f" on {definition.name}"
        )
    except pytest.UsageError as exc:
        pytest.fail(str(exc), pytrace=False)


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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("distbench"):
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if is_distbench(item):
            item.add_marker(skip)


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
    if session is None or not is_distbench(pyfuncitem):
        return None
    from .harness.world import WorldKey

    params = pyfuncitem.callspec.params
    backend = params[BACKEND_ARG]
    resolved = _marker_settings(pyfuncitem.config, pyfuncitem)
    device_type = "cuda" if backend == "nccl" else "cpu"
    key = WorldKey(params[WORLD_SIZE_ARG], backend, device_type, resolved.bind)
    reason = _backend_unavailable(backend, key.world_size)
    if reason:
        pytest.skip(reason)
    from .gating import AB_KEY

    ab_mode = pyfuncitem.config.stash.get(AB_KEY, None)
    if ab_mode is not None:  # A/B rounds; each regression fails inside
        ab_mode.run_item(session, pyfuncitem, resolved, key)
        return True
    records = session.run_item(pyfuncitem, resolved, key)
    gate = pyfuncitem.config.stash.get(GATE_KEY, None)
    if gate is not None:
        failures = []
        for record in records:
            v = gate.judge(record, resolved.threshold)
            if v is not None and v.kind == "regression":
                failures.append(gate.failure_message(v, len(record["samples"])))
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)
    return True


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        return
    tr = terminalreporter
    if session.records:
        from .results.table import LEGEND, render_tables

        tr.section("distbench results")
        tr.line(LEGEND)
        tr.line("")
        tr.line(render_tables(session.records))
    if session.world_starts:
        starts = ", ".join(f"{key} {seconds:.2f} s" for key, seconds in session.world_starts)
        tr.line("")
        tr.line(f"worlds started: {starts}")
    if session.comparison is not None:
        from .results.report import render

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
    if not distbench.records:
        return
    from .results import storage
    from .results.environment import controller_environment, cpu_probe, merge_rank_facts

    distbench.cpu_probes.append(cpu_probe())
    environment = controller_environment()
    merge_rank_facts(environment, distbench.rank_infos)
    environment["world_sizes"] = sorted({r["world_size"] for r in distbench.records})
    environment["cpu_probe_s"] = distbench.cpu_probes
    document = storage.make_document(distbench.records, environment, list(sys.argv))
    json_path = config.getoption("distbench_json")
    if json_path:
        _write(distbench, document, Path(json_path), overwrite=True, what="results file")
    save_path = config.stash.get(SAVE_PATH_KEY, None)
    if save_path is not None and config.getoption("distbench_append"):
        from .results.history import append_run

        distbench.notes.append(append_run(document, save_path))
    elif save_path is not None:
        _write(distbench, document, save_path, overwrite=config.getoption("distbench_overwrite"),
               what="baseline")
    gate = config.stash.get(GATE_KEY, None)
    if gate is not None:
        from .results.verdict import speed_difference

        threshold = settings_module.resolve(config).threshold
        distbench.comparison = gate.comparison(document, threshold)
        speed = speed_difference(gate.document["distbench"]["environment"], environment)
        if speed:
            config.stash.setdefault(WARNINGS_KEY, []).append(f"WARNING: {speed}")


def _write(distbench: DistbenchSession, document: dict[str, Any], path: Path, *,
           overwrite: bool, what: str) -> None:
    from .results import storage

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
