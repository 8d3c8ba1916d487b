"""The environment fingerprint stored with every run: what a comparison must hold equal."""

from __future__ import annotations

import os
import platform
import socket
import statistics
import sys
import time
from typing import Any

_ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_DISTRIBUTED", "TP_", "OMP_NUM_THREADS", "USE_LIBUV")

# Environment fields that change what a benchmark measures; hostname and friends do not.
FINGERPRINT_FIELDS = ("torch", "cpu_model", "cpu_count", "gpus", "cuda", "nccl", "world_sizes")


def fingerprint(environment: dict[str, Any]) -> dict[str, Any]:
    """The FINGERPRINT_FIELDS of a run's environment, as a stored history run keeps them: the
    world sizes as a sorted set (the order they were asked for changes nothing measured)."""
    return {key: as_sorted_set(environment.get(key)) if key == "world_sizes"
            else environment.get(key) for key in FINGERPRINT_FIELDS}


def as_sorted_set(value: Any) -> Any:
    """A list of numbers as its sorted distinct values; anything else as it is."""
    if isinstance(value, list) and all(isinstance(v, (int, float)) for v in value):
        return sorted(set(value))
    return value


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_probe() -> float:
    """Seconds a fixed pure-Python loop takes now (median of 7): the machine's current speed.

    A shared VM can run the same code at half speed after sustained load; a results file that
    records this lets a comparison say so instead of blaming the code.
    """
    times = []
    for _ in range(7):
        began = time.perf_counter()
        total = 0
        for i in range(100_000):
            total += i
        times.append(time.perf_counter() - began)
    return statistics.median(times)


_CPUIDLE = "/sys/devices/system/cpu/cpuidle"
_HALTPOLL_NS = "/sys/module/haltpoll/parameters/guest_halt_poll_ns"


def cpu_idle(root: str = "/") -> dict[str, Any] | None:
    """How an idle CPU sleeps: the cpuidle driver and governor, and on a KVM guest with the
    haltpoll driver how long it polls before halting (0: it halts at once).

    A halted virtual CPU takes long to wake; ranks that message each other across CPUs then
    run in a slow mode part of the time (docs/gating.md), so a results file says which kind
    of machine it came from.
    """
    def read(path: str) -> str | None:
        try:
            with open(os.path.join(root, path.lstrip("/")), encoding="utf-8") as f:
                return f.read().strip()
        except OSError:
            return None

    driver = read(f"{_CPUIDLE}/current_driver")
    if driver is None:
        return None
    facts: dict[str, Any] = {"driver": driver,
                             "governor": read(f"{_CPUIDLE}/current_governor_ro")
                             or read(f"{_CPUIDLE}/current_governor")}
    poll = read(_HALTPOLL_NS)
    if poll is not None and poll.isdigit():
        facts["guest_halt_poll_ns"] = int(poll)
    return facts


def relevant_env() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(_ENV_PREFIXES)}


def controller_environment() -> dict[str, Any]:
    """Facts the controller knows without touching a GPU."""
    import torch

    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_idle": cpu_idle(),
        "gpus": [],
        "cuda": torch.version.cuda,
        "nccl": None,
        "gloo": bool(torch.distributed.is_gloo_available()),
        "env": relevant_env(),
        "executable": sys.executable,
    }


def rank_environment(backend: str, device: Any) -> dict[str, Any]:
    """Facts only a rank can see: the GPU it drives and the NCCL it loaded."""
    import torch

    info: dict[str, Any] = {"backend": backend, "device": str(device),
                            "intra_op_threads": torch.get_num_threads()}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info["gpu"] = props.name
        info["gpu_memory_bytes"] = int(props.total_memory)
        try:
            info["nccl"] = ".".join(str(p) for p in torch.cuda.nccl.version())
        except Exception:  # noqa: BLE001 - a version string is best effort
            info["nccl"] = None
    return info


def merge_rank_facts(environment: dict[str, Any], rank_infos: list[dict[str, Any]]) -> None:
    """Fold what the ranks reported (GPU names, NCCL version) into the run's environment."""
    gpus = sorted({info["gpu"] for info in rank_infos if info.get("gpu")})
    if gpus:
        environment["gpus"] = gpus
    threads = sorted({info["intra_op_threads"] for info in rank_infos
                      if isinstance(info.get("intra_op_threads"), int)})
    if threads:
        environment["rank_intra_op_threads"] = threads[0] if len(threads) == 1 else threads
    nccl = sorted({info["nccl"] for info in rank_infos if info.get("nccl")})
    if nccl:
        environment["nccl"] = nccl[0] if len(nccl) == 1 else nccl
