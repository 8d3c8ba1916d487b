"""The session's lines about its own run-to-run noise: what every ± carries, once, and the
points whose runs fell into different regimes."""

from __future__ import annotations

from collections.abc import Sequence

from ... import units
from ..document.record import Record
from ..document.session_intervals import ROUNDS, is_rate
from . import ci
from .ci import NOISE_MISSING_TEXT, UNSTABLE, UNSTABLE_NOTE, unstable


def noise_line(records: Sequence[Record]) -> str | None:
    """One line: what the ± below is, and the run-to-run noise each stratum of similar points
    showed in this session (the half-width of the noise alone, which every row of that
    stratum carries, widest first), or why none was measured."""
    strata: dict[str, float] = {}
    missing = None
    for record in records:
        ci = record.get("p50_ci") or {}
        noise = ci.get("run_noise")
        if ci.get("basis") == ROUNDS:
            continue
        if isinstance(noise, dict) and noise.get("group"):
            strata[noise["group"]] = noise["half_width_pct"]
        elif ci.get("noise_missing"):
            missing = ci["noise_missing"]
    parts = ", ".join(_stratum_text(stratum, pct) for stratum, pct in
                      sorted(strata.items(), key=lambda kv: -kv[1]))
    if strata and missing:
        return ("each ± is the run's own sampling interval combined with the run-to-run noise "
                "of its stratum, measured by running points again in this session (95 %, the "
                f"noise alone): {parts}; rows of strata not named carry their run's own only")
    if strata:
        return ("each ± is the run's own sampling interval combined with the run-to-run noise "
                "of its stratum, measured by running points again in this session (95 %, the "
                f"noise alone): {parts}")
    if missing:
        return f"each ± is the run's own sampling interval: {NOISE_MISSING_TEXT[missing]}"
    return None


def _stratum_text(stratum: str, pct: float) -> str:
    if unstable(pct):  # no ± past 100 % as a figure: its runs differ by more than their value
        return f"{stratum} {UNSTABLE} (its runs differ by more than their own value)"
    return f"{stratum} ± {pct:.2g} %" if pct < 10 else f"{stratum} ± {pct:.0f} %"


def unstable_line(records: Sequence[Record]) -> str | None:
    """What `unstable` in a row means, once, where some row or stratum says it."""
    def shown(record: Record) -> bool:
        noise = (record.get("p50_ci") or {}).get("run_noise")
        pcts = [ci.p50_pct(record), ci.rate_pct(record) if is_rate(record) else None,
                ci.printed_rate_pct(record),
                noise.get("half_width_pct") if isinstance(noise, dict) else None]
        return any(unstable(p) for p in pcts if isinstance(p, (int, float)))

    return UNSTABLE_NOTE if any(shown(r) for r in records) else None


def regime_lines(records: Sequence[Record]) -> list[str]:
    """'all_reduce ws2 1 KiB: runs at 212 us (1) and 4.1 ms (1)' for each point whose runs in
    this session differed by more than noise.REGIME_RATIO."""
    lines = []
    for record in records:
        seen = (record.get("p50_ci") or {}).get("regimes")
        if not seen:
            continue
        rate = is_rate(record)
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
    said = unstable_line(records)
    return ([line] if line else []) + ([said] if said else []) + regimes
