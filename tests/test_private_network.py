"""--distbench-private-network: a local world (its store, forkserver and ranks) in a network
namespace of its own, unreachable from the host's loopback (docs/failure-model.md, "Local
users"). Without it any local process reaches the world's store and ranks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

# Rank 0 leaves the world's store port and its network namespace in a file; a plain test
# that runs next, in the controller, tries that port from the host's loopback while the world
# is still up (idle worlds are kept for the next test).
PROBE = """
import os, socket, pytest, torch, torch.distributed as dist
from pathlib import Path

@pytest.mark.distbench
def test_world(distbench, tcp_store):
    tcp_store.set("secret", "kept")
    if distbench.rank == 0:
        port = tcp_store.underlying_store.port
        Path("probe").write_text(f"{port} {os.readlink('/proc/self/ns/net')}")
    x = torch.ones(4)
    dist.all_reduce(x)
    assert x[0].item() == distbench.world_size

@pytest.mark.distbench
def test_baseline_world(distbench):
    dist.barrier()

def test_from_the_host():
    port, namespace = Path("probe").read_text().split()
    try:
        socket.create_connection(("127.0.0.1", int(port)), timeout=5).close()
        reached = True
    except OSError:
        reached = False
    print(f"REACHED={reached} SAME_NAMESPACE={namespace == os.readlink('/proc/self/ns/net')}")
"""


def _namespaces_allowed() -> bool:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        from pytest_distbench.harness.local.netns import PrivateNetwork
        PrivateNetwork().close()
    """)], capture_output=True)
    return done.returncode == 0


@pytest.mark.parametrize("private", [False, True], ids=["host-loopback", "private"])
def test_private_network_hides_the_world_from_the_host(pytester, distbench_run, private):
    if private and not _namespaces_allowed():
        pytest.skip("this machine does not allow a network namespace (needs CAP_SYS_ADMIN)")
    pytester.makepyfile(textwrap.dedent(PROBE))
    # The switch alone, or its ini key saying false (a switch takes no value on the command
    # line: it would take the next argument).
    args = ["--distbench", "--world-size=2", "-s", "-p", "no:randomly",
            *(["--distbench-private-network"] if private
              else ["-o", "distbench_private_network=false"])]
    result = distbench_run(*args)
    result.assert_outcomes(passed=3)
    expected = "REACHED=False SAME_NAMESPACE=False" if private else (
        "REACHED=True SAME_NAMESPACE=True")
    result.stdout.fnmatch_lines([f"*{expected}*"])


def test_ab_variants_share_the_private_network(pytester, distbench_run):
    # The baseline's own forkserver starts in the namespace too, or its ranks could not reach
    # the store.
    if not _namespaces_allowed():
        pytest.skip("this machine does not allow a network namespace (needs CAP_SYS_ADMIN)")
    pytester.makepyfile(textwrap.dedent("""
        import pytest, torch, torch.distributed as dist

        @pytest.mark.distbench
        def test_work(distbench):
            x = torch.ones(4)
            distbench.measure(lambda: dist.all_reduce(x), nbytes=16)
    """))
    result = distbench_run("--distbench", "--world-size=2", "--distbench-private-network",
                           "--distbench-baseline-env=AB_MARK=1", "--distbench-rounds=2",
                           "--distbench-budget=0.05s")
    result.assert_outcomes(passed=1)


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
@pytest.mark.skipif(os.geteuid() != 0, reason="drops a capability root has")
def test_a_machine_without_namespaces_says_so_in_one_line(pytester, leak_tag):
    pytester.makepyfile("def test_nothing():\n    pass\n")
    done = subprocess.run(
        ["setpriv", "--bounding-set", "-sys_admin", sys.executable, "-m", "pytest",
         "-p", "no:cacheprovider", "--distbench", "--distbench-private-network"],
        cwd=pytester.path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 4, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == ["ERROR: --distbench-private-network: this machine does not allow a "
                     "private network namespace: unshare(CLONE_NEWNET) failed (Operation not "
                     "permitted): needs CAP_SYS_ADMIN: run as root or in a container that "
                     "grants it"], done.stderr


def test_a_marker_cannot_ask_for_it(pytester, distbench_run):
    pytester.makepyfile(textwrap.dedent("""
        import pytest

        @pytest.mark.distbench(private_network=True)
        def test_marked(distbench):
            pass
    """))
    result = distbench_run("--distbench", "--world-size=2")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*private_network holds for the whole session: give it on "
                                 "the command line or in the ini file*"])
