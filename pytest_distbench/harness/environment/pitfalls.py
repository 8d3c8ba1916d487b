"""Environment checks for torch.distributed.rpc (TensorPipe): pitfalls reported before they bite.

Each check reads only files under `root` (the real machine's "/" by default), so a test can
build a fake sysfs/proc tree and see the check fire.  The three pitfalls (from the users'
TensorPipe notes):

(a) RDMA devices and forked ranks: ibverbs memory registrations break in a forked child unless
    fork support is initialised; IBV_FORK_SAFE=1 and RDMAV_FORK_SAFE=1 make libibverbs do it.
(b) Containers: TensorPipe takes two processes with the same boot_id for one machine and tries
    CUDA IPC between them; across container (namespace) boundaries that fails and the agent
    errors out.
(c) GPUDirect RDMA with payloads under 32 bytes can crash TensorPipe (pytorch/pytorch#57136).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FORK_SAFE_ENV = {"IBV_FORK_SAFE": "1", "RDMAV_FORK_SAFE": "1"}
GDR_MIN_SAFE_BYTES = 32
# Kernel modules that give a NIC direct access to GPU memory (GPUDirect RDMA).
_GDR_MODULES = ("nvidia_peermem", "nv_peer_mem")
_NAMESPACES = ("ipc", "pid", "mnt", "net")
_CONTAINER_CGROUP_HINTS = ("docker", "kubepods", "containerd", "lxc", "libpod", "crio")


@dataclass(frozen=True)
class Check:
    """One pitfall check: `status` is "ok", "warn" or "fixed" (the plugin acted on it)."""

    name: str
    status: str
    message: str
    env: dict[str, str] = field(default_factory=dict)  # what the ranks get because of it

    def line(self) -> str:
        return f"{self.name}: {self.status}: {self.message}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def rdma_devices(root: Path) -> list[str]:
    path = root / "sys" / "class" / "infiniband"
    try:
        return sorted(entry.name for entry in path.iterdir())
    except OSError:
        return []


def check_rdma_fork(root: Path, environ: Mapping[str, str]) -> Check:
    """(a): with RDMA devices present, forked ranks get the fork-safety variables."""
    devices = rdma_devices(root)
    if not devices:
        return Check("rdma_fork", "ok", "no RDMA devices (/sys/class/infiniband is empty)")
    # A value the user set wins; we only fill in what is missing.
    env = {k: v for k, v in FORK_SAFE_ENV.items() if k not in environ}
    names = ", ".join(devices)
    if not env:
        return Check("rdma_fork", "ok", f"RDMA devices {names}; IBV_FORK_SAFE and "
                     "RDMAV_FORK_SAFE already set by the user")
    return Check(
        "rdma_fork", "fixed",
        f"RDMA devices {names} and ranks are forked: set {', '.join(f'{k}=1' for k in env)} "
        "for the ranks so libibverbs initialises fork support",
        env,
    )


def boot_id(root: Path) -> str | None:
    try:
        return (root / "proc" / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
    except OSError:
        return None


def namespaces(root: Path, pid: int | str) -> dict[str, str] | None:
    """The namespace ids of a process, or None where they cannot be read (permissions)."""
    found = {}
    for kind in _NAMESPACES:
        try:
            found[kind] = os.readlink(root / "proc" / str(pid) / "ns" / kind)
        except OSError:
            return None
    return found


def container_hint(root: Path, environ: Mapping[str, str]) -> str | None:
    """Why this process looks like it runs in a container, or None."""
    if (root / ".dockerenv").exists():
        return "/.dockerenv exists"
    if (root / "run" / ".containerenv").exists():
        return "/run/.containerenv exists"
    if "KUBERNETES_SERVICE_HOST" in environ:
        return "KUBERNETES_SERVICE_HOST is set"
    try:
        cgroup = (root / "proc" / "1" / "cgroup").read_text()
    except OSError:
        cgroup = ""
    for hint in _CONTAINER_CGROUP_HINTS:
        if hint in cgroup:
            return f"/proc/1/cgroup mentions {hint}"
    return None


def check_container_ipc(
    root: Path, pids: Iterable[int | str], environ: Mapping[str, str], gpu_visible: bool
) -> Check:
    """(b): processes that share a boot_id but not namespaces cannot use CUDA IPC."""
    pids = list(pids)
    spaces = {str(pid): namespaces(root, pid) for pid in pids}
    readable = {pid: ns for pid, ns in spaces.items() if ns is not None}
    distinct = {tuple(sorted(ns.items())) for ns in readable.values()}
    if len(distinct) > 1:
        groups: dict[tuple, list[str]] = {}
        for pid, ns in readable.items():
            groups.setdefault(tuple(sorted(ns.items())), []).append(pid)
        listing = "; ".join(f"pids {', '.join(g)}" for g in groups.values())
        return Check(
            "container_ipc", "warn",
            f"processes share boot_id {boot_id(root)} but not namespaces ({listing}): "
            "TensorPipe will try CUDA IPC between them and fail; pass _channels without "
            "cuda_ipc (e.g. cuda_basic) to TensorPipeRpcBackendOptions",
        )
    hint = container_hint(root, environ)
    if hint is None:
        return Check("container_ipc", "ok", "not in a container; ranks share namespaces")
    if not gpu_visible:
        return Check(
            "container_ipc", "ok",
            f"in a container ({hint}) but no GPU is visible, so CUDA IPC is not used; ranks "
            "of a local world share this container's namespaces",
        )
    return Check(
        "container_ipc", "warn",
        f"in a container ({hint}): ranks of this world share its namespaces, but a peer in "
        f"another container on this host (same boot_id {boot_id(root)}) looks local to "
        "TensorPipe, whose CUDA IPC to it fails; exclude cuda_ipc from _channels for such peers",
    )


def gdr_capable(root: Path) -> str | None:
    """The GPUDirect RDMA module loaded with RDMA devices present, or None."""
    if not rdma_devices(root):
        return None
    for module in _GDR_MODULES:
        if (root / "sys" / "module" / module).exists():
            return module
    return None


def check_gdr_small_payloads(root: Path, sizes: Iterable[int]) -> Check:
    """(c): payloads under 32 bytes over GPUDirect RDMA can crash TensorPipe."""
    module = gdr_capable(root)
    if module is None:
        return Check("gdr_small_payload", "ok", "no GPUDirect RDMA (no RDMA device with "
                     "nvidia_peermem/nv_peer_mem loaded)")
    small = sorted({s for s in sizes if s < GDR_MIN_SAFE_BYTES})
    if not small:
        return Check("gdr_small_payload", "ok", f"GPUDirect RDMA ({module}); every payload is "
                     f">= {GDR_MIN_SAFE_BYTES} B")
    return Check(
        "gdr_small_payload", "warn",
        f"GPUDirect RDMA ({module}) with payloads under {GDR_MIN_SAFE_BYTES} B "
        f"({', '.join(f'{s} B' for s in small)}): TensorPipe may segfault on CUDA tensors that "
        "small (pytorch/pytorch#57136); use sizes >= 32 B for CUDA payloads",
    )


def run_checks(
    *,
    root: Path = Path("/"),
    environ: Mapping[str, str] | None = None,
    pids: Iterable[int | str] = ("self",),
    gpu_visible: bool = False,
    sizes: Iterable[int] = (),
) -> list[Check]:
    environ = os.environ if environ is None else environ
    return [
        check_rdma_fork(root, environ),
        check_container_ipc(root, pids, environ, gpu_visible),
        check_gdr_small_payloads(root, sizes),
    ]


def rank_env(checks: Iterable[Check]) -> dict[str, str]:
    """Environment variables the ranks must get because of the checks."""
    env: dict[str, str] = {}
    for check in checks:
        env.update(check.env)
    return env
