"""benchmarks/bench_coverage.py: how it reads a session's records, judges the printed interval
and the run's sampling one against the long-run value, and reports per family, on sessions
whose records are made here (the real sessions are the script's to run)."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest
from scripts import loaded

from pytest_distbench.settings import BY_NAME

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_coverage.py"
NOISE = {"group": "collectives ws2 0.5 s budget", "sd_log": 0.05, "dof": 4, "runs": 12,
         "points": 8, "half_width_pct": 14.9}


@pytest.fixture(scope="module")
def bc():
    with loaded(SCRIPT) as module:
        yield module


def record(name: str, value: float, kind: str, printed: float | None, sampling: float,
           noise: dict | None = NOISE) -> dict:
    """A run of headline `value` (seconds, or msg/s for kind "mean") whose printed interval
    is value * (1 -+ printed) (None: none printed) and whose sampling one value * (1 -+
    sampling); samples all at the p50, a rate's totals one second of it."""
    bounds = None if printed is None else (value * (1 - printed), value * (1 + printed))
    own = (value * (1 - sampling), value * (1 + sampling))
    p50 = value if kind == "p50" else 1 / value
    out = {
        "name": name, "samples": [p50] * 30, "summary": {"p50": p50},
        "p50_ci": {"low": None, "high": None, "run_noise": noise},
        "sampling_ci": {"low": None, "high": None},
        "figures": {},
        "precision": {"statistic": kind, "achieved": printed,
                      "met": printed is not None and printed <= 0.02},
    }
    if kind == "p50":
        out["p50_ci"].update(low=bounds and bounds[0], high=bounds and bounds[1])
        out["sampling_ci"].update(low=own[0], high=own[1])
    else:
        out["figures"] = {"msgs_per_s": value, "total_messages": value, "total_s": 1.0,
                          "rate_ci_pct": 100 * sampling, "msgs_per_s_ci_low": own[0],
                          "msgs_per_s_ci_high": own[1]}
        out["rate_ci"] = {"low": bounds and bounds[0], "high": bounds and bounds[1],
                          "half_width_pct": None if printed is None else 100 * printed}
    return out


def session(points: list[tuple[str, str, str]], kinds: dict[int, str],
            offsets: list[float], noise: dict | None = NOISE) -> list[dict]:
    """A session of the script's points: per point, two long runs at 1 ms (or 1000 msg/s),
    then targeted runs off by `offsets` (relative), each printing ± 10 % and a sampling
    ± 1 %."""
    records = []
    for index in range(len(points)):
        kind = kinds.get(index, "p50")
        base = 1e-3 if kind == "p50" else 1000.0
        name = f"test_point_{index}[gloo-ws2-{{}}]"
        records.append(record(name.format("long-0"), base, kind, 0.1, 0.01, noise))
        records += [record(name.format(f"targeted-{k}"), base * (1 + off), kind, 0.1, 0.01,
                           noise) for k, off in enumerate(offsets)]
        records.append(record(name.format("long-1"), base, kind, 0.1, 0.01, noise))
    return records


def test_the_printed_interval_and_the_sampling_one_are_judged_apart(bc):
    value = 1e-3
    runs = [record("r0", value * 1.05, "p50", 0.10, 0.01),  # printed covers, sampling not
            record("r1", value * 1.005, "p50", 0.10, 0.01),  # both cover
            record("r2", value * 1.30, "p50", 0.10, 0.01),  # neither
            record("r3", value, "p50", None, 0.01)]  # nothing printed: a miss
    judged = bc.judge(runs, value, "p50")
    assert (judged.printed.covered, judged.printed.total) == (2, 4)
    assert (judged.sampling.covered, judged.sampling.total) == (2, 4)
    assert judged.printed.widths == pytest.approx([10.0] * 3)
    assert judged.sampling.widths == pytest.approx([1.0] * 4)
    rates = [record("m0", 1000 * 1.05, "mean", 0.10, 0.01),
             record("m1", 1000 * 1.2, "mean", 0.10, 0.01)]
    judged = bc.judge(rates, 1000.0, "mean")
    assert (judged.printed.covered, judged.sampling.covered) == (1, 0)
    assert bc.kind_of(rates) == "mean" and bc.kind_of([{"name": "long"}]) == "p50"


def test_the_long_run_value_pools_the_long_runs(bc):
    fast = {"samples": [1.0, 1.0, 1.0], "figures": {"total_messages": 10, "total_s": 1.0}}
    slow = {"samples": [3.0, 3.0], "figures": {"total_messages": 10, "total_s": 4.0}}
    assert bc.headline([fast, slow], "p50") == 1.0  # the median of the five samples
    assert bc.headline([fast, slow], "mean") == 4.0  # 20 messages in 5 s


def test_the_script_reports_coverage_per_family_and_overall(bc, monkeypatch, capsys):
    rate_index = next(i for i, p in enumerate(bc.POINTS) if p[1].startswith("p2p_bandwidth"))
    offsets = [0.0, 0.05, 0.05, 0.2]  # printed ± 10 %: 3 of 4 covered; sampling ± 1 %: 1
    sizes = []

    def run_points(suite: str, world_size: int, keep=None) -> list[dict]:
        sizes.append(world_size)
        points = bc.POINTS if world_size == 2 else bc.POINTS_WS8
        return session(points, {rate_index: "mean"} if world_size == 2 else {}, offsets)

    monkeypatch.setattr(bc, "run_points", run_points)
    assert bc.main(["--repeats", "4"]) == 0
    assert sizes == [2, 8]
    out = capsys.readouterr().out
    table = out[out.index("WITHIN one session"):out.index("the reference and the bound")]
    rows = {line.split()[0]: line for line in table.splitlines() if line.startswith("  ")}
    families = sum(1 for p in bc.POINTS if p[0] == "collectives") + len(bc.POINTS_WS8)
    assert f"{3 * families}/{4 * families}" in rows["collectives"]
    assert "75%" in rows["collectives"]
    assert "± 10.0 %" in rows["collectives"] and "± 1.0 %" in rows["collectives"]
    total = len(bc.POINTS) + len(bc.POINTS_WS8)
    assert f"{3 * total}/{4 * total}" in rows["overall"]
    assert f"{total}/{4 * total}" in rows["overall"]  # the sampling interval's
    assert {"p2p", "message_rate", "rpc"} <= set(rows)
    assert "  collectives ws2 0.5 s budget     ± 14.9 %\n" in out
    sizes.clear()
    assert bc.main(["--repeats", "4", "--no-world-size-8"]) == 0
    assert sizes == [2]


def test_kept_results_files_are_judged_again_with_the_shape_of_their_noise(bc, tmp_path,
                                                                         capsys):
    """--read judges results files as --keep leaves them (no session runs: run_points is
    never reached), and the shape of the noise is the runs' own: the long runs at 1 ms
    against targeted ones at 1, 1.05, 1.05 and 1.2 ms."""
    offsets = [0.0, 0.05, 0.05, 0.2]
    for world_size, points in ((2, bc.POINTS), (8, bc.POINTS_WS8)):
        records = session(points, {}, offsets)
        document = {"benchmarks": [{"distbench": r} for r in records]}
        (tmp_path / f"ws{world_size}.json").write_text(json.dumps(document))
    assert bc.main(["--read", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    total = len(bc.POINTS) + len(bc.POINTS_WS8)
    assert f"{3 * total}/{4 * total}" in out
    # Neighbours: |log| of 1.05, 1 and 1.2/1.05: median 4.9; two apart 4.9 and 13.4.
    assert f"  1 apart: median   4.9, root mean square   8.2 ({3 * total} pairs)" in out
    assert f"  3 apart: median  18.2, root mean square  18.2 ({total} pairs)" in out
    assert "5 apart" not in out  # no point ran that many runs
    assert f"  {'all_reduce 1 KiB ws2':26}  0.952  0.952" in out
    bound = out[out.index("the reference and the bound"):out.index("run-to-run noise")]
    [rpc] = [line for line in bound.splitlines() if line.startswith("  rpc ")]
    # Printed, against the runs' median; 1x and 2x the needed ± against the long runs.
    assert rpc.split()[1:] == ["3/4", "(75%)", "±", "10.0", "%", "3/4", "(75%)", "±", "14.3",
                               "%", "4/4", "(100%)", "±", "28.6", "%"]
    (tmp_path / "ws8.json").unlink()
    assert bc.main(["--read", str(tmp_path)]) == 1
    assert f"--read: no {tmp_path / 'ws8.json'}" in capsys.readouterr().err


def test_the_bound_judges_the_printed_interval_at_the_runs_median_and_hindsight_widths(bc):
    """Runs at 1, 1.05, 1.05 and 1.2 ms against a long-run 1 ms: the runs' median is 1.05 ms
    and the point needed ± 14.3 % (its runs' 90th percentile gap: 1.2 / 1.05). Printed ± 10 %
    covers the median from three runs; ± 14.3 % (1x) covers the long run from three, ± 28.6 %
    (2x) from all four; with the long runs 60 % off, not even 2x covers one."""
    runs = [record(f"r{k}", 1e-3 * (1 + off), "p50", 0.10, 0.01)
            for k, off in enumerate([0.0, 0.05, 0.05, 0.2])]
    judged = bc.judge(runs, 1e-3, "p50")
    assert (judged.at_median.covered, judged.at_median.total) == (3, 4)
    assert (judged.hindsight[1.0].covered, judged.hindsight[2.0].covered) == (3, 4)
    assert judged.hindsight[2.0].widths == pytest.approx([100 * 2 * 0.2 / 1.4] * 4, rel=1e-3)
    far = bc.judge(runs, 1.6e-3, "p50")
    assert (far.hindsight[2.0].covered, far.at_median.covered) == (0, 3)


def test_a_session_without_run_noise_stops_the_script_with_one_line(bc, monkeypatch, capsys):
    monkeypatch.setattr(bc, "run_points",
                        lambda suite, world_size, keep=None: session(bc.POINTS, {}, [0.0],
                                                                     noise=None))
    assert bc.main(["--repeats", "1", "--no-world-size-8"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "p50_ci.run_noise" in err and "world size 2" in err


def test_the_targeted_runs_run_at_the_products_defaults(bc):
    args = bc.argparse.Namespace(budget=bc.DEFAULT_BUDGET, precision=bc.DEFAULT_PRECISION,
                                 long_budget="5s")
    assert (args.budget, args.precision) == (BY_NAME["budget"].default,
                                             BY_NAME["precision"].default)
    text = bc.suite_text(bc.POINTS, args, 3)
    tree = ast.parse(text)  # a suite pytest can collect
    tests = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert tests == [f"test_point_{i}" for i in range(len(bc.POINTS))]
    assert f'TARGETED = pytest.mark.distbench(precision="{args.precision}", ' \
           f'budget="{args.budget}")' in text
    assert 'LONG = pytest.mark.distbench(precision="off", budget="5s")' in text
    assert text.count("for i in range(3)") == len(bc.POINTS)


def test_the_noise_line_gives_each_group_once_per_session(bc, capsys):
    other = dict(NOISE, sd_log=0.1, half_width_pct=33.1)
    records = session(bc.POINTS[:2], {}, [0.0]) + session(bc.POINTS[:1], {}, [0.0], other)
    assert bc.noise_groups(records) == {NOISE["group"]: [14.9, 33.1]}
    bc.print_noise(records)
    assert "± 24.0 % (median of 2 sessions: 14.9-33.1 %)" in capsys.readouterr().out


def test_the_across_sessions_script_judges_the_same_way_and_says_so(bc, monkeypatch, capsys):
    # bench_precision.py reads and judges records with bench_coverage's functions: one
    # session per family and mode (fixed, targeted; targeted, fixed), a family's runs 0 and
    # 5 % off by turns, so the long-run value is 2.5 % off: printed ± 10 % covers it, the
    # sampling ± 1 % does not.
    with loaded(SCRIPT.parent / "bench_precision.py") as bp:
        calls: dict[str, int] = {}
        kinds = {"p2p": "mean", "message_rate": "mean"}

        def run_session(args: list[str], out: Path) -> tuple[float, list[dict]]:
            family = next(f for f, extra in bp.POINTS if extra[0] in args and extra[2] in args)
            kind = kinds.get(family, "p50")
            base = 1e-3 if kind == "p50" else 1000.0
            calls[family] = calls.get(family, -1) + 1
            value = base * (1 + 0.05 * (calls[family] % 2))
            return 1.0, [record(f"{family}-point", value, kind, 0.1, 0.01)]

        monkeypatch.setattr(bp, "run_session", run_session)
        assert bp.main(["--rounds", "2"]) == 0
        out = capsys.readouterr().out
        assert "ACROSS sessions" in out
        table = out[out.index("ACROSS sessions"):out.index("run-to-run noise")]
        rows = {line.split()[0]: line for line in table.splitlines() if line.startswith("  ")}
        assert set(rows) == {"family", "collectives", "p2p", "message_rate", "rpc", "overall"}
        assert "2/2" in rows["p2p"] and "± 10.0 %" in rows["p2p"]
        assert rows["overall"].split()[1:3] == ["8/8", "(100%)"]
        assert rows["overall"].split()[6:8] == ["0/8", "(0%)"]

        monkeypatch.setattr(bp, "run_session", lambda args, out: (1.0, [record(
            "point", 1e-3, "p50", 0.1, 0.01, noise=None)]))
        with pytest.raises(SystemExit, match="bench_precision: no record of the collectives"):
            bp.main(["--rounds", "1"])


@pytest.mark.slow
def test_the_script_runs_a_real_session_small(bc, capsys, tmp_path, monkeypatch):
    # The records of a real session carry what the script reads (the printed interval, the
    # sampling one, the run-to-run noise): a small run, every point, world size 2; its
    # results file kept and judged again to the same table. Its session revisits as the
    # product does (the suite's child sessions do not: tests/conftest.py).
    monkeypatch.setenv("PYTEST_ADDOPTS", f"{os.environ.get('PYTEST_ADDOPTS', '')} "
                       "--distbench-revisits=5")
    assert bc.main(["--repeats", "2", "--budget", "0.1s", "--long-budget", "0.2s",
                    "--no-world-size-8", "--keep", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert bc.main(["--repeats", "2", "--no-world-size-8", "--read", str(tmp_path)]) == 0
    assert capsys.readouterr().out == out
    table = out[out.index("WITHIN one session"):out.index("the reference and the bound")]
    rows = {line.split()[0]: line.split() for line in table.splitlines()
            if line.startswith("  ")}
    assert {"collectives", "p2p", "message_rate", "rpc"} <= set(rows)
    assert rows["overall"][1].endswith(f"/{2 * len(bc.POINTS)}")  # every targeted run judged
    assert "0.1 s budget" in out[out.index("run-to-run noise"):]
