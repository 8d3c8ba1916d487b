"""The RPC environment checks against fake sysfs/proc trees."""

from __future__ import annotations

import os
from pathlib import Path

from pytest_distbench.harness.environment import pitfalls


def _tree(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _namespaces(root: Path, pid: str, ids: dict[str, int]) -> None:
    ns = root / "proc" / pid / "ns"
    ns.mkdir(parents=True)
    for kind in ("ipc", "pid", "mnt", "net"):
        os.symlink(f"{kind}:[{ids.get(kind, 4026531800)}]", ns / kind)


def test_rdma_devices_make_the_ranks_fork_safe(tmp_path):
    (tmp_path / "sys/class/infiniband/mlx5_0").mkdir(parents=True)
    (tmp_path / "sys/class/infiniband/mlx5_1").mkdir(parents=True)
    check = pitfalls.check_rdma_fork(tmp_path, environ={})
    assert check.status == "fixed"
    assert check.env == {"IBV_FORK_SAFE": "1", "RDMAV_FORK_SAFE": "1"}
    assert "mlx5_0, mlx5_1" in check.message and "IBV_FORK_SAFE=1" in check.message
    assert pitfalls.rank_env([check]) == check.env


def test_rdma_fork_keeps_the_users_values_and_is_quiet_without_devices(tmp_path):
    (tmp_path / "sys/class/infiniband/mlx5_0").mkdir(parents=True)
    user = pitfalls.check_rdma_fork(tmp_path, environ={"IBV_FORK_SAFE": "0"})
    assert user.env == {"RDMAV_FORK_SAFE": "1"}  # only the missing one is filled in
    empty = tmp_path / "empty"
    (empty / "sys/class/infiniband").mkdir(parents=True)
    assert pitfalls.check_rdma_fork(empty, environ={}).status == "ok"
    assert pitfalls.check_rdma_fork(tmp_path / "nothing", environ={}).env == {}


def test_same_boot_id_different_namespaces_warns_about_cuda_ipc(tmp_path):
    _tree(tmp_path, {"proc/sys/kernel/random/boot_id": "b00t\n"})
    _namespaces(tmp_path, "100", {"ipc": 1, "pid": 2})
    _namespaces(tmp_path, "200", {"ipc": 3, "pid": 4})
    check = pitfalls.check_container_ipc(tmp_path, [100, 200], environ={}, gpu_visible=True)
    assert check.status == "warn"
    assert "boot_id b00t" in check.message and "CUDA IPC" in check.message
    assert "pids 100" in check.message and "pids 200" in check.message


def test_shared_namespaces_outside_a_container_are_fine(tmp_path):
    _namespaces(tmp_path, "100", {})
    _namespaces(tmp_path, "200", {})
    check = pitfalls.check_container_ipc(tmp_path, [100, 200], environ={}, gpu_visible=True)
    assert check.status == "ok"


def test_a_container_with_a_gpu_warns_and_without_one_does_not(tmp_path):
    _tree(tmp_path, {".dockerenv": "", "proc/sys/kernel/random/boot_id": "b00t"})
    _namespaces(tmp_path, "100", {})
    with_gpu = pitfalls.check_container_ipc(tmp_path, [100], environ={}, gpu_visible=True)
    assert with_gpu.status == "warn" and "/.dockerenv" in with_gpu.message
    without = pitfalls.check_container_ipc(tmp_path, [100], environ={}, gpu_visible=False)
    assert without.status == "ok" and "no GPU" in without.message
    k8s = pitfalls.check_container_ipc(tmp_path / "x", [], {"KUBERNETES_SERVICE_HOST": "h"},
                                       gpu_visible=True)
    assert k8s.status == "warn"
    cgroup = _tree(tmp_path / "c", {"proc/1/cgroup": "0::/kubepods/burstable/pod1\n"})
    assert "kubepods" in pitfalls.check_container_ipc(cgroup, [], {}, True).message


def test_gpudirect_rdma_with_payloads_under_32_bytes_warns(tmp_path):
    (tmp_path / "sys/class/infiniband/mlx5_0").mkdir(parents=True)
    (tmp_path / "sys/module/nvidia_peermem").mkdir(parents=True)
    check = pitfalls.check_gdr_small_payloads(tmp_path, [4, 31, 32, 1024])
    assert check.status == "warn"
    assert "4 B, 31 B" in check.message and "32 B" not in check.message.split("(")[2]
    assert pitfalls.check_gdr_small_payloads(tmp_path, [32, 64]).status == "ok"


def test_no_gpudirect_without_the_module_or_without_rdma(tmp_path):
    (tmp_path / "sys/class/infiniband/mlx5_0").mkdir(parents=True)
    assert pitfalls.check_gdr_small_payloads(tmp_path, [4]).status == "ok"
    module_only = tmp_path / "m"
    (module_only / "sys/module/nv_peer_mem").mkdir(parents=True)
    assert pitfalls.check_gdr_small_payloads(module_only, [4]).status == "ok"


def test_run_checks_returns_all_three_with_json_able_records(tmp_path):
    checks = pitfalls.run_checks(root=tmp_path, environ={}, pids=[], sizes=[4])
    assert [c.name for c in checks] == ["rdma_fork", "container_ipc", "gdr_small_payload"]
    assert all(set(c.as_dict()) == {"name", "status", "message", "env"} for c in checks)
