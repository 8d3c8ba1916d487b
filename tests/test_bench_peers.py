"""benchmarks/bench_peers.py: its pure parts (layouts, statistics, reading a results file, the
ratio table) and, marked slow, one quick round of real sessions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from scripts import loaded

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "bench_peers.py"


@pytest.fixture(scope="module")
def bp():
    with loaded(SCRIPT) as module:
        yield module


@pytest.mark.parametrize("name", ["all_reduce", "all_gather"])
@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("nbytes", [4, 64 << 10, 1 << 20, 16 << 20, 6])
def test_peer_layout_is_the_products(bp, name, world_size, nbytes):
    # The peer must move and report what the product moves and reports at the same request.
    from pytest_distbench.families.collectives.members import COLLECTIVES

    sizes = COLLECTIVES[name].sizes(nbytes, world_size, 4)
    n_in, n_out, reported, factor = bp.collective_layout(name, nbytes, world_size)
    assert reported == sizes.nbytes
    assert factor == pytest.approx(COLLECTIVES[name].busbw_factor(world_size))
    assert n_out == (n_in * world_size if name == "all_gather" else n_in)


def test_layout_examples(bp):
    assert bp.collective_layout("all_gather", 4, 4) == (1, 4, 16, 0.75)
    assert bp.collective_layout("all_reduce", 1 << 20, 2) == (262144, 262144, 1 << 20, 1.0)
    with pytest.raises(ValueError):
        bp.collective_layout("broadcast", 4, 2)


def test_percentile_and_slowest_rank(bp):
    assert bp.percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert bp.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert bp.percentile([5.0], 95) == 5.0
    assert bp.slowest_rank([[1.0, 5.0, 2.0], [2.0, 1.0, 2.5]]) == [2.0, 5.0, 2.5]
    with pytest.raises(ValueError):
        bp.slowest_rank([[1.0], [1.0, 2.0]])
    assert bp.summarize([1.0, 2.0, 6.0]) == {"p50_s": 2.0, "mean_s": 3.0, "n": 3}


def _record(family, ws, nbytes, p50, mean, params=None, figures=None, samples=None):
    return {"distbench": {
        "family": family, "world_size": ws, "nbytes": nbytes, "busbw_factor": 1.0,
        "params": params if params is not None else {"nbytes": nbytes},
        "summary": {"p50": p50, "mean": mean, "n": len(samples or [p50])},
        "samples": samples or [p50], "figures": figures or {}, "placement": "core"}}


def test_product_points_reads_a_results_document(bp):
    doc = {"distbench": {"schema_version": 1}, "benchmarks": [
        _record("all_gather", 2, 8, 0.001, 0.002, params={"nbytes": 4}),
        _record("p2p_bandwidth", 2, 100_000_000, 0.05, 0.06, samples=[0.05, 0.07],
                figures={"total_s": 0.12, "window": 1}),
        _record("store_init", 2, None, 5.0, 5.0,
                figures={"clients": 64, "server_backend": "legacy", "init_s": 5.0,
                         "slow_connects": 27, "connect_p50_s": 0.008, "handoff_s": [0, 0.01]}),
        _record("barrier", 2, None, 0.001, 0.001),
    ]}
    points = bp.product_points(doc)
    assert set(points) == {"all_gather ws2 4", "send_recv ws2 100000000",
                           "store_init 64 legacy"}
    assert points["all_gather ws2 4"]["nbytes"] == 8  # keyed by the request, reports the moved
    assert points["send_recv ws2 100000000"]["mean_s"] == pytest.approx(0.06)
    assert bp.headline("send_recv ws2 100000000", points["send_recv ws2 100000000"]) == 2000.0
    assert points["store_init 64 legacy"]["slow"] == 27
    with pytest.raises(ValueError, match="not a pytest-distbench"):
        bp.product_points({"benchmarks": []})


def test_ratio_rows_within_rounds_then_median_and_range(bp):
    def coll(p50, mean):
        return {"p50_s": p50 * 1e-6, "mean_s": mean * 1e-6, "n": 10}

    rounds = [
        {"product": {"all_reduce ws2 4": coll(200, 300), "store_init 64 libuv":
                     {"init_s": 5.0, "slow": 10}},
         "peer": {"all_reduce ws2 4": coll(100, 100), "store_init 64 libuv":
                  {"init_s": 10.0, "slow": 50}}},
        {"product": {"all_reduce ws2 4": coll(300, 300)},
         "peer": {"all_reduce ws2 4": coll(100, 150)}},
        {"product": {"all_reduce ws2 4": coll(100, 100), "all_gather ws2 4": coll(1, 1)},
         "peer": {"all_reduce ws2 4": coll(100, 100)}},
    ]
    rows = {r.key: r for r in bp.ratio_rows(rounds)}
    assert set(rows) == {"all_reduce ws2 4", "store_init 64 libuv"}  # one side only: no row
    ar = rows["all_reduce ws2 4"]
    assert ar.ratios == pytest.approx([2.0, 3.0, 1.0])
    assert (ar.ratio, ar.ratio_min, ar.ratio_max, ar.rounds) == pytest.approx((2.0, 1.0, 3.0, 3))
    assert ar.product == pytest.approx(200) and ar.peer == pytest.approx(100)
    assert ar.mean_ratio == pytest.approx(2.0)  # 3, 2, 1
    st = rows["store_init 64 libuv"]
    assert st.ratio == pytest.approx(0.5) and st.mean_ratio is None
    assert st.note == "slow>1s product:peer 10:50"
    table = bp.format_table(list(rows.values()))
    assert "all_reduce ws2 4" in table and "1.00-3.00" in table and "0.50-0.50" in table
    md = bp.markdown_table(list(rows.values()))
    assert md.count("\n") == 3 and "| 2.00 | 1.00-3.00 | 2.00 | 3 |" in md


def test_bandwidth_ratio_is_product_over_peer_of_mbps(bp):
    rounds = [{"product": {"send_recv ws2 100": {"p50_s": 1e-6, "mean_s": 2e-6, "nbytes": 100}},
               "peer": {"send_recv ws2 100": {"p50_s": 2e-6, "mean_s": 2e-6, "nbytes": 100}}}]
    (row,) = bp.ratio_rows(rounds)
    assert row.product == pytest.approx(100.0) and row.peer == pytest.approx(50.0)
    assert row.ratio == pytest.approx(2.0) and row.mean_ratio == pytest.approx(1.0)


def test_quick_config_and_bad_kinds(bp):
    import argparse

    ns = argparse.Namespace(rounds=3, rounds_given=False, quick=True, kinds="collectives",
                            store_clients=None, store_variants=None, product_bind=None,
                            peer_bind=None,
                            sizes=None, world_sizes=None)
    cfg = bp.config_from(ns)
    assert cfg.rounds == 2 and cfg.world_sizes == (2,) and cfg.kinds == ("collectives",)
    ns.kinds = "collectives,nope"
    with pytest.raises(SystemExit, match="nope"):
        bp.config_from(ns)


@pytest.mark.slow
def test_quick_run_collectives(tmp_path):
    """One round of the quick collectives: a real product session and a real peer."""
    out = tmp_path / "peers.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--rounds", "1",
                           "--kinds", "collectives", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr

    rows = {r["key"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {f"{c} ws2 {n}" for c in ("all_reduce", "all_gather")
                         for n in (4, 1 << 20)}
    for row in rows.values():
        assert row["product"] > 0 and row["peer"] > 0 and row["rounds"] == 1
    assert "all_reduce ws2 4" in done.stdout
