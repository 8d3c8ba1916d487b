"""How the RPC family's records print at the end of a session (registered in family.py).

rpc_latency and rpc_throughput print one row per size; rpc_transports prints the users' table
shape (rows = transport, columns = sizes, round trip in ms), a row per transport that ran;
every other transport of the catalog is a line under the table with the reason, and with more
sizes than fit a terminal the table turns (rows = sizes); agent_observer prints a summary row
per point, and the seed's per-point block under -v (seed_blocks) and in the markdown file.
"""

from __future__ import annotations

from typing import Any

from ... import units
from ...results.document.record import Record
from ...results.rendering import ci, fit, names
from .catalog import BY_NAME, TRANSPORTS, unavailable
from .metrics import METRICS, PERCENTILES
from .options import ITERATION_BYTES_CAP

_SEED_LABELS = {
    "agent_latency_s": "agent latency",
    "agent_throughput": "agent throughput",
    "observer_latency_s": "observer latency",
    "observer_throughput": "observer throughput",
}


def _table(rows: list[list[Any]], headers: list[str]) -> str:
    return fit.table(rows, headers, colalign=("right",) * len(headers))


def _cell(p50_s: float, record: Record) -> str:
    """A transports-table cell: the round trip in ms ± its interval."""
    return ci.with_pct(units.format_figure(p50_s * 1e3), ci.p50_pct(record), record)


def render_latency(records: list[Record]) -> str:
    rows = []
    for r in records:
        s, f = r["summary"], r["figures"]
        rows.append([units.size_cell(r["nbytes"]),
                     ci.with_pct(units.format_duration_us(s["p50"]), ci.p50_pct(r), r),
                     units.format_duration_us(s["mean"]),
                     units.format_duration_us(s["p95"]), units.figure_cell(f.get("mbps")),
                     r["wrong"] if r["wrong"] is not None else "N/A",
                     f"{r['stalls']}/{r['iterations']}"])
    return names.fitted_table(records, rows, ["size", "round trip p50 (us) ± 95% CI", "mean (us)",
                                        "round trip p95 (us)", "MB/s (payload both ways)",
                                        "#wrong", "stalls"], lambda r: r["nbytes"]) + (
        "\n# rpc_sync to rank 1, which echoes the payload back: times are ROUND TRIPS; "
        "MB/s = 2 x size / p50")


def render_throughput(records: list[Record]) -> str:
    records = sorted(records, key=lambda r: (r["nbytes"] or 0, r["figures"].get("credits", 0)))
    rows = []
    capped = ""
    for r in records:
        s, f = r["summary"], r["figures"]
        credits = f.get("credits", "-")
        if f.get("credits_requested", credits) != credits:  # the byte cap left fewer in flight
            credits = f"{credits} (of {f['credits_requested']})"
            # The note explains a row of this table, in its own figures.
            capped = capped or (f"; '{credits}': {f['credits_requested']} requested, "
                                f"{f['credits']} ran in flight (an iteration carries at most "
                                f"{units.format_size(ITERATION_BYTES_CAP)})")
        rows.append([units.size_cell(r["nbytes"]), credits, f.get("messages_per_iteration"),
                     units.format_duration_us(s["p50"]),
                     ci.with_pct(units.figure_cell(f.get("msgs_per_s")), ci.rate_pct(r), r),
                     units.figure_cell(f.get("mbps")), f"{r['stalls']}/{r['iterations']}"])
    return names.fitted_table(records, rows, ["size", "credits", "msgs/iter", "iteration p50 (us)",
                                        "msgs/s ± 95% CI", "MB/s (payload one way)", "stalls"],
                        lambda r: (r["nbytes"], r["figures"].get("credits"))) + (
        f"\n# rpc_async to rank 1 with at most `credits` unanswered{capped}; rates from the p50 "
        "iteration; MB/s = msgs/s x size / 1e6")


def render_transports(records: list[Record]) -> str:
    sizes = sorted({r["nbytes"] for r in records if r["nbytes"] is not None})
    cells: dict[str, dict[int, float]] = {}
    kept: dict[tuple[str, int], dict[str, Any]] = {}
    for r in records:
        transport = r["figures"].get("transport", "?")
        cells.setdefault(transport, {})[r["nbytes"]] = r["summary"]["p50"]
        kept[transport, r["nbytes"]] = r
    ran = [t.name for t in TRANSPORTS if t.name in cells] + sorted(set(cells) - set(BY_NAME))
    # A transport that ran at no size is one line under the table, with the reason.
    skipped = [f"# {t.name}: skipped, "
               + (unavailable(t) or "not run in this session (deselected, or it failed)")
               for t in TRANSPORTS if t.name not in cells]
    rows = [[name] + [_cell(cells[name][n], kept[name, n]) if n in cells[name] else "-"
                      for n in sizes] for name in ran]
    headers = ["transport (round trip, ms)"] + [units.size_cell(n) for n in sizes]
    text = _table(rows, headers)
    turned = ""
    if fit.widest(text) > fit.WIDTH and ran:
        # More sizes than a terminal has columns for: sizes down, transports across.
        text = _table([[units.size_cell(n)] + [row[1 + i] for row in rows]
                       for i, n in enumerate(sizes)], ["size"] + ran)
        turned = "; rows = sizes, columns = transports"
    return "\n".join([text, "# p50 ± 95 % CI of the round trip (payload there and back), in ms"
                       + turned] + skipped)


def seed_block(record: Record, x_axis: str = "world_size") -> str:
    """The seed's per-point report: latency in seconds (3 decimals), throughput as integers."""
    f = record["figures"]
    lines = ["---------", "Benchmark", f"{x_axis} : {record['world_size']}"]
    for key in ("batch", "state_size", "nlayers", "out_features", "episodes", "steps"):
        if key in f:
            value = f[key]
            if key == "state_size":
                value = "-".join(str(d) for d in value)
            lines.append(f"{key} : {value}")
    for metric in METRICS:
        values = f["metrics"][metric]
        if metric.endswith("_s"):
            # Seconds, as the seed prints them, but to four significant digits: the seed's
            # round(x, 3) shows a 0.58 ms latency as 0.001.
            shown = ", ".join(f"{p}: {units.format_figure(values[f'p{p}'])}"
                              for p in PERCENTILES)
        else:
            shown = ", ".join(f"{p}: {int(values[f'p{p}'])}" for p in PERCENTILES)
        lines.append(f"{_SEED_LABELS[metric]} -- {{{shown}}}")
        lines.append("")
    return "\n".join(lines).rstrip()


def _points(records: list[Record]) -> list[Record]:
    return [r for r in records if r["figures"].get("metric") == "observer_latency"]


def render_agent_observer(records: list[Record]) -> str:
    rows = []
    for r in _points(records):
        f = r["figures"]
        m = f["metrics"]
        rows.append([
            "true" if f["batch"] else "false", "-".join(str(d) for d in f["state_size"]),
            f["nlayers"], f["out_features"], f"{f['episodes']}x{f['steps']}",
            units.figure_cell(m["agent_latency_s"]["p50"] * 1e3),
            units.figure_cell(m["agent_latency_s"]["p95"] * 1e3),
            units.figure_cell(m["agent_throughput"]["p50"]),
            units.figure_cell(m["observer_latency_s"]["p50"] * 1e3),
            units.figure_cell(m["observer_latency_s"]["p95"] * 1e3),
            units.figure_cell(m["observer_throughput"]["p50"]),
            units.figure_cell(f.get("run_s")),
            ",".join(f.get("tensorpipe_transports", ["default"])),
        ])
    headers = ["batch", "state", "nlayers", "out", "episodes x steps", "agent p50 (ms)",
               "agent p95 (ms)", "agent req/s p50", "observer p50 (ms)", "observer p95 (ms)",
               "observer req/s p50", "run (s)", "TensorPipe"]
    transports = {row[-1] for row in rows}
    if len(transports) == 1:  # one value for every row: said once, in the note below
        rows = [row[:-1] for row in rows]
        headers = headers[:-1]
    note = ("# coordinator rank 0, agent rank 1, observers ranks 2..n-1; agent throughput = "
            "batch size / agent latency, observer throughput = 1 / observer latency; "
            "the seed runs 10 episodes x 100 steps (-v: the seed's own block per point)"
            + (f"; TensorPipe transports: {transports.pop()}" if len(transports) == 1 else ""))
    return "\n".join([_table(rows, headers), note])


def seed_blocks(records: list[Record]) -> str:
    """The seed's block of every point (the -v detail of the agent/observer table)."""
    return "\n".join(seed_block(r) for r in _points(records))


def throughput_caveat(rows: list[Record]) -> str | None:
    """The digest's word on rows that ran fewer credits in flight than they asked for (their
    names say the credits requested; the table says `4 (of 10)`)."""
    capped = sorted({(f["credits_requested"], f.get("credits")) for r in rows
                     if (f := r.get("figures") or {}).get("credits_requested", f.get("credits"))
                     != f.get("credits")}, key=str)
    if not capped:
        return None
    return "; ".join(f"credits={asked} ran {ran} in flight (the byte cap)" for asked, ran in capped)
