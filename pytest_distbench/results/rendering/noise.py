"""The session's words about its own run-to-run noise: what every ± carries (once), each
table's strata's noise (in its title), and the points whose runs fell into different
regimes."""

from __future__ import annotations

from collections.abc import Sequence

from ... import units
from ..document.record import Record
from ..document.session_intervals import ROUNDS, is_rate
from .ci import NOISE_MISSING_TEXT, pct_text

INTERVAL_LINE = ("each ± is the run's own sampling interval combined with the run-to-run "
                 "noise of its stratum (one operation, backend, world size, run length and time "
                 "scale), measured by running points again in this session; each table's title "
                 "gives its strata's (95 %, the noise alone)")


def noise_line(records: Sequence[Record]) -> str | None:
    """One line: what the ± below is (each table's title gives the noise of its strata:
    table_noise), or why no noise was measured."""
    measured = missing = None
    for record in records:
        ci = record.get("p50_ci") or {}
        if ci.get("basis") == ROUNDS:
            continue
        if isinstance(ci.get("run_noise"), dict):
            measured = True
        elif ci.get("noise_missing"):
            missing = ci["noise_missing"]
    if measured and missing:
        return f"{INTERVAL_LINE}; a table whose title gives none carries its run's own only"
    if measured:
        return INTERVAL_LINE
    if missing:
        return f"each ± is the run's own sampling interval: {NOISE_MISSING_TEXT[missing]}"
    return None


def table_noise(rows: Sequence[Record]) -> str | None:
    """'run-to-run noise ± 11 % (0.5 s budget, 100 us-10 ms), ± 4.2 % (...)': the noise of
    the strata of one table's rows (the half-width of the noise alone, which every row of that
    stratum carries, widest first), each named by what the table's title does not say."""
    strata: dict[str, float] = {}
    for record in rows:
        noise = (record.get("p50_ci") or {}).get("run_noise")
        if isinstance(noise, dict) and noise.get("group"):
            strata[str(noise["group"])] = float(noise["half_width_pct"])
    if not strata:
        return None
    parts = [f"{pct_text(pct)} ({_within_table(stratum, rows[0])})"
             for stratum, pct in sorted(strata.items(), key=lambda kv: -kv[1])]
    return "run-to-run noise " + ", ".join(parts)


def _within_table(stratum: str, record: Record) -> str:
    # The table's title names the operation, backend and world size: the rest tells strata
    # apart (the run length, the time scale, rates).
    said = f"{record['family']} {record['backend']} ws{record['world_size']} "
    return stratum[len(said):] if stratum.startswith(said) else stratum


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
    return ([line] if line else []) + regimes
