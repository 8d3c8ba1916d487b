"""Every way a user runs the plugin, at the product's defaults: no iteration count, no revisit,
round or precision option, the revisits on as a user has them (the rest of the suite's child
sessions run with them off, tests/conftest.py).

Each mode runs the same user's file of two `distbench.measure` tests and must pass both, print
one results table (rank 0's alone under a launcher) and write one results file holding both
benchmarks with their `p50_ci`. Under torchrun, srun and mpirun this failed at the defaults
while every launcher test with an iteration count passed (a nested field lost on the store).
"""

from __future__ import annotations

import socket
import textwrap

import pytest
from launching import (
    PYTEST,
    TORCHRUN,
    free_port,
    launch,
    read_results,
    run_all,
    torchrun_node,
)

from conftest import PLUGINS_OFF
from pytest_distbench.harness.launcher import runkey

USER_FILE = textwrap.dedent("""
    import torch, torch.distributed as dist

    def test_all_reduce_default(distbench):
        x = torch.ones(256)
        distbench.measure(lambda: dist.all_reduce(x), nbytes=1024)

    def test_broadcast_default(distbench):
        x = torch.ones(4096)
        distbench.measure(lambda: dist.broadcast(x, 0), nbytes=16384)
""")
TESTS = ("test_all_reduce_default", "test_broadcast_default")


@pytest.fixture
def user_file(pytester, monkeypatch, leak_tag):
    """The user's file, and child sessions with the product's own defaults."""
    monkeypatch.setenv("PYTEST_ADDOPTS", PLUGINS_OFF)
    pytester.makepyfile(test_user=USER_FILE)
    return pytester


def _local(path, out, *extra: str) -> list[str]:
    done = run_all([(PYTEST + ["--distbench", "--world-size=2", "test_user.py",
                               f"--distbench-json={out}", *extra], {})], path, timeout=240)
    return [done[0].returncode, done[0].output]


def _check(code: int, output: str, out, quiet: list[str] = ()) -> dict[str, dict]:
    assert code == 0, output
    assert "2 passed" in output, output
    assert output.count("distbench results") == 1, output
    assert all(not q.strip() for q in quiet), quiet  # the other ranks' results reached rank 0
    records = {b["distbench"]["id"].split("::")[-1].split("[")[0]: b["distbench"]
               for b in read_results(out)["benchmarks"]}
    assert sorted(records) == list(TESTS), records.keys()
    for record in records.values():
        ci = record["p50_ci"]
        assert ci["low"] <= record["summary"]["p50"] <= ci["high"], ci
        assert record["iterations"] >= 1 and len(record["samples"]) == record["iterations"]
    return records


def _check_launched(records: dict[str, dict], out, launcher: str) -> None:
    environment = read_results(out)["distbench"]["environment"]
    assert environment["launcher"]["name"] == launcher
    assert environment["launcher"]["ranks_per_host"] == {socket.gethostname(): 2}
    # No job secret given: the results say the seal is the exchange's, and what that means.
    assert environment["launcher"]["seal"] == runkey.HELD[False]
    for record in records.values():
        assert record["placement"] == "launcher" and len(record["rank_samples"]) == 2
        # Budget-bound, as a user's run is: the precision stop is recorded, typed, whole.
        assert record["precision"]["stopped_by"] in ("precision", "budget", "noise")
        assert record["p50_ci"]["noise_missing"] == "launcher"


def test_local_at_the_defaults(user_file):
    out = user_file.path / "local.json"
    code, output = _local(user_file.path, out)
    records = _check(code, output, out)
    assert " ".join(output.split()).count("widened by the run-to-run noise measured below") == 1
    for record in records.values():  # the revisits ran: the ± holds the run-to-run noise
        assert record["p50_ci"]["basis"] == "session" and not record["p50_ci"].get(
            "noise_missing"), record["p50_ci"]


def test_xdist_at_the_defaults(user_file):
    out = user_file.path / "xdist.json"
    _check(*_local(user_file.path, out, "-n", "2"), out)


def test_ab_at_the_defaults(user_file):
    out = user_file.path / "ab.json"
    records = _check(*_local(user_file.path, out, "--distbench-baseline-env=DISTBENCH_AB=1"),
                     out)
    for record in records.values():
        # The default --distbench-rounds, and 20 or 40 more where they left a regression open.
        assert record["ab"]["rounds"] in (20, 40, 60), record["ab"]


def test_torchrun_one_node_at_the_defaults(user_file):
    out = user_file.path / "torchrun.json"
    [done] = run_all([(TORCHRUN + ["--standalone", "--nproc-per-node=2", "-m", "pytest",
                                   "-p", "no:cacheprovider", "--distbench", "test_user.py",
                                   f"--distbench-json={out}"], {})],
                     user_file.path, timeout=240)
    _check_launched(_check(done.returncode, done.output, out), out, "torchrun")
    # No revisits under a launcher: the legend promises no run-to-run noise.
    said = " ".join(done.output.split())
    assert "the run's own sampling interval: no run-to-run noise was measured" in said
    assert "widened by the run-to-run noise" not in said


def test_torchrun_two_nodes_at_the_defaults(user_file):
    """Two torchrun agents, one per "node", meet at a c10d rendezvous and form one world."""
    out = user_file.path / "nodes.json"
    port = free_port()

    args = ["--distbench", "test_user.py", f"--distbench-json={out}"]
    nodes = run_all([(torchrun_node(port, 1, "defaults", args), {}),
                     (torchrun_node(port, 0, "defaults", args), {})], user_file.path, timeout=300)
    reporting = [n for n in nodes if "test session starts" in n.output]
    assert len(reporting) == 1, "\n".join(n.output for n in nodes)
    quiet = [n.output for n in nodes if n is not reporting[0]]
    assert [n.returncode for n in nodes] == [0, 0], "\n".join(n.output for n in nodes)
    records = _check(0, reporting[0].output, out)
    assert all("distbench results" not in q for q in quiet)
    _check_launched(records, out, "torchrun")


@pytest.mark.parametrize("kind", ["slurm", "openmpi"])
def test_srun_and_mpirun_at_the_defaults(user_file, kind):
    out = user_file.path / f"{kind}.json"
    ranks = launch(user_file.path, kind, 2, ["--distbench", "test_user.py",
                                             f"--distbench-json={out}"])
    assert [r.returncode for r in ranks] == [0, 0], ranks[0].output + ranks[1].output
    _check_launched(_check(0, ranks[0].output, out, quiet=[ranks[1].output]), out, kind)
