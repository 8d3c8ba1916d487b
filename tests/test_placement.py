"""--distbench-bind: where a world's ranks and their threads may run, seen from inside the ranks."""

from __future__ import annotations

import json
import os

import pytest
from tables import unwrapped

from pytest_distbench.harness.local.world import rank_cpus
from pytest_distbench.settings import _bind, effective_bind

USABLE = sorted(os.sched_getaffinity(0))

# Each rank writes the CPUs every one of its threads may run on (by thread name), after the
# backend's threads exist.
AFFINITY_TEST = """
import json, os, torch, torch.distributed as dist

def test_where(distbench, rank):
    dist.all_reduce(torch.zeros(1))
    threads = {}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/comm") as f:
            name = f.read().strip()
        threads.setdefault(name, []).append(sorted(os.sched_getaffinity(int(tid))))
    main = sorted(os.sched_getaffinity(0))
    with open(f"where-{rank}.json", "w") as f:
        json.dump({"main": main, "threads": threads}, f)
    distbench.record([0.001])
"""


def test_auto_packs_cpu_worlds_in_ab_mode_only():
    assert effective_bind("auto", "cpu", ab_mode=True) == "pack"
    assert effective_bind("auto", "cpu", ab_mode=False) == "core"
    assert effective_bind("auto", "cuda", ab_mode=True) == "core"
    for explicit in ("core", "pack", "none"):
        assert effective_bind(explicit, "cpu", ab_mode=True) == explicit


def test_rank_cpus_per_binding():
    assert rank_cpus(0, "none") is None
    assert [rank_cpus(r, "pack") for r in range(3)] == [(USABLE[0],)] * 3
    assert [rank_cpus(r, "core") for r in range(3)] == [
        (USABLE[r % len(USABLE)],) for r in range(3)]


def test_bad_binding_names_the_choices():
    with pytest.raises(ValueError, match="auto, core, pack, none"):
        _bind("spread")


def where(pytester, world_size: int = 2) -> list[dict]:
    return [json.loads((pytester.path / f"where-{r}.json").read_text())
            for r in range(world_size)]


def placement(pytester) -> str:
    """The placement the results file records for the test's one measurement."""
    doc = json.loads((pytester.path / "run.json").read_text())
    return doc["benchmarks"][0]["distbench"]["placement"]


def test_pack_pins_every_thread_of_every_rank_to_one_cpu(pytester, distbench_run):
    pytester.makepyfile(test_where=AFFINITY_TEST)
    result = distbench_run("--distbench", "--world-size=2", "--distbench-bind=pack",
                           "--distbench-json=run.json")
    result.assert_outcomes(passed=1)
    assert placement(pytester) == "pack"
    # Absolute times depend on it, so the table's title says so (wrapped to 120 columns).
    assert ("# test_where  backend=gloo  ranks=2  device=cpu  (ranks packed on one CPU)  | "
            "time: p50 of the slowest rank per iteration ± 95 % CI"
            in unwrapped(result.stdout.str()))
    for rank in where(pytester):
        assert rank["main"] == [USABLE[0]]
        assert len(rank["threads"]) > 1, "the rank should have backend threads"
        for name, sets in rank["threads"].items():
            assert all(s == [USABLE[0]] for s in sets), (name, sets)


@pytest.mark.skipif(len(USABLE) < 2, reason="needs two usable CPUs")
def test_core_pins_only_the_main_thread_round_robin(pytester, distbench_run):
    pytester.makepyfile(test_where=AFFINITY_TEST)
    result = distbench_run("--distbench", "--world-size=2", "--distbench-bind=core")
    result.assert_outcomes(passed=1)
    for r, rank in enumerate(where(pytester)):
        assert rank["main"] == [USABLE[r]]
        # The backend's threads were started before the pin and stay free.
        gloo = [s for name, sets in rank["threads"].items() if name.startswith(("gloo", "pt_gloo"))
                for s in sets]
        assert gloo and all(s == USABLE for s in gloo), rank["threads"]


def test_default_outside_ab_mode_is_core(pytester, distbench_run):
    pytester.makepyfile(test_where=AFFINITY_TEST)
    result = distbench_run("--distbench", "--world-size=2", "--distbench-json=run.json")
    result.assert_outcomes(passed=1)
    assert placement(pytester) == "core"
    assert [rank["main"] for rank in where(pytester)] == [
        [USABLE[r % len(USABLE)]] for r in range(2)]
