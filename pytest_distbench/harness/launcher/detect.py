"""Launcher mode: which rank of which world this process is, read from the launcher's environment.

Under torchrun, SLURM (srun), Open MPI or MPICH (mpirun) pytest runs in every launched process;
each process is one rank of one world whose size the launcher fixed. This module only reads
the environment (no torch import); harness/launcher/session.py runs the tests.

    torchrun   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
               (TORCHELASTIC_USE_AGENT_STORE=True: the agent hosts the store at MASTER_ADDR)
    Open MPI   OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
    MPICH      PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS (hydra)
    SLURM      SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, first host of SLURM_STEP_NODELIST
               (or SLURM_JOB_NODELIST / SLURM_NODELIST)

MASTER_ADDR and MASTER_PORT, when set, always win: they are how a user picks the interface and
port the rendezvous store listens on.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

import pytest

from ...units import MAX_WORLD_SIZE
from ..xdist.mode import hands_out_tests, is_worker

# Port of the rendezvous store when the launcher names none (SLURM, MPI without MASTER_PORT).
DEFAULT_PORT = 29500
SLURM_PORT_BASE = 20000  # SLURM: DEFAULT is offset by the job id so two jobs on a node differ
SLURM_PORT_SPAN = 20000
# SLURM job ids are 32-bit; the job id only shifts the store's default port.
MAX_SLURM_JOB_ID = 2**32
_DIGITS = re.compile(r"[0-9]+")


class LaunchError(ValueError):
    """The environment names a launcher but lacks or garbles something a rank needs."""


@dataclass(frozen=True)
class LaunchEnv:
    launcher: str  # torchrun, env, slurm, openmpi, mpich
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int | None
    master_addr: str
    master_port: int
    agent_store: bool  # torchrun's agent hosts the store: every rank, rank 0 too, is a client
    run_id: str  # tells apart restarts and jobs sharing a store

    def describe(self) -> str:
        return (f"{self.launcher}: rank {self.rank} of {self.world_size} (local rank "
                f"{self.local_rank}), store {self.master_addr}:{self.master_port}")


def _int(env: Mapping[str, str], name: str, minimum: int = 0, maximum: int = MAX_WORLD_SIZE,
         too_large: str = "") -> int:
    """`name`'s value: ASCII digits, minimum <= value <= maximum; too_large says why not more."""
    text = env.get(name)
    if text is None:
        raise LaunchError(f"{name} is not set")
    # Plain ASCII digits only: int() also takes "1_0", "+1" and digits of every script
    # (and str.isdigit() "²", which int() then refuses); a launcher writes none of them.
    digits = text.strip()
    if _DIGITS.fullmatch(digits) is None:
        raise LaunchError(f"{name}={text!r} is not an integer (decimal digits 0-9)")
    too_large = too_large or f"is above {maximum}"
    if len(digits.lstrip("0")) > len(str(maximum)):  # before int(): it refuses 4300+ digits
        raise LaunchError(f"{name}={_clip(digits)} {too_large}")
    value = int(digits)
    if value < minimum:
        raise LaunchError(f"{name}={text!r} must be >= {minimum}")
    if value > maximum:
        raise LaunchError(f"{name}={value} {too_large}")
    return value


def _clip(digits: str) -> str:
    return digits if len(digits) <= 40 else f"{digits[:20]!r}... ({len(digits)} digits)"


def _optional_int(env: Mapping[str, str], name: str, maximum: int = MAX_WORLD_SIZE) -> int | None:
    return _int(env, name, maximum=maximum) if name in env else None


def _world(env: Mapping[str, str], rank_name: str, size_name: str) -> tuple[int, int]:
    """The rank and the world size, each within bounds, the rank below the size."""
    world_size = _int(env, size_name, 1, too_large=f"is above {MAX_WORLD_SIZE}, the most ranks "
                      "a world may have")
    rank = _int(env, rank_name, maximum=MAX_WORLD_SIZE - 1)
    _check(rank, world_size, rank_name, size_name)
    return rank, world_size


def _port(env: Mapping[str, str], default: int) -> int:
    if "MASTER_PORT" not in env:
        return default
    return _int(env, "MASTER_PORT", 1, maximum=65535, too_large="is not a TCP port (1-65535)")


def _address(env: Mapping[str, str]) -> str:
    """MASTER_ADDR, which must name a host: an empty one makes every rank wait on nothing."""
    address = env["MASTER_ADDR"].strip()
    if not address:
        raise LaunchError("MASTER_ADDR is empty: set it to the host of rank 0")
    return address


def _local(env: Mapping[str, str], rank_name: str, size_name: str) -> tuple[int, int | None]:
    """The local rank (0 when not set) and the local world size, if the launcher says it."""
    size = _int(env, size_name, 1) if size_name in env else None
    rank = _optional_int(env, rank_name, maximum=MAX_WORLD_SIZE - 1) or 0
    if size is not None:
        _check(rank, size, rank_name, size_name)
    return rank, size


def _check(rank: int, world_size: int, rank_name: str, size_name: str) -> None:
    if rank >= world_size:
        raise LaunchError(f"{rank_name}={rank} is not below {size_name}={world_size}")


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _expand_range(body: str, where: str) -> list[str]:
    values = []
    for piece in body.split(","):
        piece = piece.strip()
        match = re.fullmatch(r"([0-9]{1,9})(?:-([0-9]{1,9}))?", piece)
        if not match:
            raise LaunchError(f"cannot read host list {where!r}: bad range {piece!r}")
        start, end = match.group(1), match.group(2) or match.group(1)
        if int(end) < int(start):
            raise LaunchError(f"cannot read host list {where!r}: range {piece!r} runs backwards")
        if int(end) - int(start) >= MAX_WORLD_SIZE:
            raise LaunchError(f"cannot read host list {where!r}: range {piece!r} names more "
                              f"than {MAX_WORLD_SIZE} hosts")
        width = len(start)  # node[01-10] keeps its zero padding
        values.extend(str(n).zfill(width) for n in range(int(start), int(end) + 1))
    return values


def expand_hostlist(text: str) -> list[str]:
    """SLURM's compact host list, expanded: "gpu[01-03,7],login" -> gpu01 gpu02 gpu03 gpu7 login.

    Several bracket groups in one name multiply out ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2).
    """
    hosts: list[str] = []
    for entry in _split_top_level(text):
        names = [""]
        for literal, body in re.findall(r"([^\[\]]*)(?:\[([^\[\]]*)\])?", entry):
            if not literal and body == "":
                continue
            suffixes = _expand_range(body, text) if body else [""]
            if len(names) * len(suffixes) > MAX_WORLD_SIZE:
                raise LaunchError(f"cannot read host list {text!r}: it names more than "
                                  f"{MAX_WORLD_SIZE} hosts")
            names = [n + literal + s for n in names for s in suffixes]
        if entry.count("[") != entry.count("]"):
            raise LaunchError(f"cannot read host list {text!r}: unbalanced brackets")
        hosts.extend(names)
    return hosts


def _first_host(env: Mapping[str, str], name: str) -> str:
    hosts = expand_hostlist(env[name])
    if not hosts or not hosts[0]:
        raise LaunchError(f"{name}={env[name]!r} names no host")
    return hosts[0]


def _master_for_mpi(env: Mapping[str, str], local_size: int | None, world_size: int,
                    launcher: str) -> str:
    if "MASTER_ADDR" in env:
        return _address(env)
    if local_size is not None and local_size == world_size:
        return "127.0.0.1"  # every rank on this host
    raise LaunchError(
        f"{launcher} does not say which host runs rank 0: set MASTER_ADDR for every rank "
        "(for example mpirun -x MASTER_ADDR=host0 ...)")


def _torchrun(env: Mapping[str, str]) -> LaunchEnv:
    rank, world_size = _world(env, "RANK", "WORLD_SIZE")
    if "MASTER_ADDR" not in env:
        raise LaunchError("RANK and WORLD_SIZE are set but MASTER_ADDR is not")
    if "MASTER_PORT" not in env:
        raise LaunchError("RANK and WORLD_SIZE are set but MASTER_PORT is not")
    torchrun = "TORCHELASTIC_RUN_ID" in env
    local_rank, local_size = _local(env, "LOCAL_RANK", "LOCAL_WORLD_SIZE")
    return LaunchEnv(
        launcher="torchrun" if torchrun else "env",
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        local_world_size=local_size,
        master_addr=_address(env),
        master_port=_port(env, DEFAULT_PORT),
        agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE") == "True",
        run_id=f"{env.get('TORCHELASTIC_RUN_ID', 'env')}."
               f"{env.get('TORCHELASTIC_RESTART_COUNT', 0)}",
    )


def _openmpi(env: Mapping[str, str]) -> LaunchEnv:
    return _mpi(env, "openmpi", "Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
                run_id=env.get("PMIX_NAMESPACE") or env.get("OMPI_MCA_ess_base_jobid") or "mpi")


def _mpich(env: Mapping[str, str]) -> LaunchEnv:
    return _mpi(env, "mpich", "the MPI launcher (PMI)", "PMI_RANK", "PMI_SIZE",
                "MPI_LOCALRANKID", "MPI_LOCALNRANKS", run_id=env.get("PMI_KVSNAME") or "pmi")


def _mpi(env: Mapping[str, str], launcher: str, who: str, rank_var: str, size_var: str,
         local_rank_var: str, local_size_var: str, *, run_id: str) -> LaunchEnv:
    """An MPI launcher's process: the same fields, under each implementation's names."""
    rank, world_size = _world(env, rank_var, size_var)
    local_rank, local_size = _local(env, local_rank_var, local_size_var)
    return LaunchEnv(
        launcher=launcher,
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        local_world_size=local_size,
        master_addr=_master_for_mpi(env, local_size, world_size, who),
        master_port=_port(env, DEFAULT_PORT),
        agent_store=False,
        run_id=run_id,
    )


def _slurm(env: Mapping[str, str]) -> LaunchEnv:
    size_name = "SLURM_NTASKS" if "SLURM_NTASKS" in env else "SLURM_NPROCS"
    rank, world_size = _world(env, "SLURM_PROCID", size_name)
    if "MASTER_ADDR" in env:
        master = _address(env)
    else:
        for name in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"):
            if env.get(name):
                master = _first_host(env, name)
                break
        else:
            raise LaunchError("SLURM_PROCID is set but neither SLURM_STEP_NODELIST, "
                              "SLURM_JOB_NODELIST, SLURM_NODELIST nor MASTER_ADDR is")
    job_name = next((n for n in ("SLURM_JOB_ID", "SLURM_JOBID") if env.get(n)), None)
    job = _int(env, job_name, maximum=MAX_SLURM_JOB_ID) if job_name else 0
    default_port = SLURM_PORT_BASE + job % SLURM_PORT_SPAN
    return LaunchEnv(
        launcher="slurm",
        rank=rank,
        world_size=world_size,
        local_rank=_optional_int(env, "SLURM_LOCALID", maximum=MAX_WORLD_SIZE - 1) or 0,
        local_world_size=None,
        master_addr=master,
        master_port=_port(env, default_port),
        agent_store=False,
        run_id=f"{job}.{env.get('SLURM_STEP_ID', env.get('SLURM_STEPID', 0))}",
    )


# Most specific first: mpirun inside a SLURM allocation inherits the batch step's SLURM_PROCID,
# so the MPI variables must win over SLURM's; torchrun's own variables win over everything.
_DETECTORS = (
    (("RANK", "WORLD_SIZE"), _torchrun),
    (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), _openmpi),
    (("PMI_RANK", "PMI_SIZE"), _mpich),
    (("SLURM_PROCID",), _slurm),
)
EXPECTED = ("torchrun's RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, SLURM_PROCID/SLURM_NTASKS, "
            "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE or PMI_RANK/PMI_SIZE")


def detect(env: Mapping[str, str] | None = None) -> LaunchEnv | None:
    """The launcher this process runs under, None without one; LaunchError if it is garbled."""
    env = os.environ if env is None else env
    for names, read in _DETECTORS:
        if all(name in env for name in names):
            return read(env)
    return None


def resolve(config: pytest.Config, mode: str) -> LaunchEnv | None:
    """Apply --distbench-launcher (auto, local, env) to this process's environment."""
    if mode == "local":
        return None
    try:
        launch = detect()
    except LaunchError as exc:
        raise pytest.UsageError(
            f"--distbench-launcher={mode}: the launcher environment is incomplete or garbled: "
            f"{exc} (pass --distbench-launcher=local to ignore it)") from None
    if launch is None:
        if mode == "env":
            raise pytest.UsageError(
                "--distbench-launcher=env: no launcher found in the environment (expected "
                f"{EXPECTED}); start pytest with torchrun, srun or mpirun, or use "
                "--distbench-launcher=auto")
        return None
    if is_worker(config) or hands_out_tests(config):
        raise pytest.UsageError(
            f"launcher mode ({launch.launcher}, {launch.world_size} processes) and pytest-xdist "
            "(-n) cannot be combined: the launcher already runs one pytest per rank")
    return launch
