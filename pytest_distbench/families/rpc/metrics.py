"""The arithmetic of the RPC family's figures (torch-free, so it is tested on its own).

Rates follow the project contract: one timed iteration moves `messages` messages of `nbytes`
payload bytes each; messages/s = messages / t and MB/s = bytes moved / t / 1e6 (decimal).
The agent/observer metrics follow PyTorch's RPC RL benchmark: agent throughput = batch size /
agent latency, observer throughput = 1 / observer latency, each reported at p50/p75/p90/p95.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...results.statistics.stats import percentile

PERCENTILES = (50, 75, 90, 95)
METRICS = ("agent_latency_s", "agent_throughput", "observer_latency_s", "observer_throughput")


def messages_per_s(messages: int, seconds: float) -> float:
    if seconds <= 0:
        raise ValueError(f"time per iteration must be positive, got {seconds!r}")
    return messages / seconds


def megabytes_per_s(bytes_moved: int, seconds: float) -> float:
    """Decimal MB/s (1e6 bytes per MB)."""
    if seconds <= 0:
        raise ValueError(f"time per iteration must be positive, got {seconds!r}")
    return bytes_moved / seconds / 1e6


def throughputs(latencies_s: Sequence[float], batch_size: int) -> list[float]:
    """Per-sample throughput: `batch_size` requests answered in each latency (seed's rule)."""
    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    out = []
    for latency in latencies_s:
        if not latency > 0:
            raise ValueError(f"latency must be positive to give a throughput, got {latency!r}")
        out.append(batch_size / latency)
    return out


def at_percentiles(values: Sequence[float]) -> dict[str, float]:
    """{"p50": .., "p75": .., "p90": .., "p95": ..}, linear interpolation as numpy's default."""
    ordered = sorted(values)
    return {f"p{p}": percentile(ordered, p) for p in PERCENTILES}


def agent_observer_metrics(
    agent_latencies_s: Sequence[float], observer_latencies_s: Sequence[float], batch_size: int
) -> dict[str, dict[str, float]]:
    """The seed's four metrics at its four percentiles.

    `batch_size` is the agent's batch (the number of observers in batch mode, 1 otherwise).
    """
    return {
        "agent_latency_s": at_percentiles(agent_latencies_s),
        "agent_throughput": at_percentiles(throughputs(agent_latencies_s, batch_size)),
        "observer_latency_s": at_percentiles(observer_latencies_s),
        "observer_throughput": at_percentiles(throughputs(observer_latencies_s, 1)),
    }
