"""What a family declares, in one place, and how the layers below the families find it.

Every package under pytest_distbench/families/ with a ``family.py`` states there, as
``FAMILY = Family(...)``, all that settings.py, harness/ and results/ need to know of it: its
settings, its table styles, the figures derived from its finished records and its plots. They
are found by importing each such module (families()); nothing below the families names one, so
adding a family touches families/<name>/ and suites/ only. A family outside the package names
its registration module (or its FAMILY itself) in its own distribution's entry points, group
``pytest_distbench.families``; those come after the built-in ones, and one that cannot be used
is left out with a line saying why (family_problems()), never a traceback.

Registration modules import no torch and no pytest: `pytest-distbench plot` reads the plots
without either, and settings.py reads the settings while pytest is still starting.
"""

from __future__ import annotations

import importlib
import importlib.util
import keyword
import pkgutil
import re
import signal
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any, NamedTuple

from .results.document.record import Record

if TYPE_CHECKING:
    from .results.rendering.plot_spec import PlotSpec

FAMILIES_PACKAGE = "pytest_distbench.families"
REGISTRATION_MODULE = "family"
ENTRY_POINT_GROUP = "pytest_distbench.families"
# What a family keys by record family (mappings), and what it lists by record family: two
# families must not claim one record family in any.
RECORD_FAMILY_KINDS = ("tables", "figures", "headlines", "details")
RECORD_FAMILY_LISTS = ("latencies",)
# A setting's option as pytest adds it: a long option (a short one is pytest's own, or
# argparse's ValueError for one without dashes), one word, as every distbench option is.
LONG_OPTION = re.compile(r"--[A-Za-z0-9][A-Za-z0-9_-]*")
SCOPES = ("test", "session")

TableStyle = Callable[[list[Record]], str]  # rows of one (family, backend, world) -> text
FigureDeriver = Callable[[Record], dict[str, Any]]  # a finished record -> figures to add


@dataclass(frozen=True)
class Setting:
    """One row of the settings table: its command line option, its ini key
    (distbench_<name>) and how its text is read. settings.py adds and resolves every row."""

    name: str  # attribute of Settings (or SessionSettings) and keyword of the marker
    option: str | None  # command line flag; None: an ini key only
    default: str | None  # None: unset unless given (a path no one asked for)
    parse: Callable[[str], Any]
    help: str
    # A list setting that parametrizes every distbench test taking this argument (as
    # --tensor-size does `nbytes`), unless the test parametrizes it itself.
    param: str | None = None
    param_id: Callable[[Any], str] = str
    # A switch: the option alone means true and takes no value, so it never swallows the
    # argument after it (a test path); the ini key says true or false.
    flag: bool = False
    # "test": marker > CLI > ini > default, per test (Settings); "session": CLI > ini >
    # default, once per session (SessionSettings), never in a marker.
    scope: str = "test"
    metavar: str = "VALUE"
    # Where --help lists it: one of settings.HELP_GROUPS; None for a family's own row, listed
    # in a group of the family's own. `help` is one sentence: --help adds the default.
    group: str | None = None
    # What --help says of an unset default (None): "none", or what applies then.
    unset: str = "none"

    @property
    def ini(self) -> str:
        return "distbench_" + self.name


@dataclass(frozen=True)
class Family:
    """One family package's registration. Tables and figures are keyed by the records'
    ``family`` values (one package may record several: p2p_latency, p2p_bandwidth, ...)."""

    name: str
    settings: tuple[Setting, ...] = ()
    # Refuses combinations of the resolved settings no single option can (pytest.UsageError).
    check: Callable[[Any], None] | None = None
    tables: Mapping[str, TableStyle] = field(default_factory=dict)
    figures: Mapping[str, FigureDeriver] = field(default_factory=dict)
    plots: tuple[PlotSpec, ...] = ()
    # What each table style's headline column is, for the table's title ("msgs/s: total
    # messages / total time ± 95 % CI"); without one the nccl-tests style's is said.
    headlines: Mapping[str, str] = field(default_factory=dict)
    # More of a table, in a format of the family's own (the seed's per-point block): in the
    # terminal under -v, always in the markdown file.
    details: Mapping[str, TableStyle] = field(default_factory=dict)
    # Paths pytest collects besides the user's, given the session's settings (a family whose
    # option names what to run: --distbench-replay collects the replay suite).
    collect: Callable[[Any], Sequence[str]] | None = None
    # Record families it measures that no table, figure or headline above names (those of
    # the default nccl-tests style): the session pools their run-to-run noise as one family's.
    records: tuple[str, ...] = ()
    # Record families whose tables print no ± (a summary of other figures): the session
    # spends no revisits on their points (harness/controller/revisits.py).
    no_interval: tuple[str, ...] = ()
    # Record families whose headline is a latency: the digest shows them at their smallest
    # message size (the figure people read a latency at), every other at its largest.
    latencies: tuple[str, ...] = ()
    # What the digest must carry of a table's notes for the rows it shows (a comparison that
    # name-resolution stalls decide; fewer credits in flight than the row's name says): one
    # short clause, or None.
    caveats: Mapping[str, Callable[[list[Record]], str | None]] = field(default_factory=dict)


class Found(NamedTuple):
    families: tuple[Family, ...]
    problems: tuple[str, ...]  # one line per external family left out
    built_in: int = 0  # how many of `families` are distbench's own (the first)


# Names and options of distbench's own settings (settings.py reserves them before it reads the
# families' rows), and whether pytest already has an option (settings.py asks pytest's parser
# once pytest_addoption hands it over): an external family that takes one is left out, not a
# traceback at start-up (argparse's "conflicting option string").
_reserved_settings: frozenset[str] = frozenset()


def _no_option(option: str) -> bool:
    return False


_pytest_has: Callable[[str], bool] = _no_option


def reserve_settings(names: frozenset[str]) -> None:
    global _reserved_settings
    _reserved_settings = names
    found.cache_clear()


def reserve_pytest_options(pytest_has: Callable[[str], bool]) -> bool:
    """Hold the external families to the options pytest's parser already has (`pytest_has`);
    whether they are found again (only where some were used: finding costs an entry point
    scan)."""
    global _pytest_has
    _pytest_has = pytest_has
    if len(families()) == found().built_in:
        return False
    found.cache_clear()
    return True


@cache
def found() -> Found:
    """The built-in family packages' FAMILY, in package name order (a helper package without a
    registration module, transports, is not a family), then the external ones in entry point
    name order."""
    package = importlib.import_module(FAMILIES_PACKAGE)
    built_in = []
    for info in pkgutil.iter_modules(package.__path__, FAMILIES_PACKAGE + "."):
        module = f"{info.name}.{REGISTRATION_MODULE}"
        if info.ispkg and importlib.util.find_spec(module) is not None:
            built_in.append(importlib.import_module(module).FAMILY)
    families, problems = list(built_in), []
    for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
        try:
            families.append(_external(point, families))
        except ExternalFamilyError as exc:
            problems.append(f"distbench: family entry point {_described(point)} left out: {exc}")
    return Found(tuple(families), tuple(problems), len(built_in))


def families() -> tuple[Family, ...]:
    return found().families


def family_problems() -> tuple[str, ...]:
    """A line for each external family that was left out, saying which and why."""
    return found().problems


class ExternalFamilyError(Exception):
    pass


def _described(point: EntryPoint) -> str:
    dist = getattr(point, "dist", None)
    owner = f" of {dist.metadata['Name']} {dist.version}" if dist is not None else ""
    return f"'{point.name} = {point.value}'{owner}"


def _external(point: EntryPoint, known: list[Family]) -> Family:
    """The family an entry point names, checked against those found before it."""
    with _sigint_noted() as ctrl_c:
        try:
            loaded = point.load()
        except SystemExit as exc:  # it would end every pytest run of the environment, silently
            raise ExternalFamilyError(f"it called sys.exit({exc.code!r}) when imported") from None
        except KeyboardInterrupt:
            if ctrl_c:  # the user's: the run stops, as Ctrl-C stops it anywhere
                raise
            raise ExternalFamilyError("it raised KeyboardInterrupt when imported (no Ctrl-C "
                                      "came)") from None
        except Exception as exc:  # noqa: BLE001 - third-party code: any error, said in one line
            raise ExternalFamilyError(f"{type(exc).__name__}: {exc}") from None
    family = loaded if isinstance(loaded, Family) else getattr(loaded, "FAMILY", None)
    if not isinstance(family, Family):
        raise ExternalFamilyError("it exports no FAMILY = pytest_distbench.registry.Family(...)")
    _check_shape(family)
    ours = {s.name for s in family.settings} | {s.option for s in family.settings}
    if ours & _reserved_settings:
        raise ExternalFamilyError(f"setting {min(ours & _reserved_settings)!r} is one of "
                                  "distbench's own")
    for other in known:
        if family.name == other.name:
            raise ExternalFamilyError(f"family {family.name!r} is already registered")
        for kind in RECORD_FAMILY_KINDS + RECORD_FAMILY_LISTS:
            taken = set(getattr(family, kind)) & set(getattr(other, kind))
            if taken:
                raise ExternalFamilyError(f"record family {min(taken)!r} already has {kind} "
                                          f"from family {other.name!r}")
        taken = ours & ({s.name for s in other.settings} | {s.option for s in other.settings})
        if taken:
            raise ExternalFamilyError(f"setting {min(taken)!r} is already family "
                                      f"{other.name!r}'s")
    # Last: pytest's parser holds the families found before this one too, named above.
    taken = {s.option for s in family.settings if s.option is not None and _pytest_has(s.option)}
    if taken:
        raise ExternalFamilyError(f"setting {min(taken)!r} is an option of pytest's own")
    return family


@contextmanager
def _sigint_noted() -> Iterator[list[int]]:
    """A list that holds SIGINT if it arrives meanwhile: a KeyboardInterrupt without one was
    raised by the code itself. Python's handler (the one that raises KeyboardInterrupt) still
    runs; only the main thread gets signals, and elsewhere, or where SIGINT has no Python
    handler, no KeyboardInterrupt comes of one: the list stays empty."""
    seen: list[int] = []
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield seen
        return

    def note(signum: int, frame: Any) -> None:
        seen.append(signum)
        previous(signum, frame)

    signal.signal(signal.SIGINT, note)
    try:
        yield seen
    finally:
        signal.signal(signal.SIGINT, previous)


def _check_setting(setting: Setting) -> None:
    """What settings.py builds of a row without checking it: the Settings dataclass (the name
    an attribute), pytest's option and --help group, the row's scope."""
    name = setting.name
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise ExternalFamilyError(f"setting {name!r}: its name is not a Python identifier (it "
                                  "is the settings' attribute and the marker's keyword)")
    option = setting.option
    if option is not None and not (isinstance(option, str) and LONG_OPTION.fullmatch(option)):
        raise ExternalFamilyError(f"setting {name!r}: its option {option!r} is not a long "
                                  "option (--NAME: letters, digits, '-' and '_')")
    if setting.scope not in SCOPES:
        raise ExternalFamilyError(f"setting {name!r}: its scope {setting.scope!r} is not one "
                                  f"of {', '.join(SCOPES)}")
    if setting.group is not None:
        raise ExternalFamilyError(f"setting {name!r}: its group {setting.group!r} is not "
                                  "None (--help lists a family's settings in a group of the "
                                  "family's own)")


def _check_shape(family: Family) -> None:
    """What the checks above and the settings table read of a family is of the declared types
    (a dataclass does not check them)."""
    if not isinstance(family.name, str):
        raise ExternalFamilyError(f"its name is {type(family.name).__name__}, not str")
    if not isinstance(family.settings, (tuple, list)) or not all(
            isinstance(s, Setting) for s in family.settings):
        raise ExternalFamilyError("its settings are not all pytest_distbench.registry.Setting")
    for setting in family.settings:
        _check_setting(setting)
    for kind in ("name", "option"):
        given = [getattr(s, kind) for s in family.settings if getattr(s, kind) is not None]
        if len(set(given)) != len(given):
            twice = min(g for g in given if given.count(g) > 1)
            raise ExternalFamilyError(f"two of its settings have the {kind} {twice!r}")
    for kind in RECORD_FAMILY_KINDS:
        if not isinstance(getattr(family, kind), Mapping):
            raise ExternalFamilyError(f"its {kind} are {type(getattr(family, kind)).__name__}, "
                                      "not a mapping")
    for kind in RECORD_FAMILY_LISTS:
        names = getattr(family, kind)
        if not isinstance(names, (tuple, list)) or not all(isinstance(n, str) for n in names):
            raise ExternalFamilyError(f"its {kind} are not a tuple of record family names")


def _by_record_family(kind: str) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    owner: dict[str, str] = {}
    for family in families():
        for name, value in getattr(family, kind).items():
            if name in merged:
                # Two packages styling one record family would make the output depend on
                # which was imported last.
                raise RuntimeError(f"record family {name!r} has {kind} from both "
                                   f"{owner[name]!r} and {family.name!r}")
            merged[name], owner[name] = value, family.name
    return merged


def table_style(record_family: str) -> TableStyle | None:
    """The table style the family of these records registered, if any."""
    return _by_record_family("tables").get(record_family)


def table_headline(record_family: str) -> str | None:
    """What the headline column of this record family's own table style is, if it says."""
    return _by_record_family("headlines").get(record_family)


def table_details(record_family: str) -> TableStyle | None:
    """The detail block this record family's tables add under -v, if any."""
    return _by_record_family("details").get(record_family)


def digest_caveat(record_family: str, rows: list[Record]) -> str | None:
    """The caveat the family's table notes for `rows`, for the digest's line, if any."""
    said = _by_record_family("caveats").get(record_family)
    return said(rows) if said is not None else None


def is_latency(record_family: str) -> bool:
    """Whether a family registered this record family's headline as a latency."""
    return any(record_family in family.latencies for family in families())


def family_of(record_family: str) -> str | None:
    """The name of the family package that measures this record family, if one says so."""
    for family in families():
        if record_family in family.records or any(
                record_family in getattr(family, kind)
                for kind in ("tables", "figures", "headlines", "details")):
            return family.name
    return None


def prints_interval(record_family: str) -> bool:
    """Whether a table prints this record family's ± (no family lists it in `no_interval`)."""
    return not any(record_family in family.no_interval for family in families())


def completed_figures(record: Record) -> dict[str, Any]:
    """The record's figures plus what its family derives from it (derived keys win).

    A rank knows only its own samples; a message rate or a one-way latency must come from the
    samples the record keeps (slowest rank per iteration), so it is derived once the record is
    built, in the controller."""
    derive = _by_record_family("figures").get(record["family"])
    figures = dict(record.get("figures") or {})
    if derive is not None:
        figures.update(derive(record))
    return figures


def plot_specs() -> tuple[PlotSpec, ...]:
    return tuple(spec for family in families() for spec in family.plots)


def family_settings() -> tuple[Setting, ...]:
    return tuple(setting for family in families() for setting in family.settings)


def setting_checks() -> tuple[Callable[[Any], None], ...]:
    return tuple(family.check for family in families() if family.check is not None)
