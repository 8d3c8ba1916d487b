"""Starting pytest the way torchrun, srun or mpirun would: one process per rank."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from zygote import shared_pool

PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


@dataclass
class Finished:
    returncode: int
    output: str
    seconds: float


def free_port() -> int:
    # Tests only: the product never guesses a port, the launcher (or the user) names it.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_all(commands: list[tuple[list[str], dict[str, str]]], cwd: Path,
            timeout: float) -> list[Finished]:
    """Start every command at once; wait for all, killing what outlives `timeout`. A pytest
    of this interpreter is forked from the suite's zygotes (tests/zygote.py), the rest
    (torchrun) run as subprocesses."""
    began = time.monotonic()

    def run(argv: list[str], env: dict[str, str]) -> Finished:
        try:
            done = shared_pool().run_command(
                argv, cwd=cwd, env={**os.environ, **torchrun_tmpdir(argv, cwd), **env},
                timeout=timeout, merge=True)
            output, code = done.stdout, done.returncode
        except subprocess.TimeoutExpired as exc:
            output = f"{_text(exc.stdout)}\n<<killed by the test: timeout>>"
            code = -signal.SIGKILL
        return Finished(code, output, time.monotonic() - began)

    with ThreadPoolExecutor(len(commands)) as pool:
        return list(pool.map(lambda command: run(*command), commands))


def _text(output: str | bytes | None) -> str:
    # subprocess.run's TimeoutExpired carries bytes even where text was asked for.
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


def torchrun_tmpdir(argv: list[str], cwd: Path) -> dict[str, str]:
    """For a torchrun command, a TMPDIR inside the test's directory: torchrun makes a
    torchelastic_* log folder in the temporary directory and never removes it."""
    # torchrun first, or after a `--` (pytest-distbench capture -- torchrun ...).
    starts = [0] + [i + 1 for i, a in enumerate(argv) if a == "--"]
    if not any(argv[i:i + len(TORCHRUN)] == TORCHRUN or argv[i:i + 1] == ["torchrun"]
               for i in starts):
        return {}
    folder = Path(cwd) / "torchrun-tmp"
    folder.mkdir(exist_ok=True)
    return {"TMPDIR": str(folder)}


def rank_env(kind: str, rank: int, world_size: int, port: int) -> dict[str, str]:
    """What srun or mpirun would put in the environment of one rank on this one host."""
    if kind == "slurm":
        return {"SLURM_PROCID": str(rank), "SLURM_NTASKS": str(world_size),
                "SLURM_LOCALID": str(rank), "SLURM_JOB_ID": "4242",
                "SLURM_STEP_NODELIST": "localhost,node[02-04]", "MASTER_PORT": str(port)}
    if kind == "openmpi":
        return {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": str(world_size),
                "OMPI_COMM_WORLD_LOCAL_RANK": str(rank),
                "OMPI_COMM_WORLD_LOCAL_SIZE": str(world_size), "MASTER_PORT": str(port)}
    if kind == "mpich":
        return {"PMI_RANK": str(rank), "PMI_SIZE": str(world_size),
                "MPI_LOCALRANKID": str(rank), "MPI_LOCALNRANKS": str(world_size),
                "MASTER_PORT": str(port)}
    raise ValueError(kind)


def torchrun_node(port: int, is_host: int, rdzv_id: str, pytest_args: list[str]) -> list[str]:
    """One of two torchrun agents, one per "node", meeting at a c10d rendezvous on loopback
    and forming a world of 2 (one rank each)."""
    return TORCHRUN + [
        "--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d", f"--rdzv-id={rdzv_id}",
        f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-conf=is_host={is_host}",
        "-m", "pytest", "-p", "no:cacheprovider", *pytest_args]


def launch(cwd: Path, kind: str, world_size: int, args: list[str],
           timeout: float = 240) -> list[Finished]:
    """One pytest per rank, as srun or mpirun would start them."""
    port = free_port()
    return run_all([(PYTEST + args, rank_env(kind, r, world_size, port))
                    for r in range(world_size)], cwd, timeout)


def read_results(path: Path) -> dict:
    return json.loads(path.read_text())


def benchmark_ids(path: Path) -> list[str]:
    return [b["distbench"]["id"] for b in read_results(path)["benchmarks"]]
