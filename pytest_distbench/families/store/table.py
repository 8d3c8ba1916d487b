"""Tables of the store family: one row per (backend that ran, clients), the study's figures.

Registered in family.py; no torch.
"""

from __future__ import annotations

from typing import Any

from ...results.rendering import ci, fit, names
from . import plan


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3g}" if seconds < 0.1 else (
        f"{seconds * 1e3:.0f}")


def _s(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.3f}"


def _us(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:.0f}"


def _backend(row: dict[str, Any]) -> str:
    """What the server reported it ran; a store that never started reported nothing, so its
    row names the backend asked for, and says so."""
    f = row["figures"]
    return f.get("server_backend") or f"{f.get('requested_backend')} (asked)"


def _order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (_backend(r), r["figures"].get("clients", 0),
                                       str(r["figures"].get("op", ""))))


def _incomplete(row: dict[str, Any], leading: list[Any], width: int) -> list[Any] | None:
    """The row of a store that did not finish within the timeout (a result: docs/store.md),
    or None for a measured row."""
    text = ci.incomplete_text(row)
    return None if text is None else leading + [text] + ["-"] * (width - len(leading) - 1)


def _incomplete_notes(rows: list[dict[str, Any]]) -> str:
    """Why each row that did not complete stopped (the first rank's words)."""
    return "".join(
        f"\n# {_backend(r)} {r['figures'].get('clients')}"
        + (f" {r['figures']['op']}" if r["figures"].get("op") else "")
        + f": {ci.incomplete_text(r)} ({r['figures'].get('did_not_complete')}): "
        + r["incomplete"]["reason"].split("; ")[0]
        for r in _order(rows) if r.get("incomplete"))


def _table(body: list[list[Any]], headers: list[str], rows: list[dict[str, Any]],
           key: names.RowKey) -> str:
    """`body`: a line per row of `rows`, in _order."""
    return names.fitted_table(_order(rows), body, headers, key)


def _clients(row: dict[str, Any]) -> tuple[Any, ...]:
    return _backend(row), row["figures"].get("clients")


def _limits(rows: list[dict[str, Any]]) -> str:
    # A store that did not finish connecting has not shared its ranks' limits.
    rows = [r for r in rows if r["figures"].get("nofile_soft")]
    if not rows:
        return "# RLIMIT_NOFILE and where the server listens: not known (no store connected)"
    soft = {s for r in rows for s in r["figures"].get("nofile_soft", [])}
    before = {s for r in rows for s in r["figures"].get("nofile_before", [])}
    listen = {r["figures"].get("server_listen") for r in rows}
    limit = (f"RLIMIT_NOFILE at the hard limit ({', '.join(map(str, sorted(soft)))})"
             if before == soft else
             f"RLIMIT_NOFILE raised to the hard limit: {sorted(before)} -> {sorted(soft)}")
    return f"# {limit}; server listens on {', '.join(sorted(str(x) for x in listen))}"



def render_init(rows: list[dict[str, Any]]) -> str:
    body = []
    for r in _order(rows):
        f = r["figures"]
        incomplete = _incomplete(r, [_backend(r), f.get("clients")], 9)
        if incomplete:
            body.append(incomplete)
            continue
        body.append([f.get("server_backend"), f.get("clients"), _s(r["summary"]["p50"]),
                     _ms(f.get("connect_p50_s")), _ms(f.get("connect_p95_s")),
                     _ms(f.get("connect_max_s")),
                     f"{f.get('slow_connects', 0)}/{max(f.get('clients', 1) - 1, 0)}",
                     _s(f.get("init_without_stalls_s")),
                     _s(max(f.get("handoff_s") or [0.0]))])
    headers = ["backend", "clients", "init (s)", "connect p50 (ms)", "p95 (ms)", "max (ms)",
               f"slow >{plan.SLOW_CONNECT_S:g}s", "init w/o slow (s)", "hand-off (s)"]
    return _table(body, headers, rows, _clients) + (
        "\n# init = server constructor until all clients connected (the study's figure); "
        "connect = one simulated client's constructor; init w/o slow = init less the slow "
        "connects' delay (the slowest connect under "
        f"{plan.SLOW_CONNECT_S:g} s taken as the last); hand-off = the harness waking its "
        "client threads (the slowest rank), part of init\n" + _confounded(rows) + _limits(rows)
        + _incomplete_notes(rows))


def _confounded(rows: list[dict[str, Any]]) -> str:
    """A backend comparison that connect stalls decide says so (docs/store.md)."""
    slow = [r for r in rows if r["figures"].get("slow_connects")]
    if not slow:
        return ""
    counts = ", ".join(f"{r['figures'].get('server_backend')} {r['figures'].get('clients')}: "
                       f"{r['figures']['slow_connects']}" for r in _order(slow))
    return (f"# CONFOUNDED: connects slower than {plan.SLOW_CONNECT_S:g} s ({counts}) stall on "
            "name resolution, not on the backend (see the store check in the header): "
            "compare backends on init w/o slow, or fix the resolver (docs/store.md)\n")


def init_caveat(rows: list[dict[str, Any]]) -> str | None:
    """The digest's word on init rows that connect stalls decide (the table's CONFOUNDED)."""
    slow = [r for r in _order(rows) if r["figures"].get("slow_connects")]
    if not slow:
        return None
    counts = ", ".join(f"{r['figures'].get('server_backend')} {r['figures']['slow_connects']}"
                       for r in slow)
    return (f"CONFOUNDED: connects stalled over {plan.SLOW_CONNECT_S:g} s on name resolution "
            f"({counts}), not on the backend: see its table")


def render_barrier(rows: list[dict[str, Any]]) -> str:
    body = []
    for r in _order(rows):
        f, s = r["figures"], r["summary"]
        incomplete = _incomplete(r, [_backend(r), f.get("clients"), f.get("rounds")], 8)
        if incomplete:
            body.append(incomplete)
            continue
        body.append([f.get("server_backend"), f.get("clients"), r["iterations"],
                     ci.with_pct(_ms(s["p50"]), ci.p50_pct(r), r),
                     _ms(s["mean"]), _ms(s["p95"]), _ms(s["max"]), _s(f.get("init_s"))])
    headers = ["backend", "clients", "rounds", "barrier p50 (ms) ± 95% CI", "mean (ms)",
               "p95 (ms)",
               "max (ms)", "init (s)"]
    return _table(body, headers, rows,
                  lambda r: (*_clients(r), r["figures"].get("rounds"))) + (
        "\n# one store-based barrier of all clients, timed on the server's own client "
        "(the study divides the total of its rounds: that is the mean)" + _incomplete_notes(rows))


def render_ops(rows: list[dict[str, Any]]) -> str:
    body = []
    for r in _order(rows):
        f = r["figures"]
        incomplete = _incomplete(r, [_backend(r), f.get("clients"), f.get("op")], 8)
        if incomplete:
            body.append(incomplete)
            continue
        op = f.get("op") if f.get("round_trip", True) else f"{f.get('op')} (send)"
        body.append([f.get("server_backend"), f.get("clients"), op,
                     ci.with_pct(_us(f.get("latency_p50_s")), ci.p50_pct(r), r),
                     _us(f.get("latency_p95_s")),
                     _us(f.get("latency_max_s")), f"{f.get('ops_per_s', 0):.0f}",
                     r["wrong"] if r["wrong"] is not None else "N/A"])
    headers = ["backend", "clients", "op", "p50 (us) ± 95% CI", "p95 (us)", "max (us)", "ops/s",
               "#wrong"]
    return _table(body, headers, rows, lambda r: (*_clients(r), r["figures"].get("op"))) + (
        "\n# latency = one operation's round trip from one client while all clients run "
        "((send): set and multi_set wait for no reply); ops/s = all clients' operations / "
        "wall time" + _incomplete_notes(rows))


def render_routes(rows: list[dict[str, Any]]) -> str:
    blocks = []
    for r in rows:
        f = r["figures"]
        body = [[x["route"], x["how"], x["env"], x["documented"], x["ran"], x["thread"] or "-",
                 {True: "yes", False: "NO", None: "-"}[x["agrees"]]] for x in f["rows"]]
        headers = ["route", "requested", "USE_LIBUV", "documented", "ran", "server thread",
                   "agrees"]
        notes = [f"# {x['how']}: {x['note']}" for x in f["rows"]
                 if x["note"] and not x["note"].startswith("url ")]
        blocks.append(fit.table(body, headers)
                      + f"\n# torch {f.get('torch')}, network namespace: {f.get('network')}"
                      + "".join("\n" + n for n in notes))
    return "\n".join(blocks)
