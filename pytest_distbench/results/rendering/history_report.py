"""`pytest-distbench history`: a baseline's series per benchmark, as text (120 columns) or JSON.

What is found lives in comparison/series.py; this module only says it (docs/gating.md, "The
history of a baseline").
"""

from __future__ import annotations

import json
import math
from typing import Any

from ...units import format_figure
from ..comparison.series import History, Series, Step
from .fit import printable, wrap


def render_text(history: History) -> str:
    out = wrap(f"history of {printable(history.label)}: {history.runs} stored run(s), "
               f"{history.first} to {history.last} (UTC), {len(history.series)} benchmark(s)")
    for s in history.series.values():
        out += wrap(_headline(s, history.names.get(s.id, s.id)))
        regression = s.regression(history.threshold, history.recent)
        for step in s.steps:
            out += wrap(f"  {_step_line(step)}", indent="      ")
            if step is regression:
                out.append(f"    regression since run {step.run.index} (commit "
                           f"{step.run.commit_label}): slower by more than "
                           f"{history.threshold * 100:g} %, first shown within the newest "
                           f"{history.recent} runs")
    regressions = history.regressions()
    out.append("")
    if regressions:
        shown = ", ".join(f"{printable(history.names.get(s.id, s.id))} since run {step.run.index}"
                          f" (commit {step.run.commit_label}, {step.change_pct:+.1f} %)"
                          for s, step in regressions[:10])
        more = f" and {len(regressions) - 10} more" if len(regressions) > 10 else ""
        out += wrap(f"{len(regressions)} regression(s): {shown}{more}")
    else:
        out.append(f"no regression: no slowdown beyond {history.threshold * 100:g} % first shown "
                   f"within the newest {history.recent} runs")
    out += [part for line in _legend(history) for part in wrap(line)]
    return "\n".join(out) + "\n"


def _headline(s: Series, name: str) -> str:
    none = "" if s.steps else ", no step"
    return (f"{printable(name)}: {len(s.runs)} run(s), latest p50 {_us(s.p50s[-1])}, current "
            f"segment {_us(s.current_median)} ({s.describe_current(commit=False)}){none}")


def _step_line(step: Step) -> str:
    where = f"run {step.run.index} ({step.run.date}, commit {step.run.commit_label})"
    medians = (f"{format_figure(step.before * 1e6)} -> {_us(step.after)} "
               f"({step.change_pct:+.1f} %)")
    if step.kind == "environment":
        return f"{where}: environment change ({'; '.join(step.differences)}), {medians}"
    return f"{where}: change point {medians}, p {step.p:.2g}"


def _legend(history: History) -> list[str]:
    return [
        "# p50: a run's median time per iteration. Current segment: the median p50 of the runs "
        "since the last step, what --distbench-compare judges a new run against (3 runs or "
        "more). Steps: a change point, where the p50 stepped within one environment (p: its "
        "p-value), or an environment change (torch, CUDA, NCCL, CPU, GPUs, CPU count or world "
        "sizes differ from the run before), never a regression. Runs are numbered from 0, the "
        "oldest stored.",
        f"# regression: a change point that starts the current segment, slower by more than "
        f"the threshold ({history.threshold * 100:g} %), which the history as it stood "
        f"{history.recent} runs ago did not show yet (--recent): docs/gating.md.",
    ]


def render_json(history: History) -> str:
    return json.dumps({
        "file": history.label,
        "runs": history.runs,
        "threshold": history.threshold,
        "recent": history.recent,
        "benchmarks": {s.id: _series_json(s, history) for s in history.series.values()},
        "regressions": [{"id": s.id, **_step_json(step)} for s, step in history.regressions()],
    }, indent=2, allow_nan=False) + "\n"


def _series_json(s: Series, history: History) -> dict[str, Any]:
    regression = s.regression(history.threshold, history.recent)
    start = s.runs[s.start]
    return {
        "name": history.names.get(s.id, s.id),
        "runs": len(s.runs),
        "latest_p50_s": s.p50s[-1],
        "current": {"start_run": start.index, "runs": len(s.current),
                    "median_p50_s": s.current_median, "commit": start.commit,
                    "time": start.created},
        "change_points": [_step_json(step) for step in s.steps if step.kind == "change"],
        "environment_changes": [{**_step_json(step), "differences": list(step.differences)}
                                for step in s.steps if step.kind == "environment"],
        "regression": None if regression is None else _step_json(regression),
    }


def _step_json(step: Step) -> dict[str, Any]:
    return {"run": step.run.index, "before": step.before, "after": step.after,
            "change_pct": _finite(step.change_pct), "p": step.p, "commit": step.run.commit,
            "time": step.run.created}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _us(seconds: float) -> str:
    return f"{format_figure(seconds * 1e6)} us"
