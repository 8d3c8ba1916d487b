"""Whether a backend can run here: the reason it cannot, for a skip that says why."""

from __future__ import annotations


def unavailable(backend: str, gpus_needed: int) -> str | None:
    """Why `backend` cannot run with `gpus_needed` GPUs visible to this process (None: it can)."""
    import torch
    import torch.distributed as dist

    if backend == "gloo" and not dist.is_gloo_available():
        return "backend gloo is not built into this torch"
    if backend == "mpi" and not dist.is_mpi_available():
        return "backend mpi is not built into this torch"
    if backend == "nccl":
        if not dist.is_nccl_available() or not torch.cuda.is_available():
            return "backend nccl needs CUDA: no GPU is visible"
        if torch.cuda.device_count() < gpus_needed:
            return (f"backend nccl: world size {gpus_needed} needs one GPU per rank, "
                    f"{torch.cuda.device_count()} visible")
    return None
