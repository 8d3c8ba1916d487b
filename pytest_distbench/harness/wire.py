"""The messages between the controller and its ranks.

Everything that crosses a pipe is one of these picklable dataclasses, so the protocol is
readable in one screen: the controller sends RunTest or Shutdown; a rank answers RankReady once,
then one TestOutcome per RunTest. While a test runs with live reports, rank 0 also sends
Progress messages (one per report interval, from a reporter thread, never per iteration).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

T = TypeVar("T")


def _setting(name: str, **kwargs: Any) -> Any:
    """A field carrying the setting `name` under a name that says its unit (budget_s)."""
    return field(metadata={"setting": name}, **kwargs)


def from_settings(cls: type[T], settings: Any, **derived: Any) -> T:
    """A settings message from a test's resolved Settings: each field is the setting of its
    name (or the one its field names), unless given here (values the controller derives)."""
    return cls(**{f.name: derived[f.name] if f.name in derived
                  else getattr(settings, f.metadata.get("setting", f.name))
                  for f in fields(cls)})

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
    pin_threads: bool = False  # cpus apply to every thread of the rank, not the main one only
    # Environment the rank sets before it opens any socket (listen interface, fork safety).
    env: tuple[tuple[str, str], ...] = ()
    local_rank: int | None = None  # rank on its host (launcher mode), picks the GPU


@dataclass(frozen=True)
class PressureSettings:
    """Load the pressured ranks put on themselves during the timed region
    (harness/ranks/pressure.py)."""

    cpu_threads: int = 0
    allocate_bytes: int = _setting("allocate", default=0)
    touch_bytes: int = _setting("touch", default=0)
    touch_once: bool = False
    log_threads: int = 12
    log_lines: int = 0
    print_env: bool = False


@dataclass(frozen=True)
class MeasureSettings:
    """How `distbench.measure` times; identical in every rank of a test."""

    warmup: int
    iterations: int | None  # a fixed count, or None to calibrate to budget_s
    min_iterations: int
    max_iterations: int
    budget_s: float = _setting("budget")
    dtype: str
    # A duration-bound timed region instead of a count/budget.
    duration_s: float | None = _setting("duration", default=None)
    # The test's --distbench-timeout: what a family whose iterations have a known floor (a
    # replay's gaps) checks them against before it starts. None: not known (no session).
    timeout_s: float | None = _setting("timeout", default=None)
    # A budget-bound run stops once its p50's 95 % interval is this narrow (half-width over
    # p50) in every rank; None: it spends its budget.
    precision: float | None = None
    # Derived by the controller (controller/revisits.py): the sampling half-width the run stops
    # at where the session's noise already dominates `precision` (None: `precision` itself),
    # and whether that stop is the noise's (the record's precision.stopped_by then says so).
    sampling_target: float | None = None
    noise_stop: bool = False
    # Derived by the controller (options.report_every_s, outcome.py), not settings of the name.
    report_every_s: float | None = None  # live Progress reports from rank 0, None for none
    pressure: PressureSettings | None = None  # None: no pressure at all
    # CUDA worlds only (harness/ranks/cuda_timing.py): "batch" or "each", the iterations per batch
    # (None: sized from the per-call time) and whether a batch is replayed from a CUDA graph.
    cuda_timing: str = "batch"
    cuda_batch: int | None = None
    cuda_graph: bool = False


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
    # A test method's instance as its set-up left it (setup_method's `self.x`): its
    # attributes, set on the fresh instance a rank builds.
    instance_state: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Shutdown:
    timeout_s: float


@dataclass(frozen=True)
class RankReady:
    rank: int
    pid: int
    info: dict[str, Any]


@dataclass(frozen=True)
class Progress:
    """Rank 0's running count of one measurement's timed region, sent once per interval.

    Times are cumulative from the start of the timed region; `due` and `sent` are the rank's
    time.monotonic() (one clock for every process of a host), so the controller can tell how
    late a report arrived.
    """

    name: str | None  # the measurement's name
    index: int  # 1, 2, ...: which interval this closes
    elapsed_s: float
    iterations: int
    messages_per_iteration: int
    nbytes: int | None
    due: float
    sent: float
    final: bool = False  # the last report of this measurement (the timed region ended)


@dataclass(frozen=True)
class PrecisionStop:
    """How a precision-targeted run stopped: the sampling target it ran to (a fraction of the
    headline), the statistic that target applies to ("p50" or "mean") and what stopped it
    ("precision": the target was reached; "budget": the budget ran out first)."""

    target: float
    statistic: str
    stopped_by: str


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
    peak_rss_bytes: int | None = None  # this rank's RSS high-water mark during the measurement
    duration_s: float | None = None  # the requested duration of a duration-bound run
    # False in a rank that takes no part in what is measured (one off a message path): it runs
    # the loop to keep in step, and its times are no figure of anything.
    timed: bool = True
    # Seconds from the first timed iteration to the end of the last, in this rank's clock:
    # what the sanity rules hold a duration run and a record's total time to.
    elapsed_s: float | None = None
    # What pressure this rank ran during the timed region (None: none); with print_env, "env".
    pressure: dict[str, Any] | None = None
    # How the samples were taken (cuda_timing.timing_label) and, for batch timings, how many
    # back-to-back iterations each sample averages.
    timing: str | None = None
    batch_iterations: int | None = None
    # CUDA worlds: this rank's caching-allocator peaks during the measurement, bytes.
    peak_gpu_allocated_bytes: int | None = None
    peak_gpu_reserved_bytes: int | None = None
    # What the test measured did not finish within its bound (a result, not a failure):
    # {"bound_s", "reason"}; the samples are then only that bound.
    incomplete: dict[str, Any] | None = None
    # A precision-targeted run's stop (None: the run had no target).
    stop: PrecisionStop | None = None
    # Why the measured call moves no data (one rank, in place): no bandwidth is computed.
    moves_no_data: str | None = None
    # What the headline is: "p50" (the median iteration) or "mean" (a rate over the whole
    # timed region, whose printed interval is the rate's).
    headline_statistic: str = "p50"
    # A duration-bound run that stopped early at MAX_DURATION_SAMPLES (measure.py).
    stopped_at_sample_cap: bool = False


@dataclass
class TestOutcome:
    rank: int
    status: str  # "passed", "failed", "skipped" or "xfailed" (pytest.xfail in the body)
    message: str = ""
    measurements: list[Measurement] = field(default_factory=list)
    # Why this rank's world cannot host another test ("" when it can): the test destroyed its
    # process group, or left a thread or child process running (harness/ranks/leftovers.py).
    rebuild: str = ""


@dataclass(frozen=True)
class WorldKey:
    world_size: int
    backend: str
    device_type: str
    bind: str = "none"
    # A/B mode: "baseline" or "candidate", so the two variants never share ranks ("" otherwise).
    variant: str = ""

    def __str__(self) -> str:
        suffix = f" {self.variant}" if self.variant else ""
        return f"{self.backend} ws{self.world_size} {self.device_type}{suffix}"
