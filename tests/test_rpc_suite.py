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
    """The RPC checks the header names, each on its own line with its message (the ok ones
    under -v only)."""
    shown = set()
    for line in out.splitlines():
        if line.startswith("distbench rpc check "):
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
    assert _checks_shown(out) == set()  # each found nothing on this machine: -v shows them
    assert "times are ROUND TRIPS" in out and "round trip p50 (us)" in out
    assert "MB/s (payload one way)" in out
    result.stdout.fnmatch_lines([
        "# rpc_transports  backend=gloo  ranks=2  device=cpu  | round trip: p50 of the slowest "
        "rank per iteration ± 95 % CI",
        "*transport (round trip, ms)*4 B*64 KiB",
        "*",
        "*tensorpipe-shm*",
        "*tensorpipe-uv*",
        "*gloo*",
        "# p50 ± 95 % CI of the round trip*",
        "# nccl: skipped, *",
        "# tensorpipe-cuda_ipc: skipped, *GPU*",
        "# tensorpipe-cuda_basic: skipped, *GPU*",
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
        "-v", "-k", "agent_observer", "--distbench-batch=true,false", "--distbench-episodes=2",
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
        # Unpinned, as upstream's spawned processes are (the suite's default placement).
        assert r["placement"] == "none"
    # The seed's block prints latencies that can be read (0.58 ms is not "0.001").
    block = [ln for ln in out.splitlines() if ln.startswith("agent latency -- {50: ")][0]
    assert float(block.split("{50: ")[1].split(",")[0]) > 0 and "{50: 0.001," not in block


def test_a_raising_rpc_handler_fails_with_the_peers_traceback_and_the_next_test_runs(
        pytester, distbench_run):
    pytester.makepyfile(
        """
        import os
        import torch.distributed.rpc as rpc
        from pytest_distbench.families.rpc.common import echo, fail_in_handler

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
    result = distbench_run("-v", "--distbench", "--world-size=2")
    result.assert_outcomes(failed=1, passed=1)
    assert _checks_shown(result.stdout.str()) == {"rdma_fork", "container_ipc",
                                                  "gdr_small_payload"}  # ok: under -v
    result.stdout.fnmatch_lines([
        "*rank 0 raised:*",
        "*test_handler_raises*",
        "*boom from the peer*",
    ])
    assert "fail_in_handler" in result.stdout.str()  # the peer's own frame


# The agent/observer's work per step is the seed's (pytorch/pytorch
# benchmarks/distributed/rpc/rl: agent.py, observer.py), checked in one process: the handlers
# are plain functions of the agent behind its RRef, so a stand-in RRef drives them.


class _Ref:
    def __init__(self, value=None):
        self.value = value

    def local_value(self):
        return self.value

    def owner(self):
        return "agent"


def _agent(observers, batch, state_size=(2, 3), nlayers=2, out_features=4):
    from pytest_distbench.families.rpc.agent_observer import Agent

    agent = Agent(observers, batch, state_size, nlayers, out_features)
    seen = []
    agent.policy.register_forward_pre_hook(lambda _module, args: seen.append(args[0]))
    return agent, seen


def test_the_policy_is_the_seeds_and_normalises_over_dim_0():
    import torch
    from torch import nn

    from pytest_distbench.families.rpc.agent_observer import build_policy

    policy = build_policy((10, 20, 10), 5, 10)
    linears = [m for m in policy if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(2000, 10)] + [(10, 10)] * 5
    assert isinstance(policy[-1], nn.Softmax) and policy[-1].dim == 0
    probs = policy(torch.rand(8, 10, 20, 10))
    assert probs.shape == (8, 10)
    assert torch.allclose(probs.sum(dim=0), torch.ones(10))  # over the batch, as the seed


def test_batching_answers_every_observer_once_per_step_inside_the_timed_region():
    import time

    import torch

    from pytest_distbench.families.rpc.agent_observer import Agent

    agent, seen = _agent(3, True)
    ref = _Ref(agent)
    for step in range(2):
        # A slow answer: the seed stops the clock after the step's future has run every
        # observer's callback, so the step's latency includes it.
        agent.actions.then(lambda _fut: time.sleep(0.05))
        states = torch.rand(3, 2, 3)
        answers = [Agent.select_batch(ref, slot, states[slot]) for slot in range(2)]
        assert not any(a.done() for a in answers) and len(agent.latencies) == step
        answers.append(Agent.select_batch(ref, 2, states[2]))
        assert all(a.done() for a in answers)
        assert all(isinstance(a.value(), int) and 0 <= a.value() < 4 for a in answers)
        assert len(agent.latencies) == step + 1 and agent.latencies[-1] >= 0.05
        assert torch.equal(seen[-1], states) and len(seen) == step + 1  # one forward a step
        assert agent.log_probs[-1].shape == (3,)
    assert len(agent.log_probs) == 2
    agent.end_episode([torch.zeros(5)] * 3)
    assert len(agent.log_probs) == 2  # kept across episodes, as the seed keeps them


def test_without_batching_each_request_is_one_forward_and_log_probs_are_kept_per_observer():
    import torch

    from pytest_distbench.families.rpc.agent_observer import Agent

    agent, seen = _agent(2, False)
    ref = _Ref(agent)
    actions = [Agent.select_one(ref, slot, torch.rand(2, 3, dtype=torch.float64))
               for slot in (0, 0, 1)]
    assert all(isinstance(a, int) and 0 <= a < 4 for a in actions)
    assert [(x.shape, x.dtype) for x in seen] == [((1, 2, 3), torch.float32)] * 3
    assert {slot: len(v) for slot, v in agent.log_probs.items()} == {0: 2, 1: 1}
    rewards = [torch.ones(3), torch.zeros(3)]
    assert len(agent.end_episode(rewards)) == 3 and agent.latencies == []
    Agent.select_one(ref, 1, torch.rand(2, 3))
    assert {slot: len(v) for slot, v in agent.log_probs.items()} == {0: 2, 1: 2}
    assert [len(v) for v in agent.rewards.values()] == [1, 1]
    assert torch.equal(agent.rewards[0][0], torch.ones(3))


def test_an_observer_sends_its_state_each_step_and_keeps_the_episodes_rewards(monkeypatch):
    import torch

    from pytest_distbench.families.rpc import agent_observer

    sent = []

    def fake_rpc_sync(to, fn, args):
        assert to == "agent" and fn is agent_observer.Agent.select_one
        sent.append(args)
        return 1

    monkeypatch.setattr(agent_observer.rpc, "rpc_sync", fake_rpc_sync)
    observer = agent_observer.Observer(3, (10, 20, 10), batch=False)
    rewards, latencies = observer.run_episode(_Ref(), 6)
    assert len(latencies) == 6 and len(sent) == 6
    assert all(slot == 3 and state.shape == (10, 20, 10) for _, slot, state in sent)
    assert all(not torch.equal(a[2], b[2]) for a, b in zip(sent, sent[1:], strict=False))
    assert rewards.shape == (6,) and set(rewards.tolist()) <= {0.0, 1.0}
