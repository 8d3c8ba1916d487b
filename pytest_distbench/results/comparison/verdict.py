"""Two results documents judged benchmark by benchmark: did each get slower, faster, or stay?

The statistics live in results/statistics (unpaired.py for two runs' samples, runs.py for a
baseline's stored history); this module matches benchmarks by id, picks the test that applies,
and says what else differs between the two runs (environment, placement, machine speed).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, get_args

from ..document import nccl_tests
from ..document.environment import FINGERPRINT_FIELDS, as_sorted_set
from ..document.record import Record
from ..document.schema import records
from ..document.session_intervals import headline_interval
from ..statistics.runs import MIN_RUNS, judge_history
from ..statistics.stats import median
from ..statistics.unpaired import (
    log_change,
    one_sided_p_values,
    relative_change,
    within_run_detectable,
)
from ..statistics.vocabulary import FAMILY_ALPHA, Kind, decide, point_level
from .series import Series, describe, series_of

DEFAULT_ALPHA = FAMILY_ALPHA  # family-wise: each point of a comparison gets its share
METRICS = ("p50", "min", "mean", "p90", "p95", "p99")
KINDS: tuple[Kind, ...] = get_args(Kind)  # in the order summaries count them
DEFAULT_THRESHOLD = 0.10


@dataclass(frozen=True)
class Verdict:
    """The outcome for one benchmark id.

    ``change`` is current/baseline - 1 on the p50 time (positive = slower) and decides ``kind``,
    against ``baseline_p50``: the median of the stored p50s against a history, the stored run's
    p50 otherwise; ``metric_change`` is the same ratio on the statistic the user chose to
    display (against a history and on p50, the same figure as ``change``).
    """

    id: str
    kind: Kind
    baseline_p50: float | None
    current_p50: float | None
    change: float | None
    p_value: float | None
    threshold: float
    name: str = ""
    family: str = ""
    nbytes: int | None = None
    metric: str = "p50"
    baseline_value: float | None = None
    current_value: float | None = None
    metric_change: float | None = None
    # The smallest slowdown (fraction) this comparison shows at its level (information: it
    # decides no verdict), and what noise that was measured from.
    detectable: float | None = None
    noise: str = ""
    z: float | None = None  # robust z against a stored history (None: single-run verdict)
    level: float | None = None  # the significance level this point's test was held to

    @property
    def gateable(self) -> bool:
        """Could this comparison fail a test? Only against stored runs' learned run-to-run
        spread: one stored run says nothing of how far this machine drifts between runs
        (docs/gating.md), whatever its within-run spread."""
        return self.z is not None

    @property
    def fails_session(self) -> bool:
        """A regression: the in-session stored gate fails its test (nothing else is one)."""
        return self.kind == "regression"


@dataclass(frozen=True)
class Comparison:
    """Every benchmark of two documents, judged; labels name the two sides in reports."""

    verdicts: tuple[Verdict, ...]
    metric: str
    threshold: float
    alpha: float  # family-wise: the chance that an unchanged build reads any regression
    fingerprint_differences: tuple[str, ...] = ()
    baseline_label: str = "baseline"
    current_label: str = "current"
    family: int = 1  # the tests (or benchmarks) sharing alpha (Bonferroni)
    family_unit: str = "benchmarks"
    _by_id: dict[str, Verdict] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._by_id.update((v.id, v) for v in self.verdicts)

    def get(self, benchmark_id: str) -> Verdict | None:
        return self._by_id.get(benchmark_id)

    def of_kind(self, kind: Kind) -> list[Verdict]:
        return [v for v in self.verdicts if v.kind == kind]

    @property
    def regressions(self) -> list[Verdict]:
        return self.of_kind("regression")

    def counts(self) -> dict[str, int]:
        return {kind: len(self.of_kind(kind)) for kind in KINDS}


def judge_records(
    base: dict[str, Any],
    cur: dict[str, Any],
    threshold: float,
    *,
    metric: str = "p50",
    alpha: float = DEFAULT_ALPHA,
    stored_p50s: Sequence[float] = (),
    stored_label: str = "",
) -> Verdict:
    """The verdict for one benchmark present in both runs (validated records), its test held to
    `alpha` (the point's level: vocabulary.point_level).

    With stored_p50s from at least history.MIN_RUNS runs (the baseline's current segment,
    series.py; `stored_label` names them) the verdict is judged against their run-to-run
    spread (history.judge_history), and the change is against their median;
    otherwise from the two runs' samples alone, by a comparison that cannot gate. Either way
    vocabulary.decide words it.
    """
    z = None
    cur_p50 = median(cur["samples"])
    base_p50 = median(base["samples"])
    base_value, cur_value = base["summary"][metric], cur["summary"][metric]
    usable = [p for p in stored_p50s if p > 0]
    if len(usable) >= MIN_RUNS and cur_p50 > 0:
        h = judge_history(usable, cur_p50, threshold, alpha=alpha)
        kind, change, p_value, z = h.kind, h.change, h.p_value, h.z
        detectable, noise = h.detectable, f"run-to-run: {stored_label or f'{h.runs} runs'}"
        # One change per comparison: the one the gate judged, against the baseline it names.
        base_p50 = h.baseline_p50
        if metric == "p50":
            base_value = base_p50
    else:
        stored = f"{stored_label}: fewer than {MIN_RUNS}" if len(usable) > 1 else "1 stored run"
        kind, change, p_value, detectable, noise = _judge_runs(base, cur, threshold, alpha,
                                                               stored)
    return Verdict(
        id=cur["id"],
        kind=kind,
        baseline_p50=base_p50,
        current_p50=cur_p50,
        change=change,
        p_value=p_value,
        threshold=threshold,
        detectable=detectable,
        noise=noise,
        z=z,
        level=alpha,
        name=cur["name"],
        family=cur["family"],
        nbytes=cur.get("nbytes"),
        metric=metric,
        baseline_value=base_value,
        current_value=cur_value,
        metric_change=relative_change(base_value, cur_value),
    )


def _judge_runs(base: dict[str, Any], cur: dict[str, Any], threshold: float, level: float,
                stored: str = "1 stored run") -> tuple[Kind, float, float | None, float, str]:
    """(kind, change, p, detectable, noise) of two runs' samples: a comparison that cannot gate
    (one run per side shows no run-to-run noise), whatever it shows."""
    base_p50, cur_p50 = median(base["samples"]), median(cur["samples"])
    change, moved = relative_change(base_p50, cur_p50), log_change(base_p50, cur_p50)
    detectable = within_run_detectable(base["samples"], cur["samples"], level)
    if min(len(base["samples"]), len(cur["samples"])) == 1:
        # One sample on a side (nccl-tests' mean per size) allows no test: the change is held
        # to the threshold alone ("shown" when beyond it), and never gates.
        beyond = _beyond_threshold(change, threshold)
        p_slower = 0.0 if beyond and moved > 0 else 1.0
        p_faster = 0.0 if beyond and moved < 0 else 1.0
        kind = decide(p_slower=p_slower, p_faster=p_faster, level=level, low=moved, high=moved,
                      threshold=threshold, gateable=False)
        return (kind, change, None, detectable,
                "one sample on a side (nccl-tests' mean): held to the threshold, no test")
    p_slower, p_faster = one_sided_p_values(base["samples"], cur["samples"])
    p_value = p_slower if moved > 0 else p_faster if moved < 0 else min(p_slower, p_faster)
    # Two runs whose printed p50 intervals overlap have not shown different p50s.
    apart = not _intervals_overlap(base, cur)
    kind = decide(p_slower=p_slower if apart else 1.0, p_faster=p_faster if apart else 1.0,
                  level=level, low=moved, high=moved, threshold=threshold, gateable=False)
    return (kind, change, p_value, detectable,
            f"within-run only: run-to-run noise unknown ({stored})")


def _beyond_threshold(change: float | None, threshold: float) -> bool:
    """Whether a change (current / baseline - 1) is larger than the threshold either way (in
    ratio terms: +10 % slower is the same size as 1/1.1 faster)."""
    return (change is not None and change > -1
            and abs(math.log1p(change)) > math.log1p(threshold))


def _intervals_overlap(base: dict[str, Any], cur: dict[str, Any]) -> bool:
    bounds = [headline_interval(record) for record in (base, cur)]
    if bounds[0] is None or bounds[1] is None:
        return False
    (base_low, base_high), (cur_low, cur_high) = bounds
    return base_low <= cur_high and cur_low <= base_high


def compare_documents(
    baseline_doc: dict[str, Any],
    current_doc: dict[str, Any],
    *,
    threshold: float,
    metric: str = "p50",
    alpha: float = DEFAULT_ALPHA,
    baseline_label: str = "baseline",
    current_label: str = "current",
    progress: Callable[[int, int], None] | None = None,
    family: int | None = None,
    levels: Mapping[str, float] | None = None,
    family_unit: str = "benchmarks",
    series: Mapping[str, Series] | None = None,
) -> Comparison:
    """Judge every benchmark id found in either (validated) document.

    Ids only in the current document are "new", ids only in the baseline are "missing"; neither
    is a failure. A record's own "threshold" (from the current run) beats ``threshold``.
    ``progress(judged, total)`` is told after each benchmark of the current document. A
    baseline with a history is judged against each benchmark's current segment (`series`, as
    series.series_of gives it: found here unless given).

    ``alpha`` is family-wise: each judged benchmark is held to alpha / family (Bonferroni;
    family defaults to the benchmarks judged here), unless ``levels`` gives its level (a
    session's: each point at the level its test judged it at).
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}")
    foreign = nccl_tests.from_document(baseline_doc) or nccl_tests.from_document(current_doc)
    baseline_doc, current_doc = nccl_tests.aligned(baseline_doc, current_doc)
    if not (math.isfinite(threshold) and threshold >= 0):
        raise ValueError(f"threshold must be a finite fraction >= 0, got {threshold!r}")
    base_records = records(baseline_doc)
    cur_records = records(current_doc)
    if series is None:
        series = series_of(baseline_doc)
    family = family or sum(1 for i in cur_records if i in base_records)
    default_level = point_level(family, 1, alpha)
    levels = levels or {}

    verdicts: list[Verdict] = []
    for benchmark_id, cur in cur_records.items():
        if progress is not None:
            progress(len(verdicts), len(cur_records))
        base = base_records.get(benchmark_id)
        limit = _threshold_for(cur, base, threshold)
        if base is None:
            verdicts.append(_one_sided(benchmark_id, "new", cur, limit, metric, current=True))
            continue
        segment = series.get(benchmark_id)
        verdicts.append(judge_records(
            base, cur, limit, metric=metric, alpha=levels.get(benchmark_id, default_level),
            stored_p50s=segment.current if segment else (),
            stored_label=segment.describe_current() if segment else ""))
    for benchmark_id, base in base_records.items():
        if benchmark_id not in cur_records:
            limit = _threshold_for(None, base, threshold)
            verdicts.append(_one_sided(benchmark_id, "missing", base, limit, metric, current=False))

    return Comparison(
        verdicts=tuple(verdicts),
        metric=metric,
        threshold=threshold,
        alpha=alpha,
        fingerprint_differences=tuple(
            fingerprint_differences(
                baseline_doc["distbench"]["environment"], current_doc["distbench"]["environment"],
                nccl_tests.FINGERPRINT if foreign else FINGERPRINT_FIELDS)
            + placement_differences(base_records, cur_records)
            + timing_differences(base_records, cur_records)
        ),
        baseline_label=baseline_label,
        current_label=current_label,
        family=family,
        family_unit=family_unit,
    )


def judged_count(baseline_doc: dict[str, Any], current_doc: dict[str, Any]) -> int:
    """How many benchmarks compare_documents would judge (in both documents)."""
    baseline_doc, current_doc = nccl_tests.aligned(baseline_doc, current_doc)
    base = records(baseline_doc)
    return sum(1 for benchmark_id in records(current_doc) if benchmark_id in base)


def _threshold_for(cur: dict | None, base: dict | None, default: float) -> float:
    for record in (cur, base):
        if record is not None and record.get("threshold") is not None:
            return float(record["threshold"])
    return default


def _one_sided(
    benchmark_id: str, kind: Kind, record: dict, limit: float, metric: str, *, current: bool
) -> Verdict:
    p50 = median(record["samples"])
    value = record["summary"][metric]
    return Verdict(
        id=benchmark_id,
        kind=kind,
        baseline_p50=None if current else p50,
        current_p50=p50 if current else None,
        change=None,
        p_value=None,
        threshold=limit,
        name=record["name"],
        family=record["family"],
        nbytes=record.get("nbytes"),
        metric=metric,
        baseline_value=None if current else value,
        current_value=value if current else None,
        metric_change=None,
    )


def fingerprint_differences(baseline_env: dict[str, Any], current_env: dict[str, Any],
                            fields: Sequence[str] = FINGERPRINT_FIELDS) -> list[str]:
    """Human-readable lines for each fingerprint field that differs between two environments."""
    lines = []
    for key in fields:
        base = baseline_env.get(key)
        cur = current_env.get(key)
        if key == "world_sizes":
            base, cur = as_sorted_set(base), as_sorted_set(cur)
        if base != cur:
            lines.append(f"{key}: {describe(base)} (baseline) vs {describe(cur)} (current)")
    return lines


def placement_differences(base_records: dict[str, dict[str, Any]],
                          cur_records: dict[str, dict[str, Any]]) -> list[str]:
    """One line per pair of placements that differ between matched benchmarks.

    A/B records are measured packed on one CPU (docs/gating.md): their absolute times are not
    those of a spread run, so comparing the two is comparing placements, not code. Records from
    before placements were recorded say nothing and are not flagged.
    """
    pairs = Counter(
        (base["placement"], cur["placement"])
        for benchmark_id, cur in cur_records.items()
        if (base := base_records.get(benchmark_id)) is not None
        and base.get("placement") and cur.get("placement")
        and base["placement"] != cur["placement"]
    )
    return [f"placement: {b} (baseline) vs {c} (current) for {n} benchmark(s); absolute times "
            "depend on where the ranks ran (docs/gating.md)"
            for (b, c), n in sorted(pairs.items())]


def timing_of(record: Record) -> str | None:
    """How a record's samples were taken, where that can be known. Before `timing` was
    recorded, every CUDA measurement synchronized the device after each call; a CPU one was
    host-timed per call as it still is (nothing to tell apart)."""
    return record.get("timing") or ("cuda-each" if record.get("device") == "cuda" else None)


def timing_differences(base_records: dict[str, dict[str, Any]],
                       cur_records: dict[str, dict[str, Any]]) -> list[str]:
    """One line per pair of timings that differ between matched benchmarks.

    A CUDA batch sample has no launch or synchronization in it and a per-call one has both
    (docs/gpu.md): for small messages they differ several-fold whatever the code does. Samples
    a test timed itself (timing "test") are its own business and never flagged.
    """
    pairs: Counter[tuple[str, str]] = Counter()
    for benchmark_id, cur in cur_records.items():
        base = base_records.get(benchmark_id)
        if base is None:
            continue
        b, c = timing_of(base), timing_of(cur)
        if b and c and b != c and "test" not in (b, c):
            pairs[(b, c)] += 1
    return [f"timing: {b} (baseline) vs {c} (current) for {n} benchmark(s); the two measure "
            "different things (docs/gpu.md)" for (b, c), n in sorted(pairs.items())]



def speed_difference(
    baseline_env: dict[str, Any], current_env: dict[str, Any], tolerance: float = 0.10
) -> str | None:
    """A line when the machine itself ran at another speed in the two runs, else None.

    Both runs time a fixed CPU loop at their start and end (environment "cpu_probe_s"); a
    difference beyond `tolerance` means the verdicts may reflect the machine, not the code.
    """
    base = _probe(baseline_env)
    cur = _probe(current_env)
    if base is None or cur is None or base <= 0:
        return None
    ratio = cur / base
    if abs(ratio - 1) <= tolerance:
        return None
    return (
        f"machine speed: a fixed CPU loop took {cur * 1e3:.1f} ms in the current run vs "
        f"{base * 1e3:.1f} ms in the baseline ({ratio:.2f}x); the machine itself "
        f"{'slowed down' if ratio > 1 else 'sped up'}, so verdicts may not come from the code"
    )


def _probe(environment: dict[str, Any]) -> float | None:
    values = environment.get("cpu_probe_s")
    if not isinstance(values, list):
        return None
    numbers = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v) and v > 0]
    return median(numbers) if numbers else None
