"""The replay family's registration: its setting and its table (the whole step, then the
breakdown by op, group size and size bucket). No torch."""

from __future__ import annotations

from typing import Any

from ... import units
from ...registry import Family
from ...results.document.record import Record
from ...results.rendering import ci, fit
from ...results.rendering.fit import printable
from .breakdown import BUCKET_BASE
from .options import SETTINGS, SUITES

STEP_HEADERS = ["trace", "ranks used", "steps", "calls", "bytes/rank", "p50 (ms) ± 95% CI",
                "original (ms)", "ratio", "algbw (GB/s)", "#wrong"]
BREAKDOWN_HEADERS = ["op", "group", "size", "calls", "bytes", "us/call", "original us/call",
                     "ratio", "time %", "algbw (GB/s)", "busbw (GB/s)"]
NOTE = ("# one iteration = one replay of every captured step's calls; bytes/rank = the busiest "
        "rank's bytes per replay (nccl-tests' size of each call); breakdown over all the "
        "trace's ranks per replay: a call's time runs from its issue to the end of its wait "
        "(replays after the first, every iteration of the run); time % = share of the summed "
        "call times; algbw = bytes / time, busbw = algbw x the nccl-tests factor of the op "
        "and group size (- where no data moves: an in-place all_reduce, broadcast or reduce in a "
        "group of one rank); original = the captured step (its calls: issue to the backend's "
        "completion), ratio = replay / original; GB/s = 1e9 B/s, sizes in binary units")


def size_bucket(low: int) -> str:
    """`64 KiB-256 KiB` for the bucket starting at 64 KiB; `0 B` for calls of no bytes."""
    if low == 0:
        return "0 B"
    return f"{units.format_size(low)}-{units.format_size(low * BUCKET_BASE)}"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else units.format_figure(seconds * 1e3, 3)


def _step_row(r: Record) -> list[Any]:
    f = r.get("figures") or {}
    p50 = (r.get("summary") or {}).get("p50")
    nbytes = r.get("nbytes") or 0
    algbw = nbytes / p50 / 1e9 if p50 and nbytes else None
    original = f.get("original_s")
    return [printable(f.get("trace", "-")), f.get("trace_ranks", "-"), f.get("steps", "-"),
            f.get("calls", "-"), units.size_cell(nbytes),
            ci.with_pct(_ms(p50), ci.p50_pct(r), r), _ms(original), _ratio(p50, original),
            _gbps(algbw), "N/A" if r.get("wrong") is None else r["wrong"]]


def _ratio(replayed: float | None, original: float | None) -> str:
    return "-" if not replayed or not original else f"{replayed / original:.2f}"


def _gbps(value: float | None) -> str:
    """Bandwidth to three significant digits; the tiny ones of a few bytes' calls as such."""
    if value is None:
        return "-"
    return "<0.001" if value < 0.001 else units.format_figure(value, 3)


def _breakdown_rows(rows: list[dict[str, Any]]) -> list[list[Any]]:
    out = []
    for b in rows:
        share = b.get("share")
        known, original = b.get("original_calls") or 0, b.get("original_seconds")
        out.append([printable(b["op"]), b["group_size"], size_bucket(b["bucket"]), b["calls"],
                    units.size_cell(b["bytes"]),
                    units.format_duration_us(b["seconds"] / b["calls"]) if b["calls"] else "-",
                    units.format_duration_us(original / known) + ("" if known == b["calls"]
                                                                  else f" ({known} known)")
                    if known and original is not None else "-",
                    "-" if b.get("ratio") is None else f"{b['ratio']:.2f}",
                    "-" if share is None else f"{share * 100:.1f}",
                    _gbps(b.get("algbw_gbps")), _gbps(b.get("busbw_gbps"))])
    return out


def _notes(f: dict[str, Any]) -> str:
    lines = []
    if f.get("gaps_how"):
        asked = f.get("gaps_asked")
        lines.append(f"# gaps between the calls: {f['gaps_how']}"
                     + (f" (asked: {asked})" if asked and asked != f.get("gaps") else "")
                     + (f"; {_ms(f['gap_s'])} ms per iteration in the busiest rank"
                        if f.get("gap_s") else ""))
    if f.get("gaps_blind"):
        lines.append(f"# not in the gaps: {'; '.join(f['gaps_blind'])}")
    if f.get("original_how"):
        lines.append(f"# original: the captured steps, slowest rank, from the "
                     f"{f['original_how']}")
    if f.get("skipped"):
        lines.append(f"# not replayed (ops the capture could not record): "
                     f"{'; '.join(f['skipped'])}")
    if f.get("unchecked"):
        lines.append(f"# results not checked: {', '.join(f['unchecked'])}")
    if f.get("captured_backend"):
        source = f.get("source") or "capture"
        lines.append(f"# captured with {f['captured_backend']} on "
                     f"{f.get('captured_device') or '?'}"
                     + ("" if source == "capture" else f" (from {source})"))
    # Names from the trace (and maybe from a foreign results file): no escape sequences.
    return "".join("\n" + printable(line) for line in lines)


def render_replay(records: list[Record]) -> str:
    """Per trace: its whole step, then its breakdown rows and notes."""
    blocks = []
    align = ("left",) + ("right",) * (len(STEP_HEADERS) - 1)
    for r in sorted(records, key=lambda r: (str((r.get("figures") or {}).get("trace")),
                                            r["id"])):
        f = r.get("figures") or {}
        step = fit.table([_step_row(r)], STEP_HEADERS, colalign=align)
        breakdown = fit.table(_breakdown_rows(f.get("breakdown") or []), BREAKDOWN_HEADERS,
                              colalign=("left", "right", "left")
                              + ("right",) * (len(BREAKDOWN_HEADERS) - 3))
        blocks.append(f"{step}\n{breakdown}{_notes(f)}")
    short = f"\n# {ci.SHORT_NOTE}" if any(ci.short_of_target(r) for r in records) else ""
    return "\n\n".join(blocks) + short + "\n" + NOTE


def _suite(settings: Any) -> list[str]:
    """--distbench-replay runs its traces without naming the suite: `pytest --distbench
    --distbench-replay=trace/` is the whole command. The suite's folder, not its file: a file
    pytest is given is its own node id's root, and the test's id would lose its file part."""
    return [str(SUITES / "replay")] if settings.replay else []


FAMILY = Family(
    name="replay",
    settings=SETTINGS,
    tables={"replay": render_replay},
    headlines={"replay": "p50 of one replay of the trace's steps ± 95 % CI"},
    collect=_suite,
)
