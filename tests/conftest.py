"""Shared fixtures for the plugin's own tests.

Every pytester run gets a unique tag in its environment; rank processes inherit it, so after
each test any process still carrying the tag is a leak, whoever its parent is now.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest
from _pytest.pathlib import make_numbered_dir
from leaks import TAG_VARIABLE, processes_with_tag
from zygote import (
    LAUNCHER_PREFIXES,
    LAUNCHER_VARIABLES,
    ZygotePool,
    close_shared_pool,
    plain_subprocess,
    shared_pool,
)

from pytest_distbench.harness.launcher import jobsecret

# Where the environment sets PYTHONDONTWRITEBYTECODE (this VM does), pytest rewrote the
# asserts of every test module again in each xdist worker of every run: collection took
# 16 s of CPU a worker instead of 9. The rewritten modules go to the checkout's git-ignored
# __pycache__ folders, as they would without the variable.
sys.dont_write_bytecode = False

# A suite started in the background (`cmd &` in a script, nohup) inherits SIGINT ignored, and
# so would every session it starts: the tests that press Ctrl-C on a session would wait in
# vain (the product rightly leaves an ignored SIGINT ignored). Sessions under test start as
# from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    with contextlib.suppress(ValueError):  # not the main thread: nothing to restore there
        signal.signal(signal.SIGINT, signal.default_int_handler)

try:
    # pytester restores sys.modules after each test, dropping modules first imported during
    # it; numpy refuses a second import in one process ("cannot load module more than once"),
    # so a later test that needs it would fail depending on the order tests ran in.
    import numpy  # noqa: F401
except ImportError:
    pass



# Every pytest this suite starts (pytester sessions, documented commands, torchrun and xdist
# ranks) skips hypothesis's plugin: none of them uses it, and importing it is a third of a
# small session's start-up (docs/architecture.md, "The test suite's time"). And it runs no
# revisits (each stratum's points run 5 more times to measure the run-to-run noise): a test about
# the interval, the noise or the ± asks for them on its command line, which wins.
PLUGINS_OFF = "-p no:hypothesispytest"
CHILD_SESSION_OPTIONS = f"{PLUGINS_OFF} --distbench-revisits=0"


# What pytest-xdist tells its workers; a session under test that inherited them would take
# itself for an xdist worker (pytest-benchmark turns itself off in one).
XDIST_VARIABLES = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")


@pytest.fixture(scope="session", autouse=True)
def child_session_environment():
    with pytest.MonkeyPatch.context() as patch:
        saved = os.environ.get("PYTEST_ADDOPTS")
        patch.setenv("PYTEST_ADDOPTS", f"{saved or ''} {CHILD_SESSION_OPTIONS}".strip())
        for name in XDIST_VARIABLES:
            patch.delenv(name, raising=False)
        # A job secret of the developer's own would seal every launched session under test
        # (harness/launcher/jobsecret.py); the tests that want one set it.
        for name in (jobsecret.SECRET_ENV, jobsecret.SECRET_FILE_ENV):
            patch.delenv(name, raising=False)
        # What the sessions, ranks and commands under test import is compiled once, as on a
        # user's machine: a machine that sets PYTHONDONTWRITEBYTECODE (this VM does) made each
        # of them compile the plugin from source again (0.15 s of CPU per small session).
        patch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
        yield


@pytest.fixture(scope="session", autouse=True)
def zygotes():
    """Forks pytest sessions from an interpreter that imported torch once (tests/zygote.py);
    made at the session's start, so zygotes take its environment, not a test's."""
    yield shared_pool()
    close_shared_pool()


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
             zygotes: ZygotePool) -> pytest.Pytester:
    """pytester's own, with PYTEST_ADDOPTS set again after pytester clears it, and its
    subprocess sessions forked from a zygote."""
    monkeypatch.setenv("PYTEST_ADDOPTS", CHILD_SESSION_OPTIONS)
    if not plain_subprocess():
        def runpytest_subprocess(*args, timeout: float | None = None) -> pytest.RunResult:
            __tracebackhide__ = True
            return run_session(pytester, zygotes, args, timeout)

        monkeypatch.setattr(pytester, "runpytest_subprocess", runpytest_subprocess)
    return pytester


def run_session(pytester: pytest.Pytester, zygotes: ZygotePool, args, timeout) -> pytest.RunResult:
    """pytester.runpytest_subprocess's session (its --basetemp, -p plugins, output files, cwd
    on the path, timeout), forked from a zygote."""
    __tracebackhide__ = True
    basetemp = make_numbered_dir(root=pytester.path, prefix="runpytest-", mode=0o700)
    argv = [f"--basetemp={basetemp}", *(os.fspath(a) for a in args)]
    for plugin in pytester.plugins:
        argv = ["-p", plugin, *argv]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH", "")]))
    out, err = pytester.path / "stdout", pytester.path / "stderr"
    print("running (zygote):", sys.executable, "-mpytest", *argv)
    print("     in:", Path.cwd())
    began = time.monotonic()
    exited = zygotes.run(argv, cwd=Path.cwd(), env=env, stdout=out, stderr=err, timeout=timeout)
    if exited.timed_out:
        raise pytester.TimeoutExpired(f"{timeout} second timeout expired running: {argv}")
    stdout = out.read_text(encoding="utf8").splitlines()
    stderr = err.read_text(encoding="utf8").splitlines()
    for lines, stream in ((stdout, sys.stdout), (stderr, sys.stderr)):
        for line in lines:
            print(line, file=stream)
    code = exited.returncode
    with contextlib.suppress(ValueError):
        code = pytest.ExitCode(code)
    return pytest.RunResult(code, stdout, stderr, time.monotonic() - began)


@pytest.fixture
def leak_tag(monkeypatch: pytest.MonkeyPatch):
    """Tag the environment of child pytest sessions; fail if a tagged process outlives the test."""
    for name in list(os.environ):
        if name in LAUNCHER_VARIABLES or name.startswith(LAUNCHER_PREFIXES):
            monkeypatch.delenv(name)
    tag = uuid.uuid4().hex
    monkeypatch.setenv(TAG_VARIABLE, tag)
    yield tag
    deadline = time.monotonic() + 10
    left = processes_with_tag(tag)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = processes_with_tag(tag)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"processes left behind by the session under test: {left}"


# What a session runs with where the test is about the interval, the noise or the ±: the
# product's own default number of revisits (settings.py), which CHILD_SESSION_OPTIONS turns off.
WITH_REVISITS = "--distbench-revisits=5"


@pytest.fixture
def distbench_run(pytester: pytest.Pytester, leak_tag: str, request: pytest.FixtureRequest):
    """Run a real pytest session in a subprocess with the plugin, real ranks and a leak check
    (with the product's revisits where the test is marked `with_revisits`)."""
    revisits = (WITH_REVISITS,) if request.node.get_closest_marker("with_revisits") else ()

    def run(*args: str, timeout: float = 240) -> pytest.RunResult:
        return pytester.runpytest_subprocess("-p", "no:cacheprovider", *revisits, *args,
                                             timeout=timeout)

    return run


@pytest.fixture
def one_rank_group(tmp_path):
    """A one-rank gloo world in this process (its default group), for the measure loop and
    what runs on it without rank processes."""
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0,
                            world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()
