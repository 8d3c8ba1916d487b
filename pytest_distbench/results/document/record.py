"""The benchmark record: one measurement's fields, from the pipeline to the results file.

A record is JSON and is read as a dict everywhere (tables, comparisons, plots, the CLI on a
saved file), so its type is a TypedDict rather than a class: the same value is built by
harness/controller/records.py (`build_records`, from the ranks' `wire.Measurement`s), made
plain by normalize.py, checked by schema.py and written under `benchmarks[i].distbench`.
docs/results-schema.md documents every key; tests/test_record.py holds this type, the schema's
checks and that table to the same keys, the same required keys and the same nullability.

Nested objects are typed where a reader of this package reads their keys; `figures` and
`params` belong to the families and the tests, and stay plain objects.
"""

from __future__ import annotations

from typing import Any, TypedDict


class P50Interval(TypedDict, total=False):
    """`p50_ci`: the 95 % interval of the point's value in this session (the run's sampling
    interval widened by the run-to-run noise of its stratum, document/session_intervals.py);
    `sampling_ci`: the run's own (statistics/interval.py), without basis, run_noise,
    noise_missing and regimes. `why`: files of schema 2 only (now `noise_missing`)."""

    level: float
    method: str
    low: float | None
    high: float | None
    half_width_pct: float | None
    basis: str  # session_intervals.BASES
    run_noise: dict[str, Any] | None
    noise_missing: str | None  # session_intervals.NOISE_MISSING: the ± is the run's own
    why: str | None
    regimes: list[list[float]]


class RateInterval(TypedDict, total=False):
    """`rate_ci`, a rate record's (`headline_statistic` "mean"): the 95 % interval of its
    rate over the timed region in this session, messages/s and MB/s (the run's own interval
    in `figures`, widened as `p50_ci` is; document/session_intervals.py)."""

    level: float
    low: float | None
    high: float | None
    half_width_pct: float | None
    mbps_low: float | None
    mbps_high: float | None


class Incomplete(TypedDict):
    """What was measured did not finish within its bound; the samples are that bound."""

    bound_s: float
    reason: str


class LiveReport(TypedDict):
    """One of rank 0's live reports, as the controller printed it (controller/live.py)."""

    time_s: float
    iterations: int
    delay_s: float


class Pressure(TypedDict, total=False):
    """The pressure the ranks ran during the timed region (ranks/pressure.py)."""

    ranks: list[int]
    cpu_threads: int
    allocate_bytes: int
    touch_bytes: int
    touch_once: bool
    log_threads: int
    log_lines: int
    log_lines_written: int
    print_env: bool
    env: dict[str, dict[str, str]]


class _PrecisionStop(TypedDict):
    """What the run's stop was (harness/wire.py PrecisionStop)."""

    target: float
    stopped_by: str | None
    statistic: str


class Precision(_PrecisionStop, total=False):
    """A precision-targeted run: the target, its stop, what its own sampling interval
    achieved, and (written with the printed interval, at the end of the test loop) what that
    achieved, whether it met the target and whether the point missed it by its own spread."""

    sampling_achieved: float | None
    achieved: float | None
    met: bool
    own_short: bool


class ABField(TypedDict, total=False):
    """A/B mode's paired verdict against the live baseline (harness/ab/mode.py)."""

    baseline: str
    rounds: int
    round_statistic: str
    baseline_round_s: list[float]
    candidate_round_s: list[float]
    baseline_p50_s: list[float]
    candidate_p50_s: list[float]
    baseline_rounds: list[dict[str, float]]  # each round's summary
    candidate_rounds: list[dict[str, float]]
    ratio: float
    ratio_low: float | None
    ratio_high: float | None
    p_value: float
    level: float  # the point's share of the session's family-wise rate (absent before it)
    verdict: str
    detectable: float | None
    gateable: bool
    threshold: float
    wall_s: float


class OfPeak(TypedDict):
    """`of_peak`: one of the record's bandwidths as a share of a named peak (results/peaks.py)."""

    pct: float  # 100 x bandwidth / peak_gbps
    bandwidth: str  # which bandwidth is compared: "busbw" or "algbw"
    peak_gbps: float
    source: str  # where the peak comes from: measured, declared or published, and which


class _Identity(TypedDict):
    """The keys every record has (the required ones of docs/results-schema.md)."""

    id: str
    name: str
    family: str
    backend: str
    world_size: int
    device: str
    samples: list[float]
    summary: dict[str, float]  # schema.SUMMARY_KEYS, statistics.stats.Summary's fields


class Record(_Identity, total=False):
    """`benchmarks[i].distbench`. `X | None` where the schema accepts null; a key without
    None may still be absent (docs/results-schema.md says which are written always)."""

    placement: str | None
    params: dict[str, Any]
    figures: dict[str, Any]
    nbytes: int | None
    count: int | None
    dtype: str | None
    busbw_factor: float | None
    moves_no_data: str | None
    warmup: int | None
    iterations: int | None
    rank_samples: list[list[float]]
    p50_ci: P50Interval | None
    rate_ci: RateInterval
    sampling_ci: P50Interval | None
    revisits: list[float] | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    of_peak: OfPeak | None
    wrong: int | None
    skew: float | None
    stalls: int | None
    threshold: float | None
    requested_nbytes: list[int] | None
    ab: ABField
    peak_rss_bytes: list[int] | None
    timing: str | None
    headline_statistic: str
    stopped_at_sample_cap: bool
    batch_iterations: int | None
    peak_gpu_allocated_bytes: list[int] | None
    peak_gpu_reserved_bytes: list[int] | None
    timed_ranks: list[int] | None
    elapsed_s: list[float | None] | None
    precision: Precision
    invalid: list[str] | None
    incomplete: Incomplete | None
    duration_s: float | None
    pressure: Pressure | None
    live_reports: list[LiveReport] | None


REQUIRED_KEYS: frozenset[str] = Record.__required_keys__
RECORD_KEYS: frozenset[str] = Record.__required_keys__ | Record.__optional_keys__
