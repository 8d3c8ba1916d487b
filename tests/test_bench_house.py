"""benchmarks/bench_house.py: its counts on a small made-up package, and --against a commit."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from scripts import loaded

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_house.py"


@pytest.fixture(scope="module")
def bh():
    with loaded(SCRIPT) as module:
        yield module


def body(lines: int) -> str:
    """A function's text of exactly `lines` lines."""
    return "def f():\n" + "    x = 1\n" * (lines - 1)


def make_tree(root: Path) -> None:
    files = {
        "__init__.py": "",
        "registry.py": """
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from .results.plot import Spec
            """,
        "results/__init__.py": "",
        "results/plot.py": "from .. import registry\n",
        "settings.py": """
            def add(parser, group, rows):
                group.addoption("--distbench", action="store_true")
                for s in rows:
                    group.addoption(s.option)
                    parser.addini(s.ini, help="")
                parser.addini("distbench_dir", help="")
            def read(config, name):
                config.getoption("distbench_save")
                config.getini("distbench_dir")
                config.getoption("distbench")
                config.getoption("tx", None)
                config.getoption("distbench_" + name)
                config.getoption(f"distbench_{name}")
                config.getoption(name)
            """,
        "harness/__init__.py": "",
        "harness/launcher/__init__.py": "import _pytest.main\n",
        "harness/launcher/lean.py": """
            def run():
                from _pytest.reports import TestReport
                from _pytest import outcomes
            """,
        "harness/long.py": body(61) + "\n\nclass K:\n    " + body(60).replace("\n", "\n    "),
        # suites/ are user code: none of their lines or calls count, but their imports do.
        "suites/test_x.py": body(70) + 'config.getoption("distbench_x")\nimport _pytest\n'
                            "from .. import settings\n",
    }
    for name, text in files.items():
        path = root / "pytest_distbench" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_counts_by_the_rules_of_the_docstring(bh, tmp_path):
    make_tree(tmp_path)
    house = bh.count(tmp_path)
    package = tmp_path / "pytest_distbench"
    own = [p for p in package.rglob("*.py") if "suites" not in p.parts]
    assert house.lines == sum(len(p.read_text().splitlines()) for p in own)
    harness = [p for p in own if "harness" in p.parts]
    assert house.harness_lines == sum(len(p.read_text().splitlines()) for p in harness)
    assert house.launcher_lines == 1 + 4
    assert (house.addoption_by_hand, house.addini_by_hand) == (1, 1)
    assert (house.distbench_reads, house.computed_reads) == (4, 1)
    assert house.pytest_private_imports == 3
    assert house.circles == [["pytest_distbench.registry", "pytest_distbench.results.plot"]]
    assert house.long_functions == [("pytest_distbench.harness.long:f", 61)]


def test_against_a_commit_side_by_side_and_nothing_left(bh, tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    make_tree(repo)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "before"], check=True)
    # After: the circle broken, one option more by hand.
    (repo / "pytest_distbench" / "results" / "plot.py").write_text("")
    with (repo / "pytest_distbench" / "settings.py").open("a") as f:
        f.write('def more(group):\n    group.addoption("--distbench-more")\n')
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    done = subprocess.run([sys.executable, str(SCRIPT), str(repo), "--against", "HEAD"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = {line[:44].strip(): line[44:].split() for line in done.stdout.splitlines()
            if line[:44].strip() and ":" not in line}
    assert rows["import circles (type-only counted)"] == ["1", "0"]
    assert rows["addoption( outside the table"] == ["1", "2"]
    assert list(temp.iterdir()) == []
    bad = subprocess.run([sys.executable, str(SCRIPT), str(repo), "--against", "no-such-ref"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and len(bad.stderr.splitlines()) == 1
    assert bad.stderr.startswith("bench_house: --against no-such-ref: ")
