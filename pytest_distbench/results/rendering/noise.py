"""The session's lines about its own run-to-run noise: what every ± carries, once, and the
points whose runs fell into different regimes."""

from __future__ import annotations

from collections.abc import Sequence

from ... import units
from ..document.record import Record


def noise_line(records: Sequence[Record]) -> str | None:
    """One line: the run-to-run noise each group of points showed in this session (the ±
    of the noise alone, widest first), or why none was measured."""
    groups: dict[str, float] = {}
    why = None
    for record in records:
        ci = record.get("p50_ci") or {}
        noise = ci.get("run_noise")
        if isinstance(noise, dict) and noise.get("group"):
            groups[noise["group"]] = noise["half_width_pct"]
        elif ci.get("why"):
            why = ci["why"]
    if groups:
        parts = ", ".join(f"{group} ± {pct:.0f} %" for group, pct in
                          sorted(groups.items(), key=lambda kv: -kv[1]))
        return ("run-to-run noise here (95 %, measured by running points again in this "
                f"session): {parts}; every ± below carries it")
    if why:
        return f"no ± is printed: {why}"
    return None


def regime_lines(records: Sequence[Record]) -> list[str]:
    """'all_reduce ws2 1 KiB: runs at 212 us (1) and 4.1 ms (1)' for each point whose runs in
    this session differed by more than noise.REGIME_RATIO."""
    lines = []
    for record in records:
        seen = (record.get("p50_ci") or {}).get("regimes")
        if not seen:
            continue
        rate = "rate_ci_pct" in (record.get("figures") or {})
        where = f"{record['family']} ws{record['world_size']}"
        if record.get("nbytes") is not None:
            where += f" {units.format_size_exact(record['nbytes'])}"
        runs = " and ".join(
            (f"{units.format_figure(value)} msgs/s" if rate
             else f"{units.format_duration_us(value)} us") + f" ({count} run{'s' * (count > 1)})"
            for value, count in seen)
        lines.append(f"{where} ({record['name']}): runs at {runs}")
    return lines


def noise_lines(records: Sequence[Record]) -> list[str]:
    """The session's run-to-run noise in one line, then the points whose runs fell into
    different regimes."""
    line = noise_line(records)
    regimes = regime_lines(records)
    if regimes:
        regimes = ["points whose runs in this session fell into different regimes (their ± "
                   "spans them):", *(f"  {r}" for r in regimes)]
    return ([line] if line else []) + regimes
