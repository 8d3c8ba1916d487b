"""`pytest-distbench history --plot DIR`: one PNG per benchmark, its p50 in every stored run
with the segments the history found (a line at each segment's median) and the steps between
them (matplotlib, as plot.py draws: optional, headless)."""

from __future__ import annotations

import re
from pathlib import Path

from ...units import format_figure
from ..comparison.series import History, Series, Step
from ..statistics.stats import median
from .plot import Rendered, literal, pyplot, save_figure, unique_name

COLOURS = {"change": "#ff7f0e", "environment": "#9467bd", "regression": "#d62728"}
POINTS = "#1f77b4"


def plot_history(history: History, out_dir: str | Path) -> list[Rendered]:
    """history-<benchmark>.png per benchmark under out_dir (created)."""
    plt = pyplot()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    used: set[str] = set()
    written = []
    for s in history.series.values():
        name = history.names.get(s.id, s.id)
        stem = unique_name(re.sub(r"[^A-Za-z0-9_.=-]+", "_", name).strip("_.")[:100] or "benchmark",
                       used)
        written.append(_draw(plt, s, name, history, out / f"history-{stem}.png"))
    return written


def _draw(plt: object, s: Series, name: str, history: History, path: Path) -> Rendered:
    fig, ax = plt.subplots(figsize=(10, 4.8))  # type: ignore[attr-defined]
    xs = [run.index for run in s.runs]
    ys = [p * 1e6 for p in s.p50s]
    ax.plot(xs, ys, "o-", color=POINTS, markersize=4, linewidth=0.8, label="p50 of a run")
    bounds = [s.runs.index(step.run) for step in s.steps]
    edges = [0] + bounds + [len(s.runs)]
    for k in range(len(edges) - 1):
        lo, hi = edges[k], edges[k + 1]
        ax.hlines(median(ys[lo:hi]), xs[lo] - 0.4, xs[hi - 1] + 0.4, color="black", linewidth=2,
                  label="segment median" if k == 0 else None)
    regression = s.regression(history.threshold, history.recent)
    drawn = set()
    for step in s.steps:
        kind = "regression" if step is regression else step.kind
        x = step.run.index - 0.5
        label = {"change": "change point", "environment": "environment change",
                 "regression": "regression"}[kind]
        ax.axvline(x, color=COLOURS[kind], linestyle="--", linewidth=1.2,
                   label=label if kind not in drawn else None)
        drawn.add(kind)
        note = _note(step)
        if kind == "regression":
            note = (f"regression since run {step.run.index}\n"
                    f"(commit {step.run.commit_label})\n{note}")
        ax.annotate(literal(note), (x, 1), xycoords=("data", "axes fraction"),
                    xytext=(3, -3), textcoords="offset points", ha="left", va="top",
                    fontsize="small", color=COLOURS[kind])
    ax.set_xlabel("stored run (0 = the oldest)")
    ax.set_ylabel("p50 (us)")
    low = min(ys)
    ax.set_ylim(bottom=min(0.0, low) if low < 0 else low * 0.9, top=max(ys) * 1.15)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.set_title(literal(name), fontweight="bold", fontsize="medium")
    caption = (f"{len(s.runs)} runs; current segment: {s.describe_current()}, median "
               f"{format_figure(s.current_median * 1e6)} us; regression: a change point "
               f"starting the current segment, slower by more than "
               f"{history.threshold * 100:g} %, first shown within the newest {history.recent} "
               "runs")
    fig.text(0.5, 0.01, literal(caption), ha="center", va="bottom", fontsize="x-small",
             color="#444444", wrap=True)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    save_figure(plt, fig, path)
    return Rendered(path, name, ("p50",), (len(s.steps),))


def _note(step: Step) -> str:
    if step.kind == "environment":
        fields = ", ".join(line.split(":", 1)[0] for line in step.differences)
        return f"environment: {fields}\n{step.change_pct:+.1f} %"
    return f"{step.change_pct:+.1f} %\np {step.p:.2g}"

