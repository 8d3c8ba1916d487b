"""The messages between the controller and its ranks.

Everything that crosses a pipe is one of these picklable dataclasses, so the protocol is
readable in one screen: the controller sends RunTest or Shutdown; a rank answers RankReady once,
then one TestOutcome per RunTest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Fixture names whose values only exist inside a rank; the controller ships placeholders.
RANK_FIXTURES = (
    "distbench",
    "rank",
    "world_size",
    "device",
    "process_group",
    "tcp_store",
    "rpc_agent",
)


@dataclass(frozen=True)
class RankSpec:
    """What a rank process needs to join its world."""

    rank: int
    world_size: int
    backend: str
    device_type: str
    store_host: str
    store_port: int
    store_prefix: str
    capture_path: str
    timeout_s: float
    cpus: tuple[int, ...] | None = None  # CPU affinity of the rank, None to leave it alone
    # Environment the rank sets before it opens any socket (listen interface, fork safety).
    env: tuple[tuple[str, str], ...] = ()
    local_rank: int | None = None  # rank on its host (launcher mode), picks the GPU


@dataclass(frozen=True)
class MeasureSettings:
    """How `distbench.measure` times; identical in every rank of a test."""

    warmup: int
    iterations: int | None  # a fixed count, or None to calibrate to budget_s
    min_iterations: int
    max_iterations: int
    budget_s: float
    dtype: str


@dataclass(frozen=True)
class RunTest:
    nodeid: str
    module_name: str
    module_file: str
    qualname: str
    kwargs: dict[str, Any]
    rank_fixtures: tuple[str, ...]
    settings: MeasureSettings
    sys_path: tuple[str, ...]


@dataclass(frozen=True)
class Shutdown:
    timeout_s: float


@dataclass(frozen=True)
class RankReady:
    rank: int
    pid: int
    info: dict[str, Any]


@dataclass
class Measurement:
    """One `distbench.measure` call as seen by one rank."""

    name: str | None
    family: str | None
    nbytes: int | None
    count: int | None
    dtype: str | None
    busbw_factor: float
    warmup: int
    samples: list[float]
    wrong: int | None
    # The family's own figures (messages per iteration, percentiles of its own metrics, ...):
    # JSON-able values, taken from rank 0 into the record.
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass
class TestOutcome:
    rank: int
    status: str  # "passed", "failed" or "skipped"
    message: str = ""
    measurements: list[Measurement] = field(default_factory=list)
