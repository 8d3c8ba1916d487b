"""The forkserver ends without the interpreter's teardown; what it forks keeps its own exit."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from pytest_distbench.harness.local.world import PRELOAD

SCRIPT = textwrap.dedent("""
    import atexit, os, sys

    def teardown_ran():
        open(f"{sys.argv[1]}-{os.getpid()}", "w").close()

    atexit.register(teardown_ran)  # stands for torch's and the interpreter's own
    import pytest_distbench.harness.local.forkserver_exit  # what the forkserver preloads

    child = os.fork()
    if child == 0:
        sys.exit(3)  # a test body's own fork: its exit is its own
    _, status = os.waitpid(child, 0)
    print("child", os.waitstatus_to_exitcode(status), child, "parent", os.getpid())
""")


def test_the_forkserver_skips_the_teardown_and_its_forks_keep_their_status(tmp_path):
    assert "pytest_distbench.harness.local.forkserver_exit" in PRELOAD
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "teardown")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    _, status, child, _, parent = done.stdout.split()
    assert status == "3"
    # The fork ran the teardown (it is not the forkserver); the forkserver itself did not.
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"teardown-{child}"]
    assert not (tmp_path / f"teardown-{parent}").exists()
