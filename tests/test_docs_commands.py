"""Every command README.md and docs/*.md give runs, read from the docs (not copied from them).

Each runs in a fresh copy of the repository (as a new user's checkout: the copy's own package
is the one imported), with the files earlier steps of the docs would have left (a results file,
a baseline, a user's benchmark file), as written plus a small budget (doc_commands.runnable).
It must exit 0, print its tables or write its files, and leave no process behind. Commands that
need another machine, a scheduler or a GPU are listed with where they are exercised instead;
the whole main job and the 10-80 rank and thousands-of-clients sweeps run with -m slow, and
sweeps that a quicker command or test also exercises with -m extended (CI runs those).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from doc_commands import (
    EXTENDED,
    Command,
    commands_in,
    documented_commands,
    expand,
    narrower_twin,
    runnable,
    session_env,
    where_not,
    why_extended,
    why_slow,
)
from launching import torchrun_tmpdir
from leaks import TAG_VARIABLE, processes_with_tag
from replay_traces import nccl_files, two_rank_trace, written
from zygote import ZygotePool

from pytest_distbench.harness.xdist.mode import is_worker
from pytest_distbench.results.document import history, read_document, write_document

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = documented_commands(ROOT)
TIMEOUT_S = 420
PARALLEL = 3
# Under xdist the documented commands are one group (--dist=loadgroup, pyproject.toml): the
# worker that runs them starts them all at once, PARALLEL at a time, and the commands that read
# the same (README.md and docs/gating.md give several twice) run once, as without xdist.
GROUP = pytest.mark.xdist_group("docs_commands")

USER_BENCHMARK = '''
import pytest
import torch
import torch.distributed as dist


@pytest.mark.distbench
@pytest.mark.parametrize("nbytes", [1024, 1 << 20])
def test_all_reduce(distbench, nbytes):
    x = torch.ones(nbytes // 4)
    distbench.measure(lambda: dist.all_reduce(x), nbytes=nbytes, family="all_reduce",
                      busbw_factor=2 * (distbench.world_size - 1) / distbench.world_size)
'''


def _params() -> list:
    out = []
    for command in COMMANDS:
        elsewhere, slow = where_not(command), why_slow(command)
        marks = [GROUP, *([pytest.mark.skip(reason=elsewhere)] if elsewhere else [])]
        if slow:
            marks.append(pytest.mark.slow)
        elif why_extended(command, COMMANDS):
            marks.append(pytest.mark.extended)
        out.append(pytest.param(command, id=command.id, marks=marks))
    return out


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, zygotes: ZygotePool) -> Path:
    """A checkout as the docs' earlier steps leave it: results files and a baseline."""
    base = tmp_path_factory.mktemp("docs-checkout")
    repo = base / "repo"
    repo.mkdir()
    shutil.copytree(ROOT / "pytest_distbench", repo / "pytest_distbench",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("conftest.py", "pyproject.toml"):
        shutil.copy(ROOT / name, repo / name)
    (repo / "bench_comms.py").write_text(USER_BENCHMARK)
    # docs/replay.md: its example program, and the trace its capture step leaves.
    (repo / "benchmarks").mkdir()
    shutil.copy(ROOT / "benchmarks" / "replay_programs.py", repo / "benchmarks")
    written(two_rank_trace(), repo / "trace")
    # Its profiler way in: one Chrome trace per rank (NCCL's form; a real gloo one is
    # recorded in tests/test_replay_profiler.py).
    (repo / "profile").mkdir()
    nccl_files(repo / "profile", world=2)
    # --distbench-baseline-python=../main/.venv/bin/python: main's checkout beside this one,
    # with this environment as its virtual environment.
    (base / "main").mkdir()
    (base / "main" / ".venv").symlink_to(sys.prefix)
    first = [sys.executable, "-m", "pytest", "--distbench", "--world-size=2",
             "-p", "no:cacheprovider", "--pyargs", "pytest_distbench.suites.test_collectives",
             "-k", "all_reduce", "--tensor-size=1KiB,64KiB", "--distbench-iterations=5"]
    for extra in (["--distbench-json=run.json"], ["--distbench-save=main"]):
        done = zygotes.run_command(first + extra, cwd=repo, env=_env(repo), timeout=TIMEOUT_S)
        assert done.returncode == 0, done.stdout + done.stderr
    for name in ("a.json", "b.json", "c.json"):
        shutil.copy(repo / "run.json", repo / name)
    # `pytest-distbench history main` (docs/gating.md, docs/ci.md) reads a baseline with a
    # history: the two runs above, oldest first, as --distbench-append would have kept them.
    main = repo / "baselines" / "main.json"
    write_document(history.with_history(read_document(main), read_document(repo / "run.json")),
                   main, overwrite=True)
    # docs/gpu.md: nccl-tests' own JSON from the H200 beside the plugin's figures.
    for found in (ROOT / "tests" / "data" / "nccl_tests").glob("*.json"):
        shutil.copy(found, repo / found.name)
    return base


# What the docs' variables stand for here (never the CI job's own summary file).
PLACEHOLDERS = {"GITHUB_STEP_SUMMARY": "step-summary.md"}


def _env(repo: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(repo)
    env["GITHUB_STEP_SUMMARY"] = str(repo / PLACEHOLDERS["GITHUB_STEP_SUMMARY"])
    env.update(extra or {})
    return env


@dataclass
class Ran:
    argv: list[str]
    repo: Path
    returncode: int
    stdout: str
    stderr: str
    seconds: float = 0.0  # its wall time, as a user running it would wait (this machine's load)

    @property
    def shown(self) -> str:
        """The command, its failures section (why a test failed: the tail alone is the tables
        and the summary) and the tail of its output."""
        start = self.stdout.find("= FAILURES =")
        failures = "" if start < 0 else self.stdout[start:start + 8000] + "\n[...]\n"
        return (f"$ {' '.join(self.argv)}\n{failures}{self.stdout[-6000:]}\n"
                f"{self.stderr[-3000:]}")


class Runner:
    """Runs documented commands, each in its own fresh checkout, PARALLEL at a time: most of a
    command's time is imports and rank start-up, not measurement, so they overlap well.
    Commands that read the same once run as written share one run."""

    def __init__(self, template: Path, base: Path, zygotes: ZygotePool) -> None:
        self.template = template
        self.zygotes = zygotes
        self.base = base
        self.pool = ThreadPoolExecutor(PARALLEL)
        self.futures: dict[tuple, Future] = {}

    def submit(self, command: Command) -> Future:
        key = (tuple(runnable(command, sys.executable, PLACEHOLDERS)),
               tuple(sorted(command.env.items())), _saves_anew(command), command.stdout_to)
        if key not in self.futures:
            self.futures[key] = self.pool.submit(self._run, command, len(self.futures))
        return self.futures[key]

    def _run(self, command: Command, index: int) -> Ran:
        checkout = self.base / f"checkout-{index}"
        shutil.copytree(self.template, checkout, symlinks=True)
        repo = checkout / "repo"
        if _saves_anew(command):  # the docs' "first run": no baseline of that name yet
            (repo / "baselines" / "main.json").unlink()
        if command.argv[:2] == ["pytest-distbench", "capture"]:  # the trace it makes is new
            shutil.rmtree(repo / command.argv[command.argv.index("--out") + 1])
        argv = runnable(command, sys.executable, _env(repo, command.env))
        env = {**_env(repo, command.env), **torchrun_tmpdir(argv, checkout),
               **session_env(command)}
        began = time.monotonic()
        try:
            done = self.zygotes.run_command(argv, cwd=repo, env=env, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            return Ran(argv, repo, -1, str(exc.stdout or ""), f"timed out after {TIMEOUT_S} s",
                       time.monotonic() - began)
        seconds = time.monotonic() - began
        if command.stdout_to:  # the shell's `> FILE` / `>> FILE`
            target = expand(command.stdout_to, _env(repo))
            with open(repo / target, "a", encoding="utf-8") as f:
                f.write(done.stdout)
        return Ran(argv, repo, done.returncode, done.stdout, done.stderr, seconds)


@pytest.fixture(scope="module")
def runner(template: Path, tmp_path_factory: pytest.TempPathFactory, request,
           zygotes: ZygotePool):
    """Every command of the session's selection starts at once (PARALLEL run together); a
    leak check after all of them."""
    tag = uuid.uuid4().hex
    saved = os.environ.get(TAG_VARIABLE)
    os.environ[TAG_VARIABLE] = tag
    run = Runner(template, tmp_path_factory.mktemp("docs-runs"), zygotes)
    # An xdist worker holds every collected item but runs the ones it is sent: it is sent them
    # all when they are one group (GROUP); otherwise (`--dist=load`) each test starts its own
    # (started here, each worker ran every command: 73 s of the last one's teardown).
    config = request.config
    if not is_worker(config) or config.getoption("dist", "no") == "loadgroup":
        for item in request.session.items:
            command = getattr(item, "callspec", None) and item.callspec.params.get("command")
            if isinstance(command, Command) and item.get_closest_marker("skip") is None:
                run.submit(command)
    yield run
    run.pool.shutdown(wait=True)
    if saved is None:
        os.environ.pop(TAG_VARIABLE, None)
    else:
        os.environ[TAG_VARIABLE] = saved
    deadline = time.monotonic() + 10
    while processes_with_tag(tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not processes_with_tag(tag), "a documented command left processes behind"


@pytest.mark.parametrize("command", _params())
def test_documented_command_runs(command: Command, runner: Runner, record_property) -> None:
    """Each command as the docs give it; what it took is recorded (`--junitxml`: the docs'
    stated times are these, with the machine and its load, docs/user-guide.md)."""
    ran = runner.submit(command).result()
    record_property("wall_s", round(ran.seconds, 1))
    assert ran.returncode == 0, ran.shown
    _check_outputs(command, ran.repo, ran.stdout, ran.shown)


def _saves_anew(command: Command) -> bool:
    return any(a == "--distbench-save=main" for a in command.argv) and not any(
        a in ("--distbench-append", "--distbench-overwrite") for a in command.argv)


# What pytest itself prints, whose width is its own: its header, and lines that carry a
# test's node id (progress, -v and the short summary); and markdown, written for a page
# that renders it (`compare --format=markdown`), not for a terminal.
PYTESTS_OWN = re.compile(r"^(platform |rootdir: |plugins: |cachedir: |configfile: |"
                         r"testpaths: |running \(zygote\)|\|)|::|\.py |\[gw\d+\]")


def too_wide(stdout: str, width: int = 120) -> list[str]:
    """The lines of the product's own output wider than a terminal's 120 columns."""
    return [line for line in stdout.splitlines()
            if len(line) > width and not PYTESTS_OWN.search(line)]


def _check_outputs(command: Command, repo: Path, stdout: str, shown: str) -> None:
    argv = command.argv
    wide = [] if "--format=markdown" in argv else too_wide(stdout)  # a page's, not a terminal's
    assert not wide, f"{len(wide)} line(s) over 120 columns, the first:\n{wide[0]}\n{shown}"
    if argv[0] == "pytest-distbench" and argv[1] == "plot":
        out = repo / argv[argv.index("--out") + 1]
        assert list(out.glob("*.png")), shown
        return
    if argv[0] == "pytest-distbench" and argv[1] == "export" and "-o" in argv:
        assert (repo / argv[argv.index("-o") + 1]).is_file(), shown
    if argv[0] == "pytest-distbench":
        assert stdout.strip(), shown
        return
    assert "distbench results" in stdout, shown
    assert "\n# " in stdout, shown  # at least one table under its title
    for option, what in (("--distbench-json=", "results file"),
                         ("--distbench-markdown=", "markdown"),
                         ("--distbench-plot=", "plots"), ("--junitxml=", "JUnit XML")):
        for a in argv:
            if a.startswith(option):
                target = a.split("=", 1)[1]
                path = repo / expand(target, _env(repo))
                assert path.exists() and (path.is_file() or any(path.iterdir())), (
                    f"{what} {target} not written\n{shown}")


def test_the_docs_give_commands_of_every_kind() -> None:
    """The reader is not silently empty: the known commands are found."""
    texts = {c.text for c in COMMANDS}
    assert "pytest --distbench --world-size=8" in texts
    assert any(c.argv[0] == "torchrun" for c in COMMANDS)
    assert any(c.argv[0] == "pytest-distbench" for c in COMMANDS)
    assert len(COMMANDS) >= 40


def test_the_reader_joins_continued_lines_drops_comments_and_skips_prose() -> None:
    markdown = "\n".join([
        "pytest --distbench --world-size=2   (prose, not a command)",
        "```",
        "pytest --distbench --world-size=3 --pyargs x \\",
        "    --distbench-duration=30s   # a comment",
        "pytest                  # the test suite: not the product",
        "RES_OPTIONS='timeout:1' pytest --distbench -k store",
        "pytest-distbench compare a.json b.json",
        "```",
    ])
    found = commands_in(markdown, "doc.md")
    assert [c.source for c in found] == ["doc.md:3", "doc.md:6", "doc.md:7"]
    assert found[0].argv == ["pytest", "--distbench", "--world-size=3", "--pyargs", "x",
                             "--distbench-duration=30s"]
    assert found[1].env == {"RES_OPTIONS": "timeout:1"}


def test_the_reader_finds_the_commands_of_a_ci_recipe() -> None:
    """A YAML block's commands: GitHub's `run:` (one line, or a block), GitLab's `script:`
    list items; its other lines (keys, other tools) are not commands."""
    markdown = "\n".join([
        "```yaml",
        "steps:",
        "  - run: pytest --distbench -k a",
        "  - run: |",
        "      pip install -e .",
        "      pytest --distbench \\",
        "        -k b",
        "script:",
        "  - pytest-distbench export run.json --format bencher -o bmf.json",
        "  - bencher run --adapter json --file bmf.json",
        "```",
        "```",
        "- pytest --distbench -k c   (a list item outside YAML is prose)",
        "```",
    ])
    found = commands_in(markdown, "ci.md")
    assert [c.source for c in found] == ["ci.md:3", "ci.md:6", "ci.md:9"]
    assert [c.argv[:3] for c in found] == [["pytest", "--distbench", "-k"],
                                           ["pytest", "--distbench", "-k"],
                                           ["pytest-distbench", "export", "run.json"]]
    assert found[1].argv[-1] == "b"


def test_commands_that_cannot_run_here_say_where_they_are_exercised() -> None:
    elsewhere = [c for c in COMMANDS if where_not(c)]
    assert all(c.argv[0] in ("srun", "mpirun", "mpiexec", "torchrun", "pytest")
               for c in elsewhere)
    runnable_here = [c for c in COMMANDS if not where_not(c)]
    assert len(runnable_here) >= 3 * len(elsewhere)


def test_a_whole_sweep_with_a_narrowed_twin_joins_the_extended_set() -> None:
    found = commands_in("\n".join([
        "```",
        "pytest --distbench --world-size=2 --pyargs s -k rpc",
        "pytest --distbench --world-size=2 --pyargs s -k rpc --tensor-size=4B --distbench-budget=1",
        "pytest --distbench --world-size=3 --pyargs s -k rpc",
        "```",
    ]), "doc.md")
    whole, narrowed, other = found
    assert narrower_twin(whole, found) is narrowed
    assert narrower_twin(narrowed, found) is None  # it chose its sizes: it is the twin
    assert narrower_twin(other, found) is None  # another world size is not the same words


def test_every_extended_command_is_still_in_the_docs() -> None:
    words = {" ".join(c.argv) for c in COMMANDS}
    assert [w for w in EXTENDED if w not in words] == []
