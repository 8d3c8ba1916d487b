"""Statistical verdicts: did a benchmark get slower, faster, or stay the same?

A regression needs two things at once: a one-sided Mann-Whitney U test on the raw samples that
says "current is stochastically slower" at ``alpha``, and a median (p50) slowdown larger than the
threshold. The rank test ignores how far the heavy tail reaches (an occasional 15x stall moves a
mean, not a rank), and the threshold keeps statistically real but tiny shifts from failing CI.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pytest_distbench.results.storage import records

Kind = Literal["regression", "improvement", "unchanged", "new", "missing"]

METRICS = ("p50", "min", "mean", "p90", "p95", "p99")
DEFAULT_THRESHOLD = 0.10
DEFAULT_ALPHA = 0.01
# Ten batches against ten: the smallest one-sided Mann-Whitney p-value is 1/184756, so a
# consistent shift is significant at alpha=0.01 even though each side is only ten numbers.
BATCHES = 10

# The exact Mann-Whitney distribution is cheap for small samples but its cost explodes when one
# side is large (5 vs 100000 samples takes minutes); past this many pairs the normal
# approximation is both fast and accurate.
_EXACT_MAX_PAIRS = 2500

# Environment fields that change what a benchmark measures; hostname and friends do not.
FINGERPRINT_FIELDS = ("torch", "cpu_model", "cpu_count", "gpus", "cuda", "nccl", "world_sizes")


@dataclass(frozen=True)
class Verdict:
    """The outcome for one benchmark id.

    ``change`` is current/baseline - 1 on the p50 time (positive = slower) and decides ``kind``;
    ``metric_change`` is the same ratio on the statistic the user chose to display.
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
    # The smallest slowdown (fraction) this comparison tells from noise at its error rates, and
    # what noise that was measured from; a benchmark that cannot see its threshold is not
    # gateable (docs/gating.md).
    detectable: float | None = None
    noise: str = ""
    z: float | None = None  # robust z against a stored history (None: single-run verdict)

    @property
    def gateable(self) -> bool:
        return self.detectable is not None and self.detectable <= self.threshold


@dataclass(frozen=True)
class Comparison:
    """Every benchmark of two documents, judged; labels name the two sides in reports."""

    verdicts: tuple[Verdict, ...]
    metric: str
    threshold: float
    alpha: float
    fingerprint_differences: tuple[str, ...] = ()
    baseline_label: str = "baseline"
    current_label: str = "current"
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
        kinds = ("regression", "improvement", "unchanged", "new", "missing")
        return {kind: len(self.of_kind(kind)) for kind in kinds}


def judge(
    baseline_samples: Sequence[float],
    current_samples: Sequence[float],
    threshold: float,
    alpha: float = DEFAULT_ALPHA,
) -> tuple[Kind, float, float]:
    """Judge current against baseline samples (seconds; lower is better).

    Returns (kind, change, p_value): kind is "regression", "improvement" or "unchanged";
    change is current p50 / baseline p50 - 1; p_value is the one-sided p-value in the direction
    the p50 moved. A regression needs current p50 > baseline p50 x (1 + threshold); an
    improvement needs baseline p50 > current p50 x (1 + threshold), i.e. throughput up by more
    than the threshold, which makes judge(a, b) and judge(b, a) exact mirror images.
    """
    base_in_order = [float(x) for x in baseline_samples]
    cur_in_order = [float(x) for x in current_samples]
    base, cur = sorted(base_in_order), sorted(cur_in_order)
    if not base or not cur:
        raise ValueError("judge needs at least one baseline and one current sample")
    if not all(math.isfinite(x) for x in base + cur):
        raise ValueError("samples must be finite numbers")
    if not (math.isfinite(threshold) and threshold >= 0):
        raise ValueError(f"threshold must be a finite fraction >= 0, got {threshold!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha!r}")

    base_p50 = _median(base)
    cur_p50 = _median(cur)
    change = _ratio_change(base_p50, cur_p50)
    p_slower, p_faster = _one_sided_p_values(
        sorted(batch_medians(base_in_order)), sorted(batch_medians(cur_in_order))
    )

    if cur_p50 > base_p50:
        p_value = p_slower
    elif cur_p50 < base_p50:
        p_value = p_faster
    else:
        p_value = min(p_slower, p_faster)

    if cur_p50 > base_p50 * (1 + threshold) and p_slower < alpha:
        return "regression", change, p_value
    if base_p50 > cur_p50 * (1 + threshold) and p_faster < alpha:
        return "improvement", change, p_value
    return "unchanged", change, p_value


def batch_medians(samples: Sequence[float], batches: int = BATCHES) -> list[float]:
    """Medians of `batches` consecutive runs of samples, in time order.

    Consecutive iterations are not independent: the loopback and the scheduler drift between
    fast and slow states that last many iterations. A rank test on thousands of raw samples
    then calls any such drift significant. Batch medians are close to independent, so the
    test asks whether the run as a whole moved, not whether a few milliseconds of it did.
    With fewer than two samples per batch the raw samples are used.
    """
    if len(samples) < 2 * batches:
        return list(samples)
    edges = [round(i * len(samples) / batches) for i in range(batches + 1)]
    return [_median(samples[edges[i]:edges[i + 1]]) for i in range(batches)]


def _median(values: Sequence[float]) -> float:
    # Midpoint written so that two huge samples cannot overflow to inf, as (a + b) / 2 can.
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    low, high = ordered[mid - 1], ordered[mid]
    return low + (high - low) / 2


def _ratio_change(base: float, cur: float) -> float:
    if base == 0:
        # Only possible with a clock too coarse for the operation; any time is then "infinitely"
        # slower, and equal zeros are no change at all.
        return 0.0 if cur == 0 else math.inf
    return cur / base - 1


def _one_sided_p_values(base: list[float], cur: list[float]) -> tuple[float, float]:
    """(p that current is slower, p that current is faster), both one-sided."""
    from scipy.stats import mannwhitneyu  # lazy: scipy.stats takes ~2 s to import

    # Always hand scipy the two sets in the same order, whichever is "baseline", so swapping
    # the arguments gives bit-identical p-values and the verdict is exactly symmetric.
    swap = cur > base
    x, y = (base, cur) if swap else (cur, base)
    ties = len(set(x).union(y)) < len(x) + len(y)
    method = "exact" if not ties and len(x) * len(y) <= _EXACT_MAX_PAIRS else "asymptotic"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p_x_greater = float(mannwhitneyu(x, y, alternative="greater", method=method).pvalue)
        p_x_less = float(mannwhitneyu(x, y, alternative="less", method=method).pvalue)
    # A degenerate test (e.g. every sample equal) is no evidence of anything.
    p_x_greater = p_x_greater if math.isfinite(p_x_greater) else 1.0
    p_x_less = p_x_less if math.isfinite(p_x_less) else 1.0
    if swap:  # x is the baseline: "current greater" is "x less"
        return p_x_less, p_x_greater
    return p_x_greater, p_x_less


def within_run_detectable(
    baseline_samples: Sequence[float], current_samples: Sequence[float],
    alpha: float = DEFAULT_ALPHA,
) -> float:
    """Smallest slowdown the batch-median rank test tells from the spread seen INSIDE the two
    runs. Run-to-run noise is invisible to one run per side, so this is a floor, not a promise."""
    from .paired import SIGNED_RANK_EFFICIENCY, detectable_change, robust_sd

    sides = []
    for samples in (baseline_samples, current_samples):
        medians = [m for m in batch_medians(list(samples)) if m > 0]
        if len(medians) < 2:
            return math.inf
        logs = [math.log(m) for m in medians]
        sides.append(robust_sd(logs) ** 2 / len(logs))
    return detectable_change(math.sqrt(sum(sides) / SIGNED_RANK_EFFICIENCY), alpha)


def judge_records(
    base: dict[str, Any],
    cur: dict[str, Any],
    threshold: float,
    *,
    metric: str = "p50",
    alpha: float = DEFAULT_ALPHA,
    stored_p50s: Sequence[float] = (),
) -> Verdict:
    """The verdict for one benchmark present in both runs (validated records).

    With stored_p50s from at least history.MIN_RUNS runs the verdict is judged against their
    run-to-run spread (history.judge_history); otherwise from the two runs' samples alone.
    """
    from .history import MIN_RUNS, judge_history

    z = None
    cur_p50 = _median(cur["samples"])
    usable = [p for p in stored_p50s if p > 0]
    if len(usable) >= MIN_RUNS and cur_p50 > 0:
        h = judge_history(usable, cur_p50, threshold, alpha=alpha)
        kind, change, p_value, z = h.kind, h.change, None, h.z
        detectable, noise = h.detectable, f"run-to-run, {h.runs} runs"
    else:
        kind, change, p_value = judge(base["samples"], cur["samples"], threshold, alpha)
        detectable = within_run_detectable(base["samples"], cur["samples"], alpha)
        noise = "within-run only: run-to-run noise unknown (1 stored run)"
    base_value = base["summary"][metric]
    cur_value = cur["summary"][metric]
    return Verdict(
        id=cur["id"],
        kind=kind,
        baseline_p50=_median(base["samples"]),
        current_p50=cur_p50,
        change=change,
        p_value=p_value,
        threshold=threshold,
        detectable=detectable,
        noise=noise,
        z=z,
        name=cur["name"],
        family=cur["family"],
        nbytes=cur.get("nbytes"),
        metric=metric,
        baseline_value=base_value,
        current_value=cur_value,
        metric_change=_ratio_change(base_value, cur_value),
    )


def compare_documents(
    baseline_doc: dict[str, Any],
    current_doc: dict[str, Any],
    *,
    threshold: float,
    metric: str = "p50",
    alpha: float = DEFAULT_ALPHA,
    baseline_label: str = "baseline",
    current_label: str = "current",
) -> Comparison:
    """Judge every benchmark id found in either (validated) document.

    Ids only in the current document are "new", ids only in the baseline are "missing"; neither
    is a failure. A record's own "threshold" (from the current run) beats ``threshold``.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}")
    if not (math.isfinite(threshold) and threshold >= 0):
        raise ValueError(f"threshold must be a finite fraction >= 0, got {threshold!r}")
    from .history import p50_runs

    base_records = records(baseline_doc)
    cur_records = records(current_doc)
    runs = p50_runs(baseline_doc)

    verdicts: list[Verdict] = []
    for benchmark_id, cur in cur_records.items():
        base = base_records.get(benchmark_id)
        limit = _threshold_for(cur, base, threshold)
        if base is None:
            verdicts.append(_one_sided(benchmark_id, "new", cur, limit, metric, current=True))
            continue
        stored = [run[benchmark_id] for run in runs if benchmark_id in run]
        verdicts.append(
            judge_records(base, cur, limit, metric=metric, alpha=alpha, stored_p50s=stored)
        )
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
                baseline_doc["distbench"]["environment"], current_doc["distbench"]["environment"]
            )
            + placement_differences(base_records, cur_records)
        ),
        baseline_label=baseline_label,
        current_label=current_label,
    )


def _threshold_for(cur: dict | None, base: dict | None, default: float) -> float:
    for record in (cur, base):
        if record is not None and record.get("threshold") is not None:
            return float(record["threshold"])
    return default


def _one_sided(
    benchmark_id: str, kind: Kind, record: dict, limit: float, metric: str, *, current: bool
) -> Verdict:
    p50 = _median(record["samples"])
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


def fingerprint_differences(baseline_env: dict[str, Any], current_env: dict[str, Any]) -> list[str]:
    """Human-readable lines for each fingerprint field that differs between two environments."""
    lines = []
    for key in FINGERPRINT_FIELDS:
        base = baseline_env.get(key)
        cur = current_env.get(key)
        if key == "world_sizes":
            base, cur = _as_sorted_set(base), _as_sorted_set(cur)
        if base != cur:
            lines.append(f"{key}: {_describe(base)} (baseline) vs {_describe(cur)} (current)")
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


def _as_sorted_set(value: Any) -> Any:
    # The order world sizes were requested in does not change what was measured.
    if isinstance(value, list) and all(isinstance(v, (int, float)) for v in value):
        return sorted(set(value))
    return value


def _describe(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value or '""'
    if isinstance(value, list):
        return "[" + ", ".join(_describe(v) for v in value) + "]" if value else "none"
    if isinstance(value, dict):
        inner = ", ".join(f"{k}={_describe(v)}" for k, v in value.items())
        return "{" + inner + "}"
    return str(value)


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
    return _median(numbers) if numbers else None
