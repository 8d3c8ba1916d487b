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

    info: dict[str, Any] = {"backend": backend, "device": str(device)}
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
    nccl = sorted({info["nccl"] for info in rank_infos if info.get("nccl")})
    if nccl:
        environment["nccl"] = nccl[0] if len(nccl) == 1 else nccl
