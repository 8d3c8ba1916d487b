"""The RPC suites through the plugin, with real ranks, real TensorPipe agents and gloo."""

from __future__ import annotations

import json
import statistics

import pytest

FAST = ("--distbench-iterations=5", "--distbench-warmup=1")


def _records(path):
    document = json.loads(path.read_text())
    return document, [b["distbench"] for b in document["benchmarks"]]


def _checks_shown(out: str) -> set[str]:
    """The RPC checks the header names: the ok ones on one line (without -v), the others each
    on its own line with its message."""
    shown = set()
    for line in out.splitlines():
        if line.startswith("distbench rpc checks ok: "):
            shown |= set(line.removeprefix("distbench rpc checks ok: ").split(", "))
        elif line.startswith("distbench rpc check "):
            shown.add(line.removeprefix("distbench rpc check ").split(":")[0])
    return shown


@pytest.mark.slow
def test_latency_throughput_and_transports(pytester, distbench_run):
    out_file = pytester.path / "rpc.json"
    result = distbench_run(
        "--distbench", "--pyargs", "pytest_distbench.suites", "--world-size=2",
        "-k", "rpc_latency or rpc_throughput or transports", "--tensor-size=4B,64KiB",
        "--distbench-credits=1,8", f"--distbench-json={out_file}", *FAST)
    # 2 latency + 4 throughput + 3 CPU transports x 2 sizes; the 3 GPU transports x 2 skip.
    result.assert_outcomes(passed=12, skipped=6)
    out = result.stdout.str()
    assert _checks_shown(out) == {"rdma_fork", "container_ipc", "gdr_small_payload"}
    assert "times are ROUND TRIPS" in out and "round trip p50 (us)" in out
    assert "MB/s (payload one way)" in out
    result.stdout.fnmatch_lines([
        "# rpc_transports  backend=gloo  ranks=2  device=cpu  | round trip: p50 of the slowest "
        "rank per iteration ± 95 % CI",
        "*transport (round trip, ms)*4 B*64 KiB*why skipped*",
        "*",
        "*tensorpipe-shm*",
        "*tensorpipe-uv*",
        "*gloo*",
        "*nccl*skipped*skipped*",
        "*tensorpipe-cuda_ipc*skipped*skipped*GPU*",
        "*tensorpipe-cuda_basic*skipped*skipped*GPU*",
    ])
    document, records = _records(out_file)
    assert len(document["distbench"]["environment"]["rpc_checks"]) == 3
    by_family: dict[str, list[dict]] = {}
    for r in records:
        by_family.setdefault(r["family"], []).append(r)
    assert {len(v) for v in by_family.values()} == {2, 4, 6}
    for r in by_family["rpc_latency"]:
        f = r["figures"]
        assert f["direction"] == "round trip" and f["messages_per_iteration"] == 1
        assert f["bytes_per_iteration"] == 2 * r["nbytes"]
        driver_p50 = statistics.median(r["rank_samples"][0])
        assert abs(f["mbps"] - 2 * r["nbytes"] / driver_p50 / 1e6) < 1e-9 * f["mbps"] + 1e-12
        assert r["wrong"] == 0
    for r in by_family["rpc_throughput"]:
        f = r["figures"]
        assert f["messages_per_iteration"] == max(32, 4 * f["credits"])
        assert f["direction"] == "one way"
        assert r["params"]["credits"] == f["credits"]
    transports = {r["figures"]["transport"] for r in by_family["rpc_transports"]}
    assert transports == {"tensorpipe-shm", "tensorpipe-uv", "gloo"}
    assert all(r["wrong"] == 0 for r in by_family["rpc_transports"])


@pytest.mark.slow
def test_agent_observer_sweep_reports_the_four_metrics(pytester, distbench_run):
    out_file = pytester.path / "ao.json"
    result = distbench_run(
        "--distbench", "--pyargs", "pytest_distbench.suites", "--world-size=4",
        "-k", "agent_observer", "--distbench-batch=true,false", "--distbench-episodes=2",
        "--distbench-steps=5", "--distbench-state-size=3-4", f"--distbench-json={out_file}")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    result.stdout.fnmatch_lines([
        "---------", "Benchmark", "world_size : 4", "batch : True", "state_size : 3-4",
        "*", "*", "*", "agent latency -- {50: *, 75: *, 90: *, 95: *}", "",
        "agent throughput -- {50: *", "", "observer latency -- {50: *", "",
        "observer throughput -- {50: *",
    ])
    assert "batch : False" in out
    _, records = _records(out_file)
    assert len(records) == 4
    for r in records:
        f = r["figures"]
        assert r["family"] == "agent_observer" and r["world_size"] == 4
        assert set(f["metrics"]) == {"agent_latency_s", "agent_throughput",
                                     "observer_latency_s", "observer_throughput"}
        for values in f["metrics"].values():
            assert list(values) == ["p50", "p75", "p90", "p95"]
        observers = 2
        if f["metric"] == "observer_latency":
            assert r["iterations"] == observers * 2 * 5
        else:  # one agent latency per batch, or per request without batching
            assert r["iterations"] == (2 * 5 if f["batch"] else observers * 2 * 5)
        assert f["batch_size"] == (observers if f["batch"] else 1)


def test_a_raising_rpc_handler_fails_with_the_peers_traceback_and_the_next_test_runs(
        pytester, distbench_run):
    pytester.makepyfile(
        """
        import os
        import torch.distributed.rpc as rpc
        from pytest_distbench.families.rpc.harness import echo, fail_in_handler

        def test_handler_raises(distbench, rpc_agent):
            if rpc_agent.rank == 0:
                rpc.rpc_sync(rpc_agent.worker_names[1], fail_in_handler,
                             args=("boom from the peer",))

        def test_next_one_runs(distbench, rpc_agent):
            assert os.environ["GLOO_SOCKET_IFNAME"] == os.environ["TP_SOCKET_IFNAME"]
            if rpc_agent.rank == 0:
                assert rpc.rpc_sync(rpc_agent.worker_names[1], echo, args=(5,)) == 5
        """
    )
    result = distbench_run("--distbench", "--world-size=2")
    result.assert_outcomes(failed=1, passed=1)
    assert _checks_shown(result.stdout.str()) == {"rdma_fork", "container_ipc",
                                                  "gdr_small_payload"}
    result.stdout.fnmatch_lines([
        "*rank 0 raised:*",
        "*test_handler_raises*",
        "*boom from the peer*",
    ])
    assert "fail_in_handler" in result.stdout.str()  # the peer's own frame
