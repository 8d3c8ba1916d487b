"""Duration-bound runs and live reports, measured side by side in one run.

    python benchmarks/bench_live_reports.py [--quick]

Prints, on this machine:
  1. live report arrival: for each line, when the controller printed it minus the moment its
     interval closed in rank 0 (same host, same monotonic clock), without and with busy
     pressure threads; and the spacing of the lines as read from the session's stdout;
  2. per-iteration cost of a duration-bound timed region vs a budget-bound one, alternating
     round by round in one pytest session, for a 1-element gloo all_reduce in 2 ranks and for
     a body that does nothing in 1 rank (which exposes the harness's own cost per iteration);
  3. pressure is real: iterations/s of the same loop in a 3-rank world (ranks 1 and 2
     pressured, as the message-rate family does) without and with busy threads, alternating,
     and each rank's peak RSS with --distbench-touch.
Absolute times on a shared 2-core machine mean little; read the ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

LIVE_TEST = """
import pytest, torch, torch.distributed as dist

@pytest.mark.distbench
def test_live(distbench):
    x = torch.zeros(1)
    distbench.measure(lambda: dist.all_reduce(x), nbytes=4)
"""

LOOP_TEST = """
import json, os, time, pytest, torch, torch.distributed as dist

ROUNDS = {rounds}
OUT = {out!r}
CASES = [(r, mode) for r in range(ROUNDS)
         for mode in (("count", "duration") if r % 2 == 0 else ("duration", "count"))]


def cases():
    def marks(mode):
        if mode == "duration":
            return pytest.mark.distbench(duration="{seconds}s")
        return pytest.mark.distbench(budget="{seconds}s", max_iterations=100_000_000)
    return [pytest.param(c, marks=marks(c[1]), id=f"{{c[0]}}-{{c[1]}}") for c in CASES]


def loop(distbench, case, body, step):
    stamps = []
    stamp = stamps.append
    clock = time.perf_counter

    def fn():
        stamp(clock())
        step()

    distbench.measure(fn, nbytes=4)
    timed = stamps[5:]  # after the 5 warm-up calls (the default)
    if distbench.rank == 0:
        per = (timed[-1] - timed[0]) / (len(timed) - 1)
        with open(OUT, "a") as f:
            f.write(json.dumps({{"round": case[0], "mode": case[1], "body": body,
                                "per_s": per, "n": len(timed)}}) + "\\n")


# Two ranks whose iterations are coupled (each all_reduce waits for both) in both modes.
@pytest.mark.distbench(world_size=2)
@pytest.mark.parametrize("case", cases())
def test_all_reduce(distbench, case):
    x = torch.zeros(1)
    loop(distbench, case, "all_reduce", lambda: dist.all_reduce(x))


# What one stop agreement costs when nothing overlaps it: post + wait of the 16-byte
# all-reduce a duration run issues once per chunk (gloo's WORLD is the control group).
@pytest.mark.distbench(world_size=2)
def test_agreement(distbench):
    decision = torch.zeros(2, dtype=torch.float64)
    times = []
    for _ in range(2000):
        start = time.perf_counter()
        dist.all_reduce(decision, op=dist.ReduceOp.MAX, async_op=True).wait()
        times.append(time.perf_counter() - start)
    if distbench.rank == 0:
        times.sort()
        with open(OUT, "a") as f:
            f.write(json.dumps({{"round": 0, "mode": "agreement", "body": "agreement",
                                "per_s": times[len(times) // 2], "n": len(times)}}) + "\\n")


# One rank doing nothing: what is left is the harness's own cost per iteration.
@pytest.mark.distbench(world_size=1)
@pytest.mark.parametrize("case", cases())
def test_nothing(distbench, case):
    loop(distbench, case, "nothing", lambda: None)
"""


def run_pytest(directory: Path, *args: str, timeout: float = 900) -> tuple[str, list[float]]:
    """Run a pytest session; return its stdout and when each live line arrived."""
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        cwd=directory, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    lines, arrivals = [], []
    deadline = time.monotonic() + timeout
    assert process.stdout is not None
    for line in process.stdout:
        lines.append(line)
        if line.startswith("Time: "):
            arrivals.append(time.monotonic())
        if time.monotonic() > deadline:
            process.kill()
            break
    code = process.wait(timeout=60)
    text = "".join(lines)
    if code != 0:
        raise SystemExit(f"pytest failed ({code}):\n{text[-4000:]}")
    return text, arrivals


def live_arrival(tmp: Path, seconds: float, every: float, extra: list[str]) -> dict:
    (tmp / "test_live.py").write_text(LIVE_TEST)
    out = tmp / "live.json"
    _, arrivals = run_pytest(tmp, "test_live.py", "--distbench", "--world-size=2",
                             f"--distbench-duration={seconds}s",
                             f"--distbench-report-every={every}s", f"--distbench-json={out}",
                             *extra)
    record = json.loads(out.read_text())["benchmarks"][0]["distbench"]
    delays = [r["delay_s"] for r in record["live_reports"]]
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
    return {"delays": delays, "gaps": gaps, "lines": len(arrivals)}


def loop_cost(tmp: Path, rounds: int, seconds: float) -> list[dict]:
    out = tmp / "loop.jsonl"
    (tmp / "test_loop.py").write_text(textwrap.dedent(LOOP_TEST.format(
        rounds=rounds, out=str(out), seconds=seconds)))
    run_pytest(tmp, "test_loop.py", "--distbench")
    return [json.loads(line) for line in out.read_text().splitlines()]


PRESSURE_TEST = """
import pytest, torch, torch.distributed as dist

CASES = [(r, threads) for r in range({rounds})
         for threads in ((0, {threads}) if r % 2 == 0 else ({threads}, 0))]


@pytest.mark.parametrize("case", [
    pytest.param(c, marks=pytest.mark.distbench(cpu_threads=c[1], duration="{seconds}s"),
                 id=f"{{c[0]}}-threads{{c[1]}}") for c in CASES])
def test_rate(distbench, case):
    x = torch.zeros(1)
    distbench.measure(lambda: dist.all_reduce(x), nbytes=4, pressure_ranks=[1, 2])


@pytest.mark.distbench(touch="{touch_mib}MiB", touch_once=True, iterations=200)
def test_touch(distbench):
    x = torch.zeros(1)
    distbench.measure(lambda: dist.all_reduce(x), nbytes=4, pressure_ranks=[1, 2])
"""


def pressure_effect(tmp: Path, rounds: int, seconds: float, threads: int,
                    touch_mib: int) -> tuple[list[dict], str]:
    out = tmp / "pressure.json"
    (tmp / "test_pressure.py").write_text(PRESSURE_TEST.format(
        rounds=rounds, seconds=seconds, threads=threads, touch_mib=touch_mib))
    text, _ = run_pytest(tmp, "test_pressure.py", "--distbench", "--world-size=3",
                         f"--distbench-json={out}")
    records = [b["distbench"] for b in json.loads(out.read_text())["benchmarks"]]
    return records, text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs, fewer rounds")
    args = parser.parse_args()
    seconds, every = (6.0, 1.0) if args.quick else (20.0, 2.0)
    rounds = 3 if args.quick else 6
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        print(f"1. live report arrival, {seconds:g} s runs reporting every {every:g} s, "
              "2 ranks, 1-element gloo all_reduce")
        for label, extra in (("no pressure", []),
                             ("2 busy threads per rank", ["--distbench-cpu-threads=2"])):
            got = live_arrival(tmp, seconds, every, extra)
            d = got["delays"]
            print(f"   {label:24s} lines {got['lines']:3d}  delay after the interval closed: "
                  f"median {statistics.median(d) * 1e3:7.2f} ms  max {max(d) * 1e3:7.2f} ms  "
                  f"(goal < 500 ms)  line spacing on stdout: "
                  f"{min(got['gaps']):.3f}..{max(got['gaps']):.3f} s")
        print(f"2. per-iteration time, duration-bound vs count-bound timed region, "
              f"{rounds} alternating rounds of ~{seconds / 4:g} s each")
        rows = loop_cost(tmp, rounds, seconds / 4)
        for body in ("all_reduce", "nothing"):
            ratios, count_s, duration_s = [], [], []
            for r in range(rounds):
                by_mode = {row["mode"]: row["per_s"] for row in rows
                           if row["round"] == r and row["body"] == body}
                ratios.append(by_mode["duration"] / by_mode["count"])
                count_s.append(by_mode["count"])
                duration_s.append(by_mode["duration"])
            print(f"   {body:10s} count {statistics.median(count_s) * 1e6:9.3f} us/iter  "
                  f"duration {statistics.median(duration_s) * 1e6:9.3f} us/iter  "
                  f"ratio duration/count: median {statistics.median(ratios):.3f} "
                  f"(rounds {', '.join(f'{x:.3f}' for x in ratios)})")
        threads, touch_mib = 2, 512
        print(f"3. pressure: 1-element all_reduce in 3 ranks, ranks 1-2 pressured, "
              f"{rounds} alternating rounds of {seconds / 4:g} s")
        records, text = pressure_effect(tmp, rounds, seconds / 4, threads, touch_mib)
        rate = {}
        for record in records:
            if record["name"].startswith("test_rate"):
                case = record["params"]["case"]
                timed = sum(record["rank_samples"][0])
                rate[tuple(case)] = record["iterations"] / timed
        ratios = [rate[(r, threads)] / rate[(r, 0)] for r in range(rounds)]
        print(f"   iterations/s without busy threads: median "
              f"{statistics.median(rate[(r, 0)] for r in range(rounds)):9.1f}; with "
              f"{threads} busy threads per pressured rank: median "
              f"{statistics.median(rate[(r, threads)] for r in range(rounds)):9.1f}; "
              f"ratio with/without: median {statistics.median(ratios):.3f} "
              f"(rounds {', '.join(f'{x:.3f}' for x in ratios)})")
        touch = next(r for r in records if r["name"].startswith("test_touch"))
        peaks = ", ".join(f"rank {i} {p / 2**20:.0f} MiB"
                          for i, p in enumerate(touch["peak_rss_bytes"]))
        print(f"   peak RSS with --distbench-touch={touch_mib}MiB --distbench-touch-once: "
              f"{peaks}")
        block = text.split("# test_touch", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
        for line in block:
            print("   | " + line)
    agreement = next(row["per_s"] for row in rows if row["mode"] == "agreement")
    print(f"   one stop agreement (16-byte gloo all-reduce, post + wait, not overlapped): median "
          f"{agreement * 1e6:.1f} us = {agreement / 0.05 * 100:.3f} % of a 50 ms chunk, "
          "the most a duration run adds")
    print("   (machine shared with other work: ratios are what carries over)")


if __name__ == "__main__":
    main()
