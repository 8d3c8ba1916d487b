"""The suite's forked pytest sessions behave as subprocess ones do (tests/zygote.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from zygote import PLAIN_SUBPROCESS_VARIABLE, ZygotePool


def test_a_session_gets_its_directory_environment_cpus_and_output(pytester, monkeypatch):
    pytester.makepyfile("""
        import os, sys

        def test_sees_what_it_was_given():
            print("cwd", os.getcwd())
            print("marker", os.environ["ZYGOTE_MARKER"])
            import tempfile
            print("tmp", tempfile.gettempdir())
            print("cpus", sorted(os.sched_getaffinity(0)))
            print("to stderr", file=sys.stderr)
            assert False, "failing on purpose"
    """)
    monkeypatch.setenv("ZYGOTE_MARKER", "seen")
    tmp = pytester.mkdir("own-tmp")  # TMPDIR is read anew, as a new interpreter would
    monkeypatch.setenv("TMPDIR", str(tmp))
    cpu = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    finally:
        os.sched_setaffinity(0, before)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"*cwd {pytester.path}", "marker seen", f"tmp {tmp}",
                                 f"cpus [[]{cpu}[]]",
                                 "*failing on purpose*"])
    assert "to stderr" in result.stderr.str()


def test_a_session_past_its_timeout_is_killed_and_the_next_one_runs(tmp_path, monkeypatch):
    monkeypatch.delenv(PLAIN_SUBPROCESS_VARIABLE, raising=False)
    pool = ZygotePool()
    try:
        (tmp_path / "test_sleeps.py").write_text(
            "import time\n\ndef test_sleeps():\n    time.sleep(60)\n")
        argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
        with pytest.raises(subprocess.TimeoutExpired):
            pool.run_command(argv, cwd=tmp_path, env=dict(os.environ), timeout=1)
        (tmp_path / "test_sleeps.py").write_text("def test_quick():\n    pass\n")
        done = pool.run_command(argv, cwd=tmp_path, env=dict(os.environ), timeout=60)
        assert done.returncode == 0 and "1 passed" in done.stdout
        # One interpreter served both; its spare (a fork, kept for a session run beside
        # another) served none.
        assert [z.process is not None for z in pool.all] == [True, False]
    finally:
        pool.close()
    assert not any(z.alive() for z in pool.all)


def test_sessions_side_by_side_fork_from_one_interpreter_and_none_is_left(tmp_path,
                                                                           monkeypatch):
    """A pool runs sessions at once from spares forked from its one zygote (the documented
    commands run three at a time): one torch import, not one per zygote; closed, not a
    zygote is left, not even unreaped."""
    import threading

    monkeypatch.delenv(PLAIN_SUBPROCESS_VARIABLE, raising=False)
    pool = ZygotePool()
    (tmp_path / "test_waits.py").write_text(
        "import os, time\n\ndef test_waits():\n    time.sleep(1)\n"
        "    print('session', os.getpid(), os.getppid())\n")
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-s"]
    done = []
    try:
        runs = [threading.Thread(target=lambda: done.append(pool.run_command(
            argv, cwd=tmp_path, env=dict(os.environ), timeout=120))) for _ in range(3)]
        for run in runs:
            run.start()
        for run in runs:
            run.join()
        assert [d.returncode for d in done] == [0, 0, 0], [d.stdout for d in done]
        parents = {int(d.stdout.split("session ")[1].split()[1]) for d in done}
        zygotes = {z.pid for z in pool.all}
        assert len(parents) == 3 and parents <= zygotes  # three zygotes served at once
        assert sum(z.process is not None for z in pool.all) == 1  # one new interpreter
    finally:
        pool.close()
    for pid in zygotes:
        assert not os.path.exists(f"/proc/{pid}"), pid


def test_a_session_runs_its_exit_handlers(pytester, tmp_path):
    marker = tmp_path / "exit-handler-ran"
    pytester.makeconftest(f"""
        import atexit, pathlib
        atexit.register(pathlib.Path({str(marker)!r}).touch)
    """)
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == 0
    assert marker.exists()


def test_the_forkserver_forked_for_a_session_preloads_what_the_plugins_would():
    from zygote import FORKSERVER_PRELOAD

    from pytest_distbench.harness.local.world import PRELOAD

    assert FORKSERVER_PRELOAD == PRELOAD
