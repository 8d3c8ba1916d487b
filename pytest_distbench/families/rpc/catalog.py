"""The transports `test_transports` compares, and why one is unavailable (torch imported lazily).

TensorPipe rows pin both the transport (the connection) and the channel (how tensor bytes move):
with only `_transports` set, a CPU tensor could still travel over the cma or mpt_uv channel, so
the CPU rows use the `basic` channel, which sends the bytes over the chosen transport.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Transport:
    name: str
    kind: str  # "tensorpipe" or "process_group"
    device: str  # where the payload lives: "cpu" or "cuda"
    tp_transports: tuple[str, ...] = ()
    tp_channels: tuple[str, ...] = ()
    backend: str | None = None  # process group backend
    gpus_needed: int = 0
    description: str = ""


TRANSPORTS: tuple[Transport, ...] = (
    Transport("tensorpipe-shm", "tensorpipe", "cpu", ("shm",), ("basic",),
              description="TensorPipe, shared-memory ring buffers only (one host)"),
    Transport("tensorpipe-uv", "tensorpipe", "cpu", ("uv",), ("basic",),
              description="TensorPipe, TCP (libuv) only"),
    Transport("gloo", "process_group", "cpu", backend="gloo",
              description="the process group's send/recv over gloo"),
    Transport("nccl", "process_group", "cuda", backend="nccl", gpus_needed=2,
              description="send/recv over an nccl group, one GPU per rank"),
    Transport("tensorpipe-cuda_ipc", "tensorpipe", "cuda", ("shm", "uv"),
              ("cuda_ipc", "basic"), gpus_needed=1,
              description="TensorPipe, CUDA tensors through CUDA IPC handles"),
    Transport("tensorpipe-cuda_basic", "tensorpipe", "cuda", ("shm", "uv"),
              ("cuda_basic", "basic"), gpus_needed=1,
              description="TensorPipe, CUDA tensors staged through host memory"),
)
TRANSPORT_NAMES = tuple(t.name for t in TRANSPORTS)
BY_NAME = {t.name: t for t in TRANSPORTS}


def unavailable(transport: Transport) -> str | None:
    """Why this machine cannot run `transport`, or None when it can."""
    import torch
    import torch.distributed as dist

    if transport.kind == "tensorpipe" and not hasattr(
            torch.distributed.rpc, "TensorPipeRpcBackendOptions"):
        return "this torch has no TensorPipe RPC"
    if transport.backend == "gloo" and not dist.is_gloo_available():
        return "gloo is not built into this torch"
    if transport.backend == "nccl" and not dist.is_nccl_available():
        return "nccl is not built into this torch"
    if transport.gpus_needed:
        if not torch.cuda.is_available():
            return "needs a GPU: no GPU is visible"
        if torch.cuda.device_count() < transport.gpus_needed:
            return (f"needs {transport.gpus_needed} GPUs (one per rank), "
                    f"{torch.cuda.device_count()} visible")
    return None
