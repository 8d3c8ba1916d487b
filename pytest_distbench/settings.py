"""Every distbench setting, one table: each row's option and ini key, and the one rule that
resolves them (marker > CLI > ini > default).

A row's scope says when it is resolved: a test's settings (`Settings`) per distinct marker,
a session's (`SessionSettings`: the launch mode, outputs, baselines) once, by this module's
pytest_configure, before any other distbench hook reads them. The rows are this module's, the
harness's own (harness/options.py, beside the code that uses them) and every family's
(registry.py).

PYTEST_DONT_REWRITE: plugin.py imports this module before pytest loads it as a plugin.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import make_dataclass
from typing import Any

import pytest

from . import registry, units
from .harness import options as harness_options
from .harness.options import parse_bool
from .registry import Setting
from .results import peaks
from .units import MAX_DURATION_S, parse_bounded_duration, parse_count

__all__ = ["MAX_DURATION_S", "Setting", "parse_bounded_duration", "parse_count"]

BACKENDS = ("gloo", "nccl", "mpi")
DTYPES = {
    "float16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
    "float32": "float32",
    "float": "float32",
    "float64": "float64",
    "double": "float64",
    "int8": "int8",
    "uint8": "uint8",
    "int32": "int32",
    "int64": "int64",
}


def _backends(text: str) -> list[str]:
    names = [item.lower() for item in units.split_list(text, "backend", ", ".join(BACKENDS))]
    for name in names:
        if name not in BACKENDS:
            raise ValueError(f"unknown backend {name!r}: expected one of {', '.join(BACKENDS)}")
    return list(dict.fromkeys(names))


def _dtype(text: str) -> str:
    name = text.strip().lower().removeprefix("torch.")
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {text!r}: expected one of {', '.join(sorted(DTYPES))}")
    return DTYPES[name]


BINDINGS = ("auto", "core", "pack", "none")


def _bind(text: str) -> str:
    value = text.strip().lower()
    if value not in BINDINGS:
        raise ValueError(f"invalid binding {text!r}: expected {', '.join(BINDINGS)}")
    return value


def effective_bind(bind: str, device_type: str, ab_mode: bool) -> str:
    """The placement a world's ranks get: --distbench-bind as given, and "auto" read as its
    row's help says: "pack" for a CPU world in A/B mode, "core" otherwise.

    A/B mode wants the two variants' runs to agree, not the fastest figures. On a small VM a
    message between ranks on two CPUs must often wake a halted virtual CPU, and a gloo world
    flips between a fast and a ~4x slower mode every 10-500 ms (docs/gating.md); with every
    thread on one CPU no message wakes another CPU, and the fastest iterations of two runs
    agree closely. GPU worlds keep their CPUs: their launch and proxy threads must not queue
    behind one another.
    """
    if bind != "auto":
        return bind
    return "pack" if ab_mode and device_type == "cpu" else "core"


def _optional_count(text: str) -> int | None:
    return None if text.strip().lower() in ("", "auto") else parse_count(1)(text)


def _precision(text: str) -> float | None:
    if text.strip().lower() in ("off", "none", "0", "0%"):
        return None
    value = units.parse_fraction(text)
    if not 0 < value < 1:
        raise ValueError(f"a precision is a half-width between 0 and 100 %, got {text!r}")
    return value


CORE_SETTINGS = (
    Setting("world_size", "--world-size", "2", lambda t: units.parse_positive_int_list(
        t, "world size"), "world sizes to run, e.g. 8 or 2,4,8", group="run"),
    Setting("backend", "--backend", "gloo", _backends,
            "process-group backends: gloo, nccl, mpi, or a list", group="run"),
    Setting("tensor_size", "--tensor-size", "4B:64MiB:x4", units.parse_size_list,
            "message sizes as a list (4B,1KiB,1MiB), geometric ranges (4B:64MiB:x4) or sums "
            "(1MiB+1B)", param="nbytes", param_id=units.size_id, group="run"),
    Setting("dtype", "--distbench-dtype", "float32", _dtype, "element type of the tensors",
            group="run"),
    Setting("credits", "--distbench-credits", "1,10", lambda t: units.parse_positive_int_list(
        t, "credits"), "messages in flight before an acknowledgement is awaited "
            "(1 = synchronous), a list", param="credits", param_id=lambda n: f"credits{n}",
            group="run"),
    Setting("budget", "--distbench-budget", "0.5s", parse_bounded_duration,
            "time budget of each point's timed iterations, e.g. 0.5s or 200ms",
            group="length"),
    Setting("iterations", "--distbench-iterations", "auto", _optional_count,
            "timed iterations per point, or 'auto' to calibrate them to --distbench-budget",
            group="length"),
    Setting("precision", "--distbench-precision", "2%", _precision,
            "stop a budget-bound point once the 95 % interval of its headline is this narrow "
            "(half-width), or 'off' to spend the whole budget", group="length"),
    Setting("warmup", "--distbench-warmup", "5", parse_count(0),
            "untimed warm-up iterations (at most a quarter of a budget-bound point's budget)",
            group="length"),
    Setting("timeout", "--distbench-timeout", "300s", parse_bounded_duration,
            "per-test timeout, after which a rank that has not answered is reported as hung",
            group="length"),
    Setting("min_iterations", "--distbench-min-iterations", "30", parse_count(1),
            "fewest timed iterations when calibrating", group="length"),
    Setting("max_iterations", "--distbench-max-iterations", "10000", parse_count(1),
            "most timed iterations when calibrating", group="length"),
    Setting("threshold", "--distbench-threshold", "10%", units.parse_fraction,
            "smallest slowdown that counts as a regression, e.g. 5%", group="baselines"),
    Setting("bind", "--distbench-bind", "auto", _bind,
            "where CPU ranks run: core (one CPU each, as mpirun --bind-to core), pack (all on "
            "one CPU), none, or auto (pack for CPU worlds in A/B mode, else core)",
            group="placement"),
)

LAUNCHER_MODES = ("auto", "local", "env")


def _launcher_mode(text: str) -> str:
    mode = text.strip().lower()
    if mode not in LAUNCHER_MODES:
        raise ValueError(f"unknown launcher mode {text!r}: expected one of "
                         f"{', '.join(LAUNCHER_MODES)}")
    return mode


def _session(name: str, option: str | None, default: str | None, parse: Any, help: str,
             **kwargs: Any) -> Setting:
    return Setting(name, option, default, parse, help, scope="session", **kwargs)


def _switch(name: str, option: str, help: str, **kwargs: Any) -> Setting:
    return _session(name, option, "false", parse_bool, help, flag=True, **kwargs)


# What holds for a whole session, never for one test: a marker may not name them. gating.py
# checks the baseline options' combinations (and reads --distbench-rounds and
# --distbench-baseline-env, whose errors depend on them). Those that lead their --help group
# come before the core settings, the rest after every other row (all_settings).
# More revisits than this per stratum buy nothing a user could see (the t quantile is
# within 2 % of the normal's at 64 degrees of freedom) and cost a run each.
MAX_REVISITS = 64
# A bound on what a baseline's history costs: each run adds about 100 bytes a benchmark to
# the file, read whole by every comparison (docs/results-schema.md).
MAX_KEEP_RUNS = 10_000
_LEADING = (
    _switch("run", "--distbench", "run the distbench benchmarks (without it they are skipped)",
            group="run"),
    _session("json", "--distbench-json", None, str,
             "write every benchmark's parameters, environment, summaries and raw samples to "
             "PATH (atomic write)", metavar="PATH", group="outputs"),
    _session("markdown", "--distbench-markdown", None, str,
             "append the result tables and the comparison as GitHub markdown to PATH, e.g. "
             "\"$GITHUB_STEP_SUMMARY\"", metavar="PATH", group="outputs"),
    _session("plot", "--distbench-plot", None, str,
             "write one PNG plot per family and sweep to DIR at the end of the session "
             "(needs pip install 'pytest-distbench[plot]')", metavar="DIR", group="outputs"),
    _session("compare", "--distbench-compare", None, str,
             "compare against a baseline, failing each test with a real regression",
             metavar="NAME|PATH", group="baselines"),
    _session("save", "--distbench-save", None, str,
             "store this run as the baseline NAME (baselines/NAME.json)", metavar="NAME",
             group="baselines"),
)
_TRAILING = (
    _session("revisits", "--distbench-revisits", "5", parse_count(0, MAX_REVISITS),
             "runs of earlier points repeated later in the session, per stratum of similar "
             "points, to measure the run-to-run noise every printed ± carries (at most "
             f"{MAX_REVISITS}, and with 0 each ± is the run's own sampling interval)",
             metavar="N", group="length"),
    _switch("strict", "--distbench-strict",
            "with --distbench-compare, make a different environment an error",
            group="baselines"),
    _switch("overwrite", "--distbench-overwrite",
            "allow --distbench-save to replace an existing baseline", group="baselines"),
    _switch("append", "--distbench-append",
            "with --distbench-save, add this run to the stored baseline's history (the last "
            "--distbench-keep-runs runs are kept)", group="baselines"),
    _session("keep_runs", "--distbench-keep-runs", "100", parse_count(1, MAX_KEEP_RUNS),
             "runs a baseline's history keeps with --distbench-append, the oldest dropped "
             f"first (1 to {MAX_KEEP_RUNS:,}, each run adding about 100 bytes a benchmark "
             "to the file)", metavar="N", group="baselines"),
    _session("baseline_env", "--distbench-baseline-env", None, str,
             "A/B mode: a live baseline whose ranks get these environment variables (space "
             "separated K=V, shell quoting)", metavar="K=V ...", group="baselines"),
    _session("baseline_python", "--distbench-baseline-python", None, str,
             "A/B mode: a live baseline whose ranks run under this Python interpreter "
             "(another environment's torch or library)", metavar="PATH", group="baselines"),
    _session("rounds", "--distbench-rounds", None, str,
             "A/B mode: interleaved rounds per benchmark", metavar="N", group="baselines",
             unset="20 in A/B mode (harness/ab/mode.py DEFAULT_ROUNDS)"),
    _session("extra_rounds", "--distbench-extra-rounds", None, str,
             "A/B mode: rounds added, --distbench-rounds at a time, to a test whose rounds "
             "leave a regression open (not shown, its interval reaching past the threshold), "
             "0 for none", metavar="N", group="baselines",
             unset="twice --distbench-rounds"),
    _session("baseline_dir", None, "baselines", str,
             "directory of named baselines, relative to the rootdir", group="baselines"),
    _session("launcher", "--distbench-launcher", "auto", _launcher_mode,
             "auto (a rank of the world torchrun, srun or mpirun started, when their "
             "environment says so, else worlds started here), local or env", metavar="MODE",
             group="placement"),
    _switch("force", "--distbench-force",
            "start worlds even when their ranks or buffers look too large for this machine's "
            "memory, task or open-file limits", group="placement"),
    _switch("private_network", "--distbench-private-network",
            "run local worlds in a network namespace of their own, unreachable by other local "
            "users (needs CAP_SYS_ADMIN, docs/failure-model.md)", group="placement"),
    _switch("gpu_memory", "--distbench-gpu-memory",
            "show each rank's peak GPU memory (allocated and reserved) beside its peak RSS in "
            "the tables (every CUDA record stores them)", group="gpu"),
    _session("peak_busbw", "--distbench-peak-busbw", None,
             functools.partial(peaks.parse_declared, backends=BACKENDS),
             "the bus bandwidth each backend's busbw is shown as a share of (% of peak), e.g. "
             "nccl:370,gloo:8 or 370 for every backend in decimal GB/s, else measured or "
             "published (docs/user-guide.md)", metavar="BACKEND:GB/s", group="gpu"),
)

# --help's groups, what a user reaches for first leading; a family's own rows (group None)
# follow in a group of the family's own.
HELP_GROUPS = {
    "run": "what to run",
    "length": "how long and how precisely",
    "outputs": "outputs",
    "baselines": "baselines and the gate",
    "placement": "launchers and placement",
    "pressure": "pressure during the timed region",
    "gpu": "GPU (CUDA worlds)",
}


def _pytest_has(parser: pytest.Parser) -> Callable[[str], bool]:
    """Whether `parser` (pytest's, with every option its built-in plugins and the plugins
    loaded before distbench added) already holds an option string: its own parse, public API,
    takes it (or refuses it for a missing value) rather than leaving it unknown."""
    def has(option: str) -> bool:
        try:
            return option not in parser.parse_known_and_unknown_args([option])[1]
        except pytest.UsageError:  # known, and it takes a value
            return True
    return has


def all_settings() -> tuple[Setting, ...]:
    """Every row, in --help's order: by group (HELP_GROUPS, then each family's own), and in a
    group the leading session rows, the core settings of a test, the harness's own (duration,
    pressure, CUDA timing), each family's, then the other session rows."""
    own = _LEADING + CORE_SETTINGS + harness_options.SETTINGS + _TRAILING
    registry.reserve_settings(frozenset({s.name for s in own} | {s.option for s in own}) - {None})
    rows = (_LEADING + CORE_SETTINGS + harness_options.SETTINGS + registry.family_settings()
            + _TRAILING)
    order = list(HELP_GROUPS)
    return tuple(sorted(rows, key=lambda s: order.index(s.group) if s.group in order
                        else len(order)))


def _tables() -> None:
    """The rows and what is derived from them (this module's globals): at import, and again
    once pytest's parser tells which options it already has (pytest_addoption), where an
    external family that takes one is left out."""
    global TABLE, BY_NAME, SETTINGS, SESSION_SETTINGS, _TEST_NAMES, _SESSION_NAMES
    global Settings, SessionSettings, PARAMETRIZING, NARROWABLE
    TABLE = all_settings()  # one option (or none) and one ini key each
    BY_NAME = {s.name: s for s in TABLE}
    if len(BY_NAME) != len(TABLE):
        raise RuntimeError("two distbench settings share a name")
    if any(s.scope not in ("test", "session") for s in TABLE):
        raise RuntimeError("a distbench setting's scope is 'test' or 'session'")
    SETTINGS = tuple(s for s in TABLE if s.scope == "test")
    SESSION_SETTINGS = tuple(s for s in TABLE if s.scope == "session")
    _TEST_NAMES = tuple(s.name for s in SETTINGS)
    _SESSION_NAMES = tuple(s.name for s in SESSION_SETTINGS)
    # One attribute per setting: world_size, backend, tensor_size, ..., then the families' own.
    Settings = make_dataclass("Settings", [(s.name, Any) for s in SETTINGS], frozen=True)
    Settings.__doc__ = "Every distbench setting of one test, resolved (see resolve)."
    SessionSettings = make_dataclass("SessionSettings",
                                     [(s.name, Any) for s in SESSION_SETTINGS], frozen=True)
    SessionSettings.__doc__ = "Every session-wide setting, resolved once at configure time."
    PARAMETRIZING = tuple(s for s in SETTINGS if s.param)
    NARROWABLE = ("world_size", "backend") + tuple(s.name for s in PARAMETRIZING)


_tables()

SESSION_SETTINGS_KEY = pytest.StashKey[Any]()  # SessionSettings
RUN_KEY = pytest.StashKey[Any]()  # Settings of a test no marker changes: the run's
# Resolved settings per distbench marker object (None: no marker), with the marker held so its
# id cannot be reused: every parametrized item of one function shares its marker objects, and
# resolving (every setting through its parser) once per test was a fifth of a launched rank's
# per-test Python work. Only successes are kept: a bad value fails every test it reaches.
TEST_CACHE_KEY = pytest.StashKey[dict[int, tuple[Any, Any]]]()


def _dest(s: Setting) -> str:
    return "distbench_" + s.name


def help_group(s: Setting) -> str:
    """The --help group a row is listed in: its own, or its family's."""
    if s.group is not None:
        return f"distbench: {HELP_GROUPS[s.group]}"
    family = next(f.name for f in registry.families() if s in f.settings)
    return f"distbench: the {family} suite"


def pytest_addoption(parser: pytest.Parser) -> None:
    """Every row's option and ini key: the one place either is added."""
    used = registry.families()
    if registry.reserve_pytest_options(_pytest_has(parser)) and registry.families() != used:
        _tables()  # a family that takes one of pytest's options is left out (the header says)
    for s in TABLE:
        if s.option is not None:
            default = s.unset if s.default is None else s.default
            # A switch takes no value: `--distbench-print-env tests/x.py` must leave the path.
            kind = ({"action": "store_const", "const": "true"} if s.flag
                    else {"metavar": s.metavar})
            group = parser.getgroup(help_group(s))
            group.addoption(s.option, dest=_dest(s), default=None,  # the table's
                            # argparse %-formats help texts: "10%" must reach it as "10%%".
                            help=f"{s.help} (default: {default}; ini: {s.ini})"
                            .replace("%", "%%"), **kind)
        parser.addini(s.ini, help=s.help, default=None)  # the table's


def _as_text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


# Defaults that come from the run, not the code: in launcher mode the world size it started.
RUN_DEFAULTS = pytest.StashKey[dict[str, str]]()


def _given(config: pytest.Config, s: Setting) -> tuple[str | None, str | None]:
    """What the command line and the ini file say: the one place either is read."""
    cli = config.getoption(_dest(s), None) if s.option is not None else None
    ini = config.getini(s.ini)
    return cli, (None if ini in (None, "", []) else _as_text(ini))


def choose(config: pytest.Config, s: Setting, marker: Mapping[str, Any] | None = None,
           suite_defaults: Mapping[str, Any] | None = None) -> tuple[str | None, str]:
    """The one precedence rule: the marker, the command line, the ini file, a suite's own
    defaults, the run's, the row's. (text, where it came from: marker, option, ini, suite or
    default)."""
    if marker and s.name in marker:
        return _as_text(marker[s.name]), "marker"
    cli, ini = _given(config, s)
    if cli is not None:
        return cli, "option"
    if ini is not None:
        return ini, "ini"
    if suite_defaults and s.name in suite_defaults:
        return _as_text(suite_defaults[s.name]), "suite"
    return config.stash.get(RUN_DEFAULTS, {}).get(s.name, s.default), "default"


def _source(s: Setting, origin: str, where: str) -> str:
    return {"marker": f"@pytest.mark.distbench({s.name}=...){where}",
            "option": s.option or s.ini, "ini": f"ini option {s.ini}",
            "suite": f"@pytest.mark.distbench(defaults={{{s.name!r}: ...}}){where}",
            }.get(origin, f"default of {s.option or s.ini}")


def _parsed(s: Setting, text: str | None, source: str) -> Any:
    if text is None:
        return None
    try:
        return s.parse(text)
    except ValueError as exc:
        raise pytest.UsageError(f"{source}: {exc}") from None


@pytest.hookimpl(tryfirst=True)  # registered after gating.py, so before its tryfirst hook
def pytest_configure(config: pytest.Config) -> None:
    """The session's settings, resolved once; a bad value stops the run here, naming it."""
    values = {}
    for s in SESSION_SETTINGS:
        text, origin = choose(config, s)
        values[s.name] = _parsed(s, text, _source(s, origin, ""))
    config.stash[SESSION_SETTINGS_KEY] = SessionSettings(**values)


def of_session(config: pytest.Config) -> Any:
    """The session's settings (SessionSettings), as pytest_configure resolved them."""
    return config.stash[SESSION_SETTINGS_KEY]


def _narrow(setting: Setting, marker_value: Any, cli_text: str, where: str) -> list[Any]:
    supported = _parsed(setting, _as_text(marker_value), _source(setting, "marker", where))
    wanted = _parsed(setting, cli_text, _source(setting, "option", where))
    narrowed = [v for v in wanted if v in supported]
    if not narrowed and setting.name == "world_size":
        # A test made for fewer ranks (a pair) runs at its own size inside a larger request:
        # `--world-size=8` still runs the RPC pair benchmarks, at 2 ranks.
        fitting = [v for v in supported if v <= max(wanted)]
        return [max(fitting)] if fitting else []
    return narrowed


def resolve(config: pytest.Config, marker: Mapping[str, Any] | None = None,
            where: str = "") -> Settings:
    """Resolve every setting; raise pytest.UsageError naming the source of a bad value."""
    marker = dict(marker or {})
    # `defaults={...}`: a suite's own defaults, used where neither the command line nor the
    # ini file says anything (unlike a plain keyword, they never narrow what the user asks).
    suite_defaults = dict(marker.pop("defaults", None) or {})
    named = set(marker) | set(suite_defaults)
    unknown = sorted(named - set(BY_NAME))
    if unknown:
        raise pytest.UsageError(
            f"@pytest.mark.distbench{where}: unknown argument(s) {', '.join(unknown)}; "
            f"known: {', '.join(_TEST_NAMES)}"
        )
    session_wide = sorted(named & set(_SESSION_NAMES))
    if session_wide:
        raise pytest.UsageError(
            f"@pytest.mark.distbench{where}: {', '.join(session_wide)} holds for the whole "
            "session: give it on the command line or in the ini file")
    values: dict[str, Any] = {}
    for s in SETTINGS:
        text, origin = choose(config, s, marker, suite_defaults)
        cli = _given(config, s)[0] if origin == "marker" and s.name in NARROWABLE else None
        if cli is not None:
            # The marker says what the test supports, the command line what to run now.
            values[s.name] = _narrow(s, marker[s.name], cli, where)
        else:
            values[s.name] = _parsed(s, text, _source(s, origin, where))
    settings = Settings(**values)
    if settings.min_iterations > settings.max_iterations:
        raise pytest.UsageError(
            f"--distbench-min-iterations ({settings.min_iterations}) is larger than "
            f"--distbench-max-iterations ({settings.max_iterations})"
        )
    for check in (harness_options.check, *registry.setting_checks()):
        check(settings)
    return settings


def resolve_run(config: pytest.Config) -> Any:
    """The settings of a test no marker changes (the command line's and the ini's), once the
    run's own defaults are known; kept for every later reader (of_run)."""
    config.stash[RUN_KEY] = resolve(config)
    return config.stash[RUN_KEY]


def of_run(config: pytest.Config) -> Any:
    """The run's Settings, as resolve_run left them at configure time."""
    return config.stash[RUN_KEY]


def of_test(config: pytest.Config, definition: Any) -> Any:
    """A test's Settings (marker > CLI > ini > default), once per marker; a bad value fails
    the test."""
    marker = definition.get_closest_marker("distbench")
    cache = config.stash.setdefault(TEST_CACHE_KEY, {})
    cached = cache.get(id(marker))
    if cached is not None and cached[0] is marker:
        return cached[1]
    try:
        # `where` only names the test in error messages: a success holds for every test with
        # this marker (the run's defaults are fixed at configure time, before any test).
        resolved = resolve(config, marker.kwargs if marker else {},
                           where=f" on {definition.name}")
    except pytest.UsageError as exc:
        pytest.fail(str(exc), pytrace=False)
    cache[id(marker)] = (marker, resolved)
    return resolved
