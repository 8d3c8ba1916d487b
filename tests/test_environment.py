"""The environment fingerprint: what the controller and the ranks contribute."""

from __future__ import annotations

from pytest_distbench.results.document.environment import (
    cpu_idle,
    cpu_probe,
    merge_rank_facts,
    relevant_env,
)


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


def write(root, path: str, text: str) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text + "\n")


def test_cpu_idle_reads_the_driver_and_the_guest_halt_poll(tmp_path):
    write(tmp_path, "/sys/devices/system/cpu/cpuidle/current_driver", "haltpoll")
    write(tmp_path, "/sys/devices/system/cpu/cpuidle/current_governor_ro", "haltpoll")
    write(tmp_path, "/sys/module/haltpoll/parameters/guest_halt_poll_ns", "0")
    assert cpu_idle(str(tmp_path)) == {"driver": "haltpoll", "governor": "haltpoll",
                                       "guest_halt_poll_ns": 0}


def test_cpu_idle_on_bare_metal_and_where_sysfs_says_nothing(tmp_path):
    assert cpu_idle(str(tmp_path)) is None
    write(tmp_path, "/sys/devices/system/cpu/cpuidle/current_driver", "intel_idle")
    write(tmp_path, "/sys/devices/system/cpu/cpuidle/current_governor", "menu")
    assert cpu_idle(str(tmp_path)) == {"driver": "intel_idle", "governor": "menu"}
