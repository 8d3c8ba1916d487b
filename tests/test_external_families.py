"""Extension points for code outside the package (docs/architecture.md, "Extending"): families
from other distributions' entry points, and the plugin's hooks."""

from __future__ import annotations

import json
import os
import re
import site
import subprocess
import sys
from pathlib import Path

import pytest
from launching import launch

from pytest_distbench import registry
from pytest_distbench.results.rendering import table

ARCHITECTURE = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"
BUILT_IN = ["collectives", "message_rate", "p2p", "replay", "rpc", "store"]
CODEC_FAMILY = (
    "from pytest_distbench.registry import Family\n"
    "FAMILY = Family(name='zz_codec', tables={'zz_codec': lambda rows: f'codec table of "
    "{len(rows)} row(s)'},\n"
    "                figures={'zz_codec': lambda record: {'ratio': 2}})\n")


def installed_by_hand(where: Path, name: str, points: dict[str, str],
                      modules: dict[str, str]) -> None:
    """A distribution as an installer leaves it (its dist-info beside its modules)."""
    info = where / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[{registry.ENTRY_POINT_GROUP}]\n" + "".join(f"{k} = {v}\n" for k, v in points.items()))
    for module, text in modules.items():
        (where / f"{module}.py").write_text(text)


@pytest.fixture
def on_path(tmp_path, monkeypatch):
    """A directory on sys.path for hand-made distributions; the registry forgets what it found
    with them, and their modules are unloaded."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    registry.found.cache_clear()
    yield tmp_path
    registry.found.cache_clear()
    for name in set(sys.modules) - before:
        if name.startswith("zz_"):
            del sys.modules[name]


def test_an_entry_point_family_comes_after_the_built_in_ones(on_path):
    installed_by_hand(on_path, "zz-codec", {"codec": "zz_codec_family"},
                      {"zz_codec_family": CODEC_FAMILY})
    assert [f.name for f in registry.families()] == [*BUILT_IN, "zz_codec"]
    assert registry.family_problems() == ()
    record = {"family": "zz_codec", "backend": "gloo", "world_size": 2, "device": "cpu",
              "nbytes": 4, "id": "a", "name": "a", "figures": {"own": 1}}
    assert "codec table of 1 row(s)" in table.render_tables([record])
    assert registry.completed_figures(record) == {"own": 1, "ratio": 2}


def test_an_entry_point_may_name_the_family_object_itself(on_path):
    installed_by_hand(on_path, "zz-codec", {"codec": "zz_codec_family:FAMILY"},
                      {"zz_codec_family": CODEC_FAMILY})
    assert registry.families()[-1].name == "zz_codec"


BROKEN = {
    "missing": ("zz_not_there", {}, "ModuleNotFoundError: No module named 'zz_not_there'"),
    "raises": ("zz_raises", {"zz_raises": "raise ValueError('no codec here')\n"},
               "ValueError: no codec here"),
    "no_family": ("zz_plain", {"zz_plain": "X = 1\n"},
                  "it exports no FAMILY = pytest_distbench.registry.Family(...)"),
    "taken_name": ("zz_p2p", {"zz_p2p": "from pytest_distbench.registry import Family\n"
                                        "FAMILY = Family(name='p2p')\n"},
                   "family 'p2p' is already registered"),
    "taken_record_family": (
        "zz_clash", {"zz_clash": "from pytest_distbench.registry import Family\n"
                                 "FAMILY = Family(name='zz_clash', tables={'store_ops': str})\n"},
        "record family 'store_ops' already has tables from family 'store'"),
    "taken_setting": (
        "zz_window", {"zz_window": "from pytest_distbench.registry import Family, Setting\n"
                                   "FAMILY = Family(name='zz_window', settings=(Setting(\n"
                                   "    'window', '--zz-window', '1', int, 'w'),))\n"},
        "setting 'window' is already family 'p2p''s"),
    "taken_core_setting": (
        "zz_budget", {"zz_budget": "from pytest_distbench.registry import Family, Setting\n"
                                   "FAMILY = Family(name='zz_budget', settings=(Setting(\n"
                                   "    'budget', '--zz-budget', '1', int, 'b'),))\n"},
        "setting 'budget' is one of distbench's own"),
    "taken_core_option": (
        "zz_world", {"zz_world": "from pytest_distbench.registry import Family, Setting\n"
                                 "FAMILY = Family(name='zz_world', settings=(Setting(\n"
                                 "    'zz_ws', '--world-size', '1', int, 'w'),))\n"},
        "setting '--world-size' is one of distbench's own"),
    "exits": ("zz_exits", {"zz_exits": "import sys\nsys.exit(3)\n"},
              "it called sys.exit(3) when imported"),
    "not_a_setting": ("zz_loose", {"zz_loose": "from pytest_distbench.registry import Family\n"
                                               "FAMILY = Family(name='zz_loose', "
                                               "settings=('window',))\n"},
                      "its settings are not all pytest_distbench.registry.Setting"),
    "pytests_option": (
        "zz_maxfail", {"zz_maxfail": "from pytest_distbench.registry import Family, Setting\n"
                                     "FAMILY = Family(name='zz_maxfail', settings=(Setting(\n"
                                     "    'zz_mf', '--maxfail', '1', int, 'm'),))\n"},
        "setting '--maxfail' is an option of pytest's own"),
    # Issue 54, item 7: each ended every pytest run of the environment.
    "interrupts": ("zz_interrupts", {"zz_interrupts": "raise KeyboardInterrupt\n"},
                   "it raised KeyboardInterrupt when imported (no Ctrl-C came)"),
    "option_without_dashes": (
        "zz_dashless", {"zz_dashless": "from pytest_distbench.registry import Family, Setting\n"
                                       "FAMILY = Family(name='zz_dashless', settings=(Setting(\n"
                                       "    'zz_w', 'zz-window', '1', int, 'w'),))\n"},
        "setting 'zz_w': its option 'zz-window' is not a long option (--NAME: letters, "
        "digits, '-' and '_')"),
    "name_not_identifier": (
        "zz_spaced", {"zz_spaced": "from pytest_distbench.registry import Family, Setting\n"
                                   "FAMILY = Family(name='zz_spaced', settings=(Setting(\n"
                                   "    'zz w', '--zz-w', '1', int, 'w'),))\n"},
        "setting 'zz w': its name is not a Python identifier (it is the settings' attribute "
        "and the marker's keyword)"),
    # The same depth: what settings.py builds of a row without checking it.
    "unknown_scope": (
        "zz_scoped", {"zz_scoped": "from pytest_distbench.registry import Family, Setting\n"
                                   "FAMILY = Family(name='zz_scoped', settings=(Setting(\n"
                                   "    'zz_w', '--zz-w', '1', int, 'w', scope='run'),))\n"},
        "setting 'zz_w': its scope 'run' is not one of test, session"),
    "help_group": (
        "zz_grouped", {"zz_grouped": "from pytest_distbench.registry import Family, Setting\n"
                                     "FAMILY = Family(name='zz_grouped', settings=(Setting(\n"
                                     "    'zz_w', '--zz-w', '1', int, 'w', group='mine'),))\n"},
        "setting 'zz_w': its group 'mine' is not None (--help lists a family's settings in a "
        "group of the family's own)"),
    "one_name_twice": (
        "zz_twice", {"zz_twice": "from pytest_distbench.registry import Family, Setting\n"
                                 "FAMILY = Family(name='zz_twice', settings=(\n"
                                 "    Setting('zz_w', '--zz-w', '1', int, 'w'),\n"
                                 "    Setting('zz_w', '--zz-v', '1', int, 'v')))\n"},
        "two of its settings have the name 'zz_w'"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_external_family_is_left_out_with_one_line(on_path, case):
    module, modules, reason = BROKEN[case]
    installed_by_hand(on_path, "zz-broken", {"broken": module, "works": "zz_codec_family"},
                      {**modules, "zz_codec_family": CODEC_FAMILY})
    # The built-in families, and another external one, are still used.
    assert [f.name for f in registry.families()] == [*BUILT_IN, "zz_codec"]
    assert registry.family_problems() == (
        f"distbench: family entry point 'broken = {module}' of zz-broken 1.0 left out: "
        f"{reason}",)


def test_a_ctrl_c_while_a_family_is_imported_stops_the_run(on_path):
    """A KeyboardInterrupt the module raises itself leaves the family out ([interrupts]
    above); the user's Ctrl-C, arriving meanwhile, is not taken for one."""
    installed_by_hand(on_path, "zz-slow", {"slow": "zz_slow"}, {"zz_slow": (
        "import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(5)\n")})
    with pytest.raises(KeyboardInterrupt):
        registry.families()


@pytest.mark.parametrize("case", ["missing", "exits", "not_a_setting", "pytests_option",
                                  "interrupts", "option_without_dashes", "name_not_identifier"])
def test_a_broken_external_family_is_a_line_of_the_header(pytester, monkeypatch, case):
    """Not a pytest run of the environment ends for it: not one that exits at import, nor one
    whose settings argparse would refuse."""
    module, modules, reason = BROKEN[case]
    installed_by_hand(pytester.path / "site", "zz-broken", {"broken": module}, modules)
    monkeypatch.setenv("PYTHONPATH", str(pytester.path / "site"))
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--distbench-window=4",
                                           "--maxfail=1")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"distbench: family entry point 'broken = {module}' of "
                                 f"zz-broken 1.0 left out: {reason}*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_a_broken_external_family_is_a_warning_of_the_command(on_path, capsys):
    from pytest_distbench.cli import main

    installed_by_hand(on_path, "zz-broken", {"broken": "zz_not_there"}, {})
    assert main(["compare", str(on_path / "a.json"), str(on_path / "b.json")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("pytest-distbench: WARNING: distbench: family entry point "
                             "'broken = zz_not_there' of zz-broken 1.0 left out: ")
    assert "a.json" in err[1] and len(err) == 2


def documented_conftest() -> str:
    text = ARCHITECTURE.read_text()
    extending = text[text.index("## Extending"):]
    (block,) = re.findall(r"```python\n(.*?)```", extending[:extending.index("\n## ", 3)],
                          re.S)
    return "\n".join(line[2:] for line in block.splitlines()) + "\n"  # the list's indent


@pytest.mark.parametrize("mode", ["local", "ab", "launcher"])
def test_the_documented_hooks_add_facts_and_see_every_record(pytester, distbench_run, mode):
    """Each kept record seen once, wherever the mode judges it (A/B: the merged candidate's;
    a launcher: rank 0's pytest alone)."""
    pytester.makeconftest(documented_conftest())
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.distbench
        def test_two(distbench):
            distbench.measure(lambda: None, family="probe", name="first")
            distbench.measure(lambda: None, family="probe", name="second")
        """
    )
    out = pytester.path / "run.json"
    args = ["--distbench", "--distbench-iterations=3", f"--distbench-json={out}"]
    if mode == "launcher":
        ranks = launch(pytester.path, "slurm", 2, args, timeout=120)
        assert [r.returncode for r in ranks] == [0, 0], ranks[0].output + ranks[1].output
    else:
        ab = ["--distbench-baseline-env=DISTBENCH_UNUSED=1", "--distbench-rounds=2"]
        result = distbench_run(*args, "--world-size=2", *(ab if mode == "ab" else []))
        result.assert_outcomes(passed=1)
    document = json.loads(out.read_text())
    environment = document["distbench"]["environment"]
    assert (environment["cluster"], environment["rack"]) == ("lab-a", 7)
    assert (environment["launcher"]["name"] != "local") == (mode == "launcher")
    assert all(("ab" in b["distbench"]) == (mode == "ab") for b in document["benchmarks"])
    records = {b["distbench"]["name"]: b["distbench"]["summary"]["p50"]
               for b in document["benchmarks"]}
    seen = [line.split() for line in (pytester.path / "seen.txt").read_text().splitlines()]
    assert {name: float(p50) for name, p50 in seen} == records
    assert len(seen) == 2


def test_environment_facts_that_are_not_their_own_fail_the_session(pytester, distbench_run):
    pytester.makeconftest(
        """
        def pytest_distbench_environment(config):
            return {"torch": "mine", "when": object(), "kept": [1, 2]}
        """
    )
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.distbench
        def test_one(distbench):
            distbench.measure(lambda: None, family="probe")
        """
    )
    out = pytester.path / "run.json"
    result = distbench_run("--distbench", "--world-size=2", "--distbench-iterations=3",
                           f"--distbench-json={out}")
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "*ERROR: pytest_distbench_environment: 'torch' is not a name of its own*",
        "*ERROR: pytest_distbench_environment: 'when' is not a JSON value*"])
    environment = json.loads(out.read_text())["distbench"]["environment"]
    assert environment["kept"] == [1, 2] and environment["torch"] != "mine"
    assert "when" not in environment


EXTERNAL_TEST = """
import pytest

@pytest.mark.distbench
def test_codec(distbench):
    distbench.measure(lambda: None, family="zz_codec", nbytes=4)
"""


# Extended: the entry-point tests above find a family through a distribution laid out as an
# installer leaves it, and draw its table; this one builds and pip-installs one (14 s).
@pytest.mark.extended
def test_an_installed_family_package_is_used(tmp_path):
    """A distribution of its own, pip-installed into a venv of its own (the suite's venv is
    left as it was), is found through its entry point in a real session."""
    pytest.importorskip("setuptools")  # the build backend; --no-build-isolation: no network
    package = tmp_path / "zz-codec"
    (package / "zz_codec").mkdir(parents=True)
    (package / "zz_codec" / "__init__.py").write_text("")
    (package / "zz_codec" / "family.py").write_text(CODEC_FAMILY)
    (package / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "zz-codec"\nversion = "1.0"\n\n'
        f'[project.entry-points."{registry.ENTRY_POINT_GROUP}"]\ncodec = "zz_codec.family"\n\n'
        '[tool.setuptools]\npackages = ["zz_codec"]\n')
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    # --system-site-packages reaches the base interpreter's site-packages, not those of the
    # venv this suite runs in (torch, pytest, pip, this checkout): add them as site dirs, so
    # their own .pth files (the editable install) apply too.
    own_site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path("
                               "'purelib'))"], capture_output=True, text=True, check=True,
                              timeout=60).stdout.strip()
    (Path(own_site) / "suite_env.pth").write_text(
        "".join(f"import site; site.addsitedir({d!r})\n" for d in site.getsitepackages()))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_USER")}
    env["TMPDIR"] = str(tmp_path)  # pip's build folders
    subprocess.run([python, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                    "--no-index", "--no-cache-dir", "--quiet", str(package)],
                   check=True, timeout=180, env=env, cwd=tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    (run / "test_codec.py").write_text(EXTERNAL_TEST)
    done = subprocess.run([python, "-m", "pytest", "-p", "no:cacheprovider", "--distbench",
                           "--world-size=2", "--distbench-iterations=3"],
                          capture_output=True, text=True, timeout=240, env=env, cwd=run)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "codec table of 1 row(s)" in done.stdout
    assert "left out" not in done.stdout
    # The suite's own interpreter does not have it.
    assert "zz_codec" not in [f.name for f in registry.families()]
