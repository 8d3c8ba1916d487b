"""Result tables of the message families (no torch): OSU style for p2p, arras style for
message rate.  Registered by the two families' family.py."""

from __future__ import annotations

from typing import Any

from ... import units
from ...results.document.record import Record
from ...results.rendering import ci, names
from ...results.rendering.plot_spec import bandwidth_cell


def _wrong(record: Record) -> str:
    return "N/A" if record.get("wrong") is None else str(record["wrong"])


def render_osu(records: list[Record]) -> str:
    """One p2p family (latency, bandwidth, bibw or pairs) of one backend and world."""
    records = sorted(records, key=lambda r: (r["nbytes"] or 0, r["id"]))
    if any((r.get("figures") or {}).get("round_trip") for r in records):
        return _latency(records)
    return _rates(records)


def _latency(records: list[Record]) -> str:
    rows = []
    for r in records:
        f = r.get("figures") or {}
        rows.append([
            str(r["nbytes"]),
            ci.with_pct(units.format_duration_us(f.get("one_way_us", float("nan")) / 1e6),
                        ci.p50_pct(r), r),
            units.format_duration_us(f.get("one_way_p95_us", float("nan")) / 1e6),
            units.format_duration_us(f.get("one_way_mean_us", float("nan")) / 1e6),
            _wrong(r),
            str(r["iterations"]),
        ])
    headers = ["size (B)", "one-way p50 (us) ± 95% CI", "one-way p95 (us)", "one-way mean (us)",
               "#wrong", "iters"]
    return (names.fitted_table(records, rows, headers, lambda r: r["nbytes"])
            + "\n# one-way latency = round trip / 2 (ping-pong, slowest rank per round trip)")


def _rates(records: list[Record]) -> str:
    rows = []
    for r in records:
        f = r.get("figures") or {}
        rows.append([
            str(r["nbytes"]),
            str(f.get("window", "-")),
            str(f.get("pairs", "-")),
            ci.with_pct(units.figure_cell(f.get("mbps")), ci.printed_rate_pct(r), r),
            units.figure_cell(f.get("mbps_p50")),
            units.figure_cell(f.get("mbps_p95")),
            units.figure_cell(f.get("msgs_per_s")),
            units.figure_cell(f.get("msgs_per_s_p50")),
            units.figure_cell(f.get("msgs_per_s_p95")),
            _wrong(r),
            str(r["iterations"]),
        ])
    headers = ["size (B)", "window", "pairs", "MB/s ± 95% CI", "MB/s p50", "MB/s p95", "msgs/s",
               "msgs/s p50", "msgs/s p95", "#wrong", "iters"]
    return (names.fitted_table(records, rows, headers, _rate_key)
            + "\n# MB/s = 1e6 B/s over all pairs (and both directions for bibw); plain columns "
              "= total messages / total time (as OSU reports), its 95 % CI a block bootstrap over "
              "windows widened by the run-to-run noise; p50/p95 = rate of the median / "
              "95th-percentile (slower) window")


def _rate_key(record: Record) -> tuple[Any, ...]:
    f = record.get("figures") or {}
    return record["nbytes"], f.get("window"), f.get("pairs")


def _arras_key(record: Record) -> tuple[Any, ...]:
    f = record.get("figures") or {}
    return f.get("transport"), f.get("path"), record["nbytes"], f.get("credits")


PATH_ORDER = ("client_to_computation", "computation_to_client", "computation_to_computation")


def _path_rank(path: str) -> int:
    return PATH_ORDER.index(path) if path in PATH_ORDER else len(PATH_ORDER)


def render_arras(records: list[Record]) -> str:
    """Message rate by path, size and credits, with the seed's totals: one table per transport
    (a transport column would push the table past a terminal's 120 columns)."""
    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        f = r.get("figures") or {}
        return (str(f.get("transport", "")), _path_rank(f.get("path", "")), f.get("path", ""),
                r["nbytes"] or 0, f.get("credits", 0), r["id"])

    tables: dict[str, tuple[list[list[str]], list[Record]]] = {}
    for r in sorted(records, key=key):
        f = r.get("figures") or {}
        rows, of = tables.setdefault(str(f.get("transport", "-")), ([], []))
        of.append(r)
        rows.append([
            str(f.get("path", "-")),
            str(r["nbytes"]),
            str(f.get("credits", "-")),
            ci.with_pct(units.figure_cell(f.get("msgs_per_s")), ci.printed_rate_pct(r), r),
            units.figure_cell(f.get("us_per_msg")),
            _bandwidth(f.get("mbps")),
            str(f.get("total_messages", "-")),
            units.figure_cell(f.get("total_s")),
            _wrong(r),
        ])
    headers = ["path", "size (B)", "credits", "msgs/s ± 95% CI", "us/msg", "bandwidth", "msgs",
               "time (s)", "#wrong"]
    return ("\n".join(f"# transport: {transport}\n"
                      + names.fitted_table(of, rows, headers, _arras_key)
                      for transport, (rows, of) in tables.items())
            + "\n# totals over the timed region: msgs/s = msgs / time, us/msg = time / msgs, "
              "bandwidth = bytes / time in decimal units (1 MB/s = 1e6 B/s); 95 % CI of "
              "msgs/s: block bootstrap over iterations; credits = "
              "messages sent before an acknowledgement is awaited")


def _bandwidth(mbps: float | None) -> str:
    """`0.148 KB/s`, in the unit the figure reads in (one-byte messages move little: a column
    fixed in MB/s printed 0.0001483)."""
    return "-" if mbps is None else bandwidth_cell(mbps / 1e3)
