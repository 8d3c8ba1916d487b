"""The environment fingerprint: what the controller and the ranks contribute."""

from __future__ import annotations

from pytest_distbench.results.environment import cpu_probe, merge_rank_facts, relevant_env


def test_rank_facts_add_gpus_and_nccl_only_when_ranks_saw_them():
    environment = {"gpus": [], "nccl": None}
    merge_rank_facts(environment, [
        {"backend": "nccl", "gpu": "NVIDIA H100", "nccl": "2.21.5"},
        {"backend": "nccl", "gpu": "NVIDIA H100", "nccl": "2.21.5"},
    ])
    assert environment == {"gpus": ["NVIDIA H100"], "nccl": "2.21.5"}
    cpu_only = {"gpus": [], "nccl": None}
    merge_rank_facts(cpu_only, [{"backend": "gloo", "device": "cpu"}])
    assert cpu_only == {"gpus": [], "nccl": None}


def test_relevant_env_keeps_communication_variables_only(monkeypatch):
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    monkeypatch.setenv("UNRELATED_SETTING", "x")
    env = relevant_env()
    assert env["NCCL_DEBUG"] == "INFO" and env["GLOO_SOCKET_IFNAME"] == "lo"
    assert "UNRELATED_SETTING" not in env


def test_cpu_probe_times_a_real_loop():
    assert 0 < cpu_probe() < 5
