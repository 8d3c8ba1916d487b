"""Every built-in family at odd world sizes (3 and 5), in count, budget and duration modes,
and one test of each family under torchrun and under xdist: every figure passes the physical
sanity rules (a record that broke one would fail its test), every family shows its table.

One session per mode runs every suite at 3 and 5 ranks with the smallest sizes; the RPC pair
benchmarks run at their own size inside the request, and skips must name their reason.
"""

from __future__ import annotations

import json
import shutil

import pytest

SUITES = ("--pyargs", "pytest_distbench.suites")
SMALL = ("--tensor-size=1KiB", "--distbench-credits=1", "--distbench-store-clients=8",
         "--distbench-episodes=2", "--distbench-steps=5", "--distbench-timeout=180")
# Families every session must show, by the record's family field.
FAMILIES = {"all_reduce", "all_gather", "broadcast", "reduce_scatter", "p2p_latency",
            "p2p_bandwidth", "message_rate", "store_init", "rpc_latency", "agent_observer"}
MODES = {
    "count": ("--distbench-iterations=3", "--distbench-warmup=1"),
    "budget": ("--distbench-budget=0.05s", "--distbench-min-iterations=3",
               "--distbench-warmup=1"),
    "duration": ("--distbench-duration=0.5s", "--distbench-warmup=1"),
}


def _records(path):
    return [b["distbench"] for b in json.loads(path.read_text())["benchmarks"]]


def _check_session(result, out, world_sizes):
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) > 0 and not outcomes.get("failed") and not outcomes.get(
        "errors"), result.stdout.str()[-8000:]
    records = _records(out)
    assert not [r["name"] for r in records if r.get("invalid")]
    for ws in world_sizes:
        seen = {r["family"].split("::")[0] for r in records if r["world_size"] == ws}
        seen |= {r["family"] for r in records if r["world_size"] == 2}  # RPC pairs run at 2
        missing = {f for f in FAMILIES if not any(s.startswith(f) for s in seen)}
        assert not missing, f"ws{ws}: no records of {sorted(missing)}"
    for r in records:
        if r.get("timed_ranks") is not None:
            assert len(r["timed_ranks"]) < r["world_size"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_family_at_three_and_five_ranks(pytester, distbench_run, mode):
    out = pytester.path / "odd.json"
    result = distbench_run("--distbench", "--world-size=3,5", *SUITES, *SMALL, *MODES[mode],
                           f"--distbench-json={out}", timeout=1500)
    _check_session(result, out, (3, 5))


ONE_OF_EACH = ("test_all_reduce and 1KiB or test_p2p_latency or "
               "(test_message_rate and computation_to_computation and not rpc) or "
               "(test_store_init and legacy) or test_rpc_latency or "
               "test_agent_observer")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun not on PATH")
def test_one_of_each_family_under_torchrun_at_three_ranks(pytester, leak_tag):
    out = pytester.path / "torchrun.json"
    result = pytester.run(
        "torchrun", "--standalone", "--nproc-per-node=3", "-m", "pytest", "-p",
        "no:cacheprovider", "--distbench", *SUITES, "-k", ONE_OF_EACH, *SMALL,
        *MODES["count"], f"--distbench-json={out}", timeout=900)
    assert result.ret == 0, result.stdout.str()[-8000:]
    records = _records(out)
    assert not [r["name"] for r in records if r.get("invalid")]
    assert {r["world_size"] for r in records} == {3}


@pytest.mark.slow
def test_one_of_each_family_under_xdist_at_three_ranks(pytester, distbench_run):
    out = pytester.path / "xdist.json"
    result = distbench_run("-n", "2", "--distbench", "--world-size=3", *SUITES, "-k",
                           ONE_OF_EACH, *SMALL, *MODES["count"], f"--distbench-json={out}",
                           timeout=900)
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) > 0 and not outcomes.get("failed"), result.stdout.str()
    assert not [r["name"] for r in _records(out) if r.get("invalid")]
