"""Every distbench setting, and the one place that resolves marker > CLI > ini > default."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import make_dataclass
from typing import Any

import pytest

from . import registry, units
from .registry import Setting
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
        t, "world size"), "world sizes to run, e.g. 8 or 2,4,8"),
    Setting("backend", "--backend", "gloo", _backends,
            "process-group backends: gloo, nccl, mpi, or a list"),
    Setting("tensor_size", "--tensor-size", "4B:64MiB:x4", units.parse_size_list,
            "message sizes: a list (4B,1KiB,1MiB) and/or geometric ranges (4B:64MiB:x4); "
            "a size may be a sum (1MiB+1B)",
            param="nbytes", param_id=units.size_id),
    Setting("credits", "--distbench-credits", "1,10", lambda t: units.parse_positive_int_list(
        t, "credits"), "messages in flight before an acknowledgement is required "
        "(1 = synchronous), a list", param="credits", param_id=lambda n: f"credits{n}"),
    Setting("dtype", "--distbench-dtype", "float32", _dtype, "element type of the tensors"),
    Setting("warmup", "--distbench-warmup", "5", parse_count(0),
            "untimed warm-up iterations (a budget-bound point spends at most a quarter of "
            "its budget on them)"),
    Setting("iterations", "--distbench-iterations", "auto", _optional_count,
            "timed iterations per point; 'auto' calibrates to --distbench-budget"),
    Setting("min_iterations", "--distbench-min-iterations", "30", parse_count(1),
            "fewest timed iterations when calibrating"),
    Setting("max_iterations", "--distbench-max-iterations", "10000", parse_count(1),
            "most timed iterations when calibrating"),
    Setting("budget", "--distbench-budget", "0.5s", parse_bounded_duration,
            "time budget of the timed iterations per point, e.g. 0.5s or 200ms"),
    Setting("precision", "--distbench-precision", "2%", _precision,
            "budget-bound points stop once the 95 % interval of their headline (the p50, or "
            "a message family's rate) is within this "
            "(half-width, e.g. 2%), or when the budget runs out; 'off' spends the whole budget"),
    Setting("bind", "--distbench-bind", "auto", _bind,
            "auto: pack for CPU worlds in A/B mode, else core; core: pin rank r's main "
            "thread to the r-th usable CPU (round robin), as mpirun --bind-to core does; "
            "pack: every thread of every rank on the first usable CPU (no cross-CPU "
            "wake-ups; steadiest on small VMs, see docs/gating.md); none: leave placement "
            "to the scheduler"),
    Setting("timeout", "--distbench-timeout", "300s", parse_bounded_duration,
            "per-test timeout: a rank that has not answered by then is reported as hung"),
    Setting("threshold", "--distbench-threshold", "10%", units.parse_fraction,
            "smallest slowdown that counts as a regression, e.g. 5%"),
    Setting("private_network", "--distbench-private-network", "false",
            lambda t: _harness_options().parse_bool(t),
            "run local worlds (their store, ranks and forkserver) in a network namespace of "
            "their own, unreachable by other local users; needs CAP_SYS_ADMIN "
            "(docs/failure-model.md, \"Local users\")", flag=True),
)
# What holds for a whole session, never for one test: a marker may not name them.
SESSION_WIDE = ("private_network",)


def _harness_options() -> Any:
    # Lazy: harness/options.py builds its settings from this module's Setting and parse_count.
    from .harness import options

    return options


def all_settings() -> tuple[Setting, ...]:
    """The core settings, the harness's own (duration, pressure), then each family's."""
    return CORE_SETTINGS + _harness_options().SETTINGS + registry.family_settings()


SETTINGS = all_settings()
_BY_NAME = {s.name: s for s in SETTINGS}
if len(_BY_NAME) != len(SETTINGS):
    raise RuntimeError("two distbench settings share a name")

# One attribute per setting: world_size, backend, tensor_size, ..., then the families' own.
Settings = make_dataclass("Settings", [(s.name, Any) for s in SETTINGS], frozen=True)
Settings.__doc__ = "Every distbench setting of one test, resolved (see resolve)."
PARAMETRIZING = tuple(s for s in SETTINGS if s.param)


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("distbench", "distributed benchmarks (pytest-distbench)")
    for s in SETTINGS:
        switch = {"nargs": "?", "const": "true"} if s.flag else {}
        group.addoption(s.option, dest="distbench_" + s.name, default=None, metavar="VALUE",
                        # argparse %-formats help texts: "10%" must reach it as "10%%".
                        help=f"{s.help} (default: {s.default}; ini: {s.ini})".replace("%", "%%"),
                        **switch)
        parser.addini(s.ini, help=s.help, default=None)
    group.addoption("--distbench-launcher", dest="distbench_launcher", default=None,
                    metavar="MODE", help="auto: run as one rank of the world torchrun, srun or "
                    "mpirun started, when their environment says so, else start worlds here "
                    "(local); local or env force one (default: auto; ini: distbench_launcher)")
    parser.addini("distbench_launcher", help="launch mode: auto, local or env", default=None)


def _as_text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


# Defaults that come from the run, not the code: in launcher mode the world size it started.
RUN_DEFAULTS = pytest.StashKey[dict[str, str]]()

NARROWABLE = ("world_size", "backend") + tuple(s.name for s in PARAMETRIZING)


def _narrow(setting: Setting, marker_value: Any, cli_text: str, where: str) -> list[Any]:
    try:
        supported = setting.parse(_as_text(marker_value))
    except ValueError as exc:
        raise pytest.UsageError(
            f"@pytest.mark.distbench({setting.name}=...){where}: {exc}") from None
    try:
        wanted = setting.parse(cli_text)
    except ValueError as exc:
        raise pytest.UsageError(f"{setting.option}: {exc}") from None
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
    unknown = sorted((set(marker) | set(suite_defaults)) - set(_BY_NAME))
    if unknown:
        raise pytest.UsageError(
            f"@pytest.mark.distbench{where}: unknown argument(s) {', '.join(unknown)}; "
            f"known: {', '.join(_BY_NAME)}"
        )
    session_wide = sorted((set(marker) | set(suite_defaults)) & set(SESSION_WIDE))
    if session_wide:
        raise pytest.UsageError(
            f"@pytest.mark.distbench{where}: {', '.join(session_wide)} holds for the whole "
            "session: give it on the command line or in the ini file")
    values: dict[str, Any] = {}
    for s in SETTINGS:
        cli = config.getoption("distbench_" + s.name)
        if s.name in marker and cli is not None and s.name in NARROWABLE:
            # The marker says what the test supports, the command line what to run now.
            values[s.name] = _narrow(s, marker[s.name], cli, where)
            continue
        if s.name in marker:
            text, source = _as_text(marker[s.name]), f"@pytest.mark.distbench({s.name}=...){where}"
        elif cli is not None:
            text, source = cli, s.option
        elif config.getini(s.ini) not in (None, "", []):
            text, source = _as_text(config.getini(s.ini)), f"ini option {s.ini}"
        elif s.name in suite_defaults:
            text = _as_text(suite_defaults[s.name])
            source = f"@pytest.mark.distbench(defaults={{{s.name!r}: ...}}){where}"
        else:
            text = config.stash.get(RUN_DEFAULTS, {}).get(s.name, s.default)
            source = f"default of {s.option}"
        try:
            values[s.name] = s.parse(text)
        except ValueError as exc:
            raise pytest.UsageError(f"{source}: {exc}") from None
    settings = Settings(**values)
    if settings.min_iterations > settings.max_iterations:
        raise pytest.UsageError(
            f"--distbench-min-iterations ({settings.min_iterations}) is larger than "
            f"--distbench-max-iterations ({settings.max_iterations})"
        )
    for check in (_harness_options().check, *registry.setting_checks()):
        check(settings)
    return settings


LAUNCHER_MODES = ("auto", "local", "env")


def launcher_mode(config: pytest.Config) -> str:
    """--distbench-launcher (CLI > ini > auto): a session-wide choice, not a marker keyword."""
    cli = config.getoption("distbench_launcher", None)
    ini = config.getini("distbench_launcher")
    text, source = (cli, "--distbench-launcher") if cli is not None else (
        (ini, "ini option distbench_launcher") if ini else ("auto", "default"))
    mode = text.strip().lower()
    if mode not in LAUNCHER_MODES:
        raise pytest.UsageError(
            f"{source}: unknown launcher mode {text!r}: expected one of "
            f"{', '.join(LAUNCHER_MODES)}")
    return mode
