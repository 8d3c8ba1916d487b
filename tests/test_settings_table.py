"""The settings table (settings.py): one row per option, one ini key each, one precedence
rule, switches that never take the next argument, the wire settings derived from it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_distbench import settings
from pytest_distbench.harness import options
from pytest_distbench.harness.wire import MeasureSettings, PressureSettings, from_settings

ROOT = Path(__file__).resolve().parent.parent
BENCH = """
import time, pytest

@pytest.mark.distbench(iterations=3, warmup=1)
def test_sleep(distbench):
    distbench.measure(lambda: time.sleep(0.001))
"""


class FakeConfig:
    """What settings.py reads of a pytest.Config: options, ini keys, the stash."""

    def __init__(self, cli: dict[str, str] | None = None, ini: dict[str, str] | None = None,
                 run: dict[str, str] | None = None) -> None:
        self.cli, self.ini, self.stash = cli or {}, ini or {}, pytest.Stash()
        if run is not None:
            self.stash[settings.RUN_DEFAULTS] = run

    def getoption(self, dest: str, default: object = None) -> object:
        return self.cli.get(dest.removeprefix("distbench_"), default)

    def getini(self, key: str) -> object:
        return self.ini.get(key.removeprefix("distbench_"), "")


SOURCES = ("marker", "option", "ini", "suite", "run")


@given(st.sampled_from([s for s in settings.TABLE if s.option is not None]),
       st.sets(st.sampled_from(SOURCES)))
def test_the_first_source_that_says_something_wins(setting, present):
    text = {source: f"{source}-text" for source in present}
    config = FakeConfig(cli={setting.name: text["option"]} if "option" in text else {},
                        ini={setting.name: text["ini"]} if "ini" in text else {},
                        run={setting.name: text["run"]} if "run" in text else None)
    chosen = settings.choose(
        config, setting,
        marker={setting.name: text["marker"]} if "marker" in text else None,
        suite_defaults={setting.name: text["suite"]} if "suite" in text else None)
    first = next((source for source in SOURCES if source in present), None)
    if first is None:
        assert chosen == (setting.default, "default")
    else:
        assert chosen == (text[first], "default" if first == "run" else first)


def test_wire_settings_are_the_resolved_settings_under_their_own_names():
    resolved = settings.resolve(FakeConfig(cli={
        "budget": "0.25s", "duration": "2s", "allocate": "2MiB", "touch": "1MiB",
        "touch_once": "true", "cpu_threads": "1", "cuda_batch": "7"}))
    pressure = from_settings(PressureSettings, resolved)
    measure = from_settings(MeasureSettings, resolved, report_every_s=5.0, pressure=pressure,
                            sampling_target=None, noise_stop=False)  # derived, as outcome.py
    assert (measure.budget_s, measure.duration_s, measure.cuda_batch) == (0.25, 2.0, 7)
    assert (pressure.allocate_bytes, pressure.touch_bytes, pressure.touch_once,
            pressure.cpu_threads) == (2 << 20, 1 << 20, True, 1)
    assert options.report_every_s(resolved) == measure.report_every_s


def test_help_lists_every_option_and_ini_key_in_groups_a_user_reaches_for(pytester):
    """55 options were one flat group in no order (--distbench-revisits second, the threshold
    between timeout and duration, save and compare last)."""
    result = pytester.runpytest_subprocess("--help")
    assert result.ret == 0, result.stderr.str()
    text = result.stdout.str()
    named = set(re.findall(r"(?<![\w-])(--?[\w-]+|distbench_\w+)(?![\w-])", text))
    assert not {s.ini for s in settings.TABLE} - named
    assert not {s.option for s in settings.TABLE if s.option} - named
    # Each option under its group's heading, the groups in HELP_GROUPS' order then the
    # families', what to run first.
    heading, under = None, {}
    for line in text.splitlines():
        if re.match(r"distbench: .*:$", line):
            heading = line[:-1]
        elif not line.strip() or not line.startswith(" "):
            heading = None
        elif heading and re.match(r"  --[\w-]+", line):
            under[line.split()[0].split("=")[0]] = heading
    rows = [s for s in settings.TABLE if s.option]
    assert under == {s.option: settings.help_group(s) for s in rows}
    groups = list(dict.fromkeys(under.values()))
    assert groups[:len(settings.HELP_GROUPS)] == [f"distbench: {title}" for title in
                                                 settings.HELP_GROUPS.values()]
    assert [o for o, g in under.items() if g == groups[0]][:4] == [
        "--distbench", "--world-size", "--backend", "--tensor-size"]
    assert list(under)[-len(rows):].index("--distbench-compare") < 25


def test_each_options_help_is_one_sentence_and_says_its_default():
    for s in settings.TABLE:
        assert not re.search(r";|(?<!e\.g)\.\s|\.$", s.help), s.option or s.ini
        assert s.group is None or s.group in settings.HELP_GROUPS, s.name


def test_a_switch_before_a_path_leaves_the_path_to_pytest(pytester, distbench_run):
    """`--distbench-print-env test_bench.py` took the path as the switch's value (an
    invalid switch) before; test_other.py, not named, must not run."""
    pytester.makepyfile(test_bench=BENCH, test_other="def test_not_named():\n    assert 0\n")
    result = distbench_run("--distbench", "--world-size=2", "--distbench-print-env",
                           "test_bench.py")
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
    result.assert_outcomes(passed=1)


def test_a_switch_takes_no_value_on_the_command_line(pytester):
    """Its value is the ini key's (or -o's), named when it is bad."""
    pytester.makepyfile(BENCH)
    result = pytester.runpytest_subprocess("--distbench", "--distbench-print-env=maybe")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*argument --distbench-print-env: ignored explicit argument "
                                 "'maybe'*"])
    result = pytester.runpytest_subprocess("--distbench", "-o", "distbench_force=maybe")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: ini option distbench_force: invalid switch 'maybe'*"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


def test_session_options_come_from_the_ini_file_too(pytester, distbench_run):
    """Every option has an ini key: here the run itself and its results file."""
    pytester.makeini("[pytest]\ndistbench_run = true\ndistbench_json = run.json\n")
    pytester.makepyfile(BENCH)
    result = distbench_run("--world-size=2")
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
    result.assert_outcomes(passed=1)
    assert json.loads((pytester.path / "run.json").read_text())["benchmarks"]


def test_the_user_guide_lists_every_core_option_with_its_ini_key():
    """docs/user-guide.md's options table: each row not a family's, with its ini key."""
    rows = [line for line in (ROOT / "docs" / "user-guide.md").read_text().splitlines()
            if line.startswith("| ")]
    missing = [s.ini for s in (*settings.SESSION_SETTINGS, *settings.CORE_SETTINGS,
                               *options.SETTINGS)
               if not any(f"`{s.ini}`" in row and (s.option is None or f"`{s.option}" in row)
                          for row in rows)]
    assert not missing


def test_the_user_guide_states_each_core_options_default_as_the_table_has_it():
    """A default written in backticks in the options table is the row's own default (the guide
    said `1s` for the budget while the table's default was 0.5s)."""
    cells = [[cell.strip() for cell in line.strip("|").split("|")]
             for line in (ROOT / "docs" / "user-guide.md").read_text().splitlines()
             if line.startswith("| `")]
    by_ini = {row[1].strip("`"): row for row in cells if len(row) >= 4}
    wrong = {}
    for s in (*settings.CORE_SETTINGS, *options.SETTINGS):
        shown = by_ini.get(s.ini, [""] * 4)[3]
        if shown.startswith("`") and shown.endswith("`") and shown.strip("`") != str(s.default):
            wrong[s.ini] = (shown, s.default)
    assert not wrong
