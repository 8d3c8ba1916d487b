"""Byte and rate arithmetic of the message families (pure; no torch).

One timed iteration moves `messages_per_iteration` messages of `nbytes` each; the record keeps
one time per iteration (slowest rank) and each rank's own times.  Means are over the whole
timed region (total messages / the slowest rank's total time, as OSU and the seed's TOTALS
line report them); p50 and p95 are rates of the median and the 95th-percentile (slower)
iteration.  MB/s is decimal (1e6 bytes/s).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pytest_distbench.results.document.record import Record
from pytest_distbench.results.statistics.interval import block_bootstrap_mean
from pytest_distbench.results.statistics.noise import t_975
from pytest_distbench.results.statistics.stats import percentile, summarize

#: A window never carries more than this many bytes (64 MiB): at 64 MiB messages a window of
#: 64 would be 4 GiB per iteration, minutes per point on loopback, for no new information.
WINDOW_BYTES_CAP = 64 << 20
#: Distinct buffers per side are capped by the same amount of memory; messages of a window
#: beyond it reuse buffers round robin (as OSU reuses one buffer for the whole window).
SLOT_BYTES_CAP = 64 << 20
#: A message-rate iteration carries about this many messages (whole rounds of credits) at
#: small sizes, so the per-iteration clock read is spread over many messages.
BATCH_MESSAGES = 64
#: ... and at most about this many bytes, so a large-message iteration stays short.
BATCH_BYTES = 16 << 20


def effective_window(window: int, nbytes: int) -> int:
    """Messages per window: the requested window, capped at WINDOW_BYTES_CAP, at least 1."""
    _positive(window, "window")
    _positive(nbytes, "nbytes")
    return max(1, min(window, WINDOW_BYTES_CAP // nbytes))


def slot_count(window: int, nbytes: int) -> int:
    """Distinct send/receive buffers for a window (each checked on its own)."""
    _positive(window, "window")
    _positive(nbytes, "nbytes")
    return max(1, min(window, SLOT_BYTES_CAP // nbytes))


def rounds_per_iteration(credits: int, nbytes: int) -> int:
    """Rounds of `credits` messages (each followed by one acknowledgement) per iteration."""
    _positive(credits, "credits")
    _positive(nbytes, "nbytes")
    target = max(1, min(BATCH_MESSAGES, BATCH_BYTES // nbytes))
    return max(1, math.ceil(target / credits))


def _positive(value: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be a positive int, got {value!r}")


def _per_second(amount: float, seconds: float) -> float | None:
    return amount / seconds if seconds > 0 else None


def message_rates(
    samples: Sequence[float], messages_per_iteration: int, nbytes: int,
    rank_samples: Sequence[Sequence[float]] | None = None,
) -> dict[str, Any]:
    """Totals and rates of a message benchmark from its per-iteration times (seconds).

    `samples` are the slowest rank's time per iteration (p50, p95).  The totals take the
    slowest rank's whole timed region from `rank_samples` when given: summing per-iteration
    maxima would count a stall twice when two ranks see it in neighbouring iterations.
    """
    _positive(messages_per_iteration, "messages_per_iteration")
    if not samples:
        raise ValueError("no samples")
    k = messages_per_iteration
    slowest = max(rank_samples, key=sum) if rank_samples else samples
    total_s = float(sum(slowest))
    messages = k * len(samples)
    ordered = sorted(samples)
    p50, p95 = percentile(ordered, 50), percentile(ordered, 95)
    rate = _per_second(messages, total_s)
    return {
        "messages_per_iteration": k,
        "total_messages": messages,
        "total_bytes": messages * nbytes,
        "total_s": total_s,
        "msgs_per_s": rate,
        "us_per_msg": 1e6 * total_s / messages,
        "mbps": None if rate is None else rate * nbytes / 1e6,
        "msgs_per_s_p50": _per_second(k, p50),
        "msgs_per_s_p95": _per_second(k, p95),
        "mbps_p50": None if p50 <= 0 else k * nbytes / p50 / 1e6,
        "mbps_p95": None if p95 <= 0 else k * nbytes / p95 / 1e6,
        **rate_interval(slowest, k, nbytes),
    }


def rate_interval(times: Sequence[float], k: int, nbytes: int) -> dict[str, Any]:
    """The 95 % interval of the whole-region rate (k messages per iteration / the mean time
    per iteration of the slowest rank): a block bootstrap of that mean (statistics/interval.py);
    where too few iterations give too few blocks, the Student t interval of the mean
    (mean_t_interval); None below MIN_T_ITERATIONS."""
    out: dict[str, Any] = dict.fromkeys(("msgs_per_s_ci_low", "msgs_per_s_ci_high",
                                         "mbps_ci_low", "mbps_ci_high", "rate_ci_pct"))
    bounds = block_bootstrap_mean(list(times)) or mean_t_interval(times)
    if bounds is None or bounds[0] <= 0:
        return out
    mean = sum(times) / len(times)
    low, high = k / bounds[1], k / bounds[0]
    out.update(msgs_per_s_ci_low=low, msgs_per_s_ci_high=high,
               mbps_ci_low=low * nbytes / 1e6, mbps_ci_high=high * nbytes / 1e6,
               rate_ci_pct=100.0 * mean * (1 / bounds[0] - 1 / bounds[1]) / 2)
    return out


#: Fewest iterations a rate's interval is given from: two would print a t of 12.7.
MIN_T_ITERATIONS = 3


def mean_t_interval(times: Sequence[float]) -> tuple[float, float] | None:
    """The 95 % Student t interval of the mean of `times`, the iterations taken as independent;
    None for fewer than MIN_T_ITERATIONS. For a run too short for the block bootstrap (a
    message-rate iteration of 64 messages took 50-70 ms here: 6-15 of them in a 0.5 s budget):
    without it such a run printed the session's noise alone (± 6.8 %) where its runs needed
    ± 19 % (docs/user-guide.md, "What the ± means"). Correlated iterations make it, if anything,
    too narrow; the printed ± is it widened by the session's noise."""
    n = len(times)
    if n < MIN_T_ITERATIONS:
        return None
    summary = summarize(times)
    half = t_975(n - 1) * summary.stddev / math.sqrt(n)
    return summary.mean - half, summary.mean + half


def one_way_latency(samples: Sequence[float]) -> dict[str, float]:
    """One-way latency (us) from round-trip times: half of each round trip, as osu_latency."""
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    return {
        "one_way_us": 1e6 * percentile(ordered, 50) / 2,
        "one_way_p95_us": 1e6 * percentile(ordered, 95) / 2,
        "one_way_mean_us": 1e6 * sum(samples) / len(samples) / 2,
        "round_trip_us": 1e6 * percentile(ordered, 50),
    }


def record_rates(record: Record) -> dict[str, Any]:
    """Derived figures of a p2p or message-rate record (registered in family.py)."""
    figures = record.get("figures") or {}
    k = figures.get("messages_per_iteration")
    samples = record.get("samples") or []
    if not k or not samples or not record.get("nbytes"):
        return {}
    out = message_rates(samples, int(k), int(record["nbytes"]), record.get("rank_samples"))
    if figures.get("round_trip"):
        out.update(one_way_latency(samples))
        # The mean over the same timed region the totals use.
        out["one_way_mean_us"] = 1e6 * out["total_s"] / len(samples) / 2
    return out
