"""Speed and fidelity of the harness, measured side by side in one run.

    python benchmarks/bench_harness.py [--quick]

Prints, on this machine:
  1. world start: 8 fresh interpreters importing torch (what a naive harness does) vs a world
     forked from the preloaded forkserver, first and later; and the first world as a pytest
     session sees it;
  2. per-test overhead of the harness around an empty body in an 8-rank world;
     and what the timing loop itself adds per iteration, with no communication at all;
  3. fidelity: p50 of a 4-byte all_reduce and busbw of a 64 MiB all_reduce in a 2-rank gloo
     world, through the plugin vs the same loop written by hand with torch alone, interleaved.
Absolute times on a shared 2-core machine mean little; read the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from array import array
from pathlib import Path

HERE = Path(__file__).resolve().parent


def naive_world_start(world_size: int) -> float:
    """Spawn world_size interpreters that import torch and join a gloo group."""
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "rank.py"
        script.write_text(
            textwrap.dedent(f"""
            import sys, datetime
            import torch.distributed as dist
            store = dist.FileStore({str(Path(tmp) / "store")!r}, {world_size})
            dist.init_process_group("gloo", store=store, rank=int(sys.argv[1]),
                                    world_size={world_size},
                                    timeout=datetime.timedelta(seconds=120))
            dist.barrier()
            dist.destroy_process_group()
        """)
        )
        began = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, str(script), str(r)]) for r in range(world_size)]
        for p in procs:
            p.wait(timeout=300)
        return time.perf_counter() - began


def forkserver_world_starts(world_size: int, later: int) -> tuple[float, list[float]]:
    """First world including the forkserver's cold start, then `later` rebuilt worlds."""
    code = textwrap.dedent(f"""
        import json, tempfile, time
        from pathlib import Path
        began = time.perf_counter()
        from pytest_distbench.harness.local.world import World, WorldKey, warm_up_forkserver
        warm_up_forkserver()
        import torch.distributed as dist
        store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
        tmp = Path(tempfile.mkdtemp())
        times = []
        for i in range({later} + 1):
            t = time.perf_counter()
            w = World(WorldKey({world_size}, "gloo", "cpu"), store_host="127.0.0.1",
                      store_port=store.port, store_prefix=f"w{{i}}/", capture_dir=tmp,
                      timeout_s=60)
            w.start(120)
            times.append(time.perf_counter() - (began if i == 0 else t))
            w.stop()
        print(json.dumps(times))
    """)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=600
    )
    times = json.loads(out.stdout.strip().splitlines()[-1])
    return times[0], times[1:]


CALL_TIMER = """
import json, time, pytest

CALLS = []

@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    began = time.perf_counter()
    try:
        return (yield)
    finally:
        CALLS.append([item.name, time.perf_counter() - began])

def pytest_sessionfinish(session):
    with open("call_times.json", "w") as f:
        json.dump(CALLS, f)
"""


def run_pytest(tmp: Path, source: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `source` as a test file under pytest; stop the script if the session fails."""
    (tmp / "test_bench.py").write_text(textwrap.dedent(source))
    (tmp / "conftest.py").write_text(CALL_TIMER)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if result.returncode != 0:
        raise SystemExit(result.stdout + result.stderr)
    return result


def session_world_start_and_overhead(tmp: Path, tests: int) -> tuple[float, float, float]:
    """First world as a pytest session sees it, and the median call time of an empty test."""
    source = f"""
        import pytest

        @pytest.mark.distbench
        @pytest.mark.parametrize("i", range({tests}))
        def test_empty(distbench, i):
            pass

        @pytest.mark.parametrize("i", range({tests}))
        def test_plain(i):
            pass
    """
    result = run_pytest(tmp, source, "--distbench", "--world-size=8")
    calls: dict[str, list[float]] = {"empty": [], "plain": []}
    for name, seconds in json.loads((tmp / "call_times.json").read_text()):
        calls["empty" if name.startswith("test_empty") else "plain"].append(seconds)
    first = float(re.search(r"worlds started: gloo ws8 cpu ([\d.]+) s", result.stdout).group(1))
    # The first test also waits for the world; the overhead is the steady state.
    empty = statistics.median(calls["empty"][1:])
    plain = statistics.median(calls["plain"]) if calls["plain"] else 0.0
    return first, empty, plain


def plugin_all_reduce(tmp: Path, nbytes: int, iterations: int) -> dict:
    source = """
        import pytest, torch, torch.distributed as dist

        @pytest.mark.distbench
        def test_all_reduce(distbench, nbytes):
            x = torch.zeros(nbytes // 4)
            n = distbench.world_size
            distbench.measure(lambda: dist.all_reduce(x), nbytes=nbytes,
                              busbw_factor=2 * (n - 1) / n)
    """
    path = tmp / f"plugin-{nbytes}.json"
    if path.exists():
        path.unlink()
    run_pytest(
        tmp,
        source,
        "--distbench",
        "--world-size=2",
        f"--tensor-size={nbytes}",
        f"--distbench-iterations={iterations}",
        "--distbench-warmup=20",
        f"--distbench-json={path}",
    )
    record = json.loads(path.read_text())["benchmarks"][0]["distbench"]
    return {"p50": record["summary"]["p50"], "busbw": record["busbw_gbps"]}


HAND_LOOP = """
import datetime, json, os, statistics, sys, time
import torch, torch.distributed as dist
import torch.multiprocessing as mp

def rank_main(rank, store_path, nbytes, iterations, queue):
    store = dist.FileStore(store_path, 2)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=120))
    x = torch.zeros(nbytes // 4)
    for _ in range(20):
        dist.all_reduce(x)
    dist.barrier()
    times = []
    for _ in range(iterations):
        t = time.perf_counter()
        dist.all_reduce(x)
        times.append(time.perf_counter() - t)
    queue.put((rank, times))
    dist.destroy_process_group()

if __name__ == "__main__":
    nbytes, iterations, store_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    # Fresh interpreters, as torchrun would start them.
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, store_path, nbytes, iterations, queue))
             for r in range(2)]
    for p in procs:
        p.start()
    per_rank = dict(queue.get(timeout=600) for _ in range(2))
    for p in procs:
        p.join(60)
    samples = [max(a, b) for a, b in zip(per_rank[0], per_rank[1])]
    p50 = statistics.median(samples)
    print(json.dumps({"p50": p50, "busbw": nbytes / p50 / 1e9 * 1.0}))
"""


def hand_all_reduce(tmp: Path, nbytes: int, iterations: int) -> dict:
    script = tmp / "hand.py"
    script.write_text(HAND_LOOP)
    store = tmp / f"store-{time.monotonic_ns()}"
    out = subprocess.run(
        [sys.executable, str(script), str(nbytes), str(iterations), str(store)],
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument(
        "--sections",
        default="start,overhead,cost,fidelity,cross-check",
        help="comma-separated subset of start,overhead,cost,fidelity,cross-check",
    )
    args = parser.parse_args()
    sections = set(args.sections.split(","))
    rounds = 2 if args.quick else 3
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if "start" in sections:
            report_world_start(tmp)
        if "overhead" in sections:
            report_overhead(tmp)
        if "cost" in sections:
            report_timing_cost()
        if "fidelity" in sections:
            report_fidelity(tmp, rounds, cross_check="cross-check" in sections)


def report_world_start(tmp: Path) -> None:
    print("== 1. world start, 8 ranks, gloo ==")
    naive = naive_world_start(8)
    first, later = forkserver_world_starts(8, later=5)
    session_first, _, _ = session_world_start_and_overhead(tmp, tests=5)
    print(f"8 fresh interpreters importing torch : {naive:6.2f} s")
    print(f"forkserver, cold (torch import incl.): {first:6.2f} s  ({naive / first:.1f}x faster)")
    print(
        f"first world in a pytest session      : {session_first:6.2f} s  "
        "(forkserver warmed during collection)"
    )
    print(
        f"later worlds, median of {len(later)}          : "
        f"{statistics.median(later):6.2f} s  ({naive / statistics.median(later):.0f}x "
        "faster)"
    )


def report_overhead(tmp: Path) -> None:
    print("== 2. per-test overhead, empty body, 8 ranks ==")
    _, empty, plain = session_world_start_and_overhead(tmp, tests=100)
    print(
        f"median call time of an empty distbench test: {empty * 1000:6.2f} ms "
        f"(plain pytest test: {plain * 1000:.3f} ms)"
    )


INTERLEAVED = """
import json, os, time, pytest, torch, torch.distributed as dist

# Rotate which goes first, so that an order effect cannot pass for a harness cost; "control"
# is the hand loop again, to show how well two identical loops agree on this machine.
MODES = ("plugin", "hand", "control")
ORDER = [(r, MODES[(r + i) % 3]) for r in range({rounds}) for i in range(3)]

@pytest.mark.distbench(iterations={iterations}, warmup=20)
@pytest.mark.parametrize("round_mode", ORDER, ids=[f"{{r}}-{{m}}" for r, m in ORDER])
def test_fidelity(distbench, nbytes, round_mode):
    x = torch.zeros(nbytes // 4)
    if round_mode[1] == "plugin":
        distbench.measure(lambda: dist.all_reduce(x), nbytes=nbytes, name="plugin")
        return
    # The loop a user writes with torch alone: warm up, barrier, time each call.
    for _ in range(20):
        dist.all_reduce(x)
    dist.barrier()
    times = []
    for _ in range({iterations}):
        t = time.perf_counter()
        dist.all_reduce(x)
        times.append(time.perf_counter() - t)
    name = f"{{round_mode[1]}}-{{round_mode[0]}}-{{distbench.rank}}.json"
    with open(os.path.join({out!r}, name), "w") as f:
        json.dump(times, f)
"""


def interleaved_fidelity(tmp: Path, nbytes: int, iterations: int, rounds: int) -> tuple:
    """Plugin, hand loop and the hand loop again take turns in the same rank processes."""
    out = tmp / f"hand-{nbytes}"
    out.mkdir(exist_ok=True)
    results = tmp / f"interleaved-{nbytes}.json"
    source = INTERLEAVED.format(rounds=rounds, iterations=iterations, out=str(out))
    run_pytest(
        tmp,
        source,
        "--distbench",
        "--world-size=2",
        f"--tensor-size={nbytes}",
        f"--distbench-json={results}",
    )
    plugin = [
        b["distbench"]["summary"]["p50"] for b in json.loads(results.read_text())["benchmarks"]
    ]
    loops = {}
    for mode in ("hand", "control"):
        loops[mode] = []
        for r in range(rounds):
            ranks = [json.loads((out / f"{mode}-{r}-{rank}.json").read_text()) for rank in range(2)]
            loops[mode].append(statistics.median(max(p) for p in zip(*ranks, strict=True)))
    return plugin, loops["hand"], loops["control"]


def report_timing_cost() -> None:
    """What the timed loop itself adds per iteration, without any communication noise."""
    import torch

    from pytest_distbench.harness.ranks.measure import Distbench
    from pytest_distbench.harness.wire import MeasureSettings

    bench = Distbench(
        rank=0,
        world_size=1,
        backend="gloo",
        device=torch.device("cpu"),
        group=None,
        control_group=None,
        settings=MeasureSettings(1, 1, 1, 1, 1.0, "float32"),
    )

    def nothing() -> None:
        return None

    n = 200_000
    costs = {"plugin": [], "hand": []}
    for _ in range(5):
        samples = array("d")
        began = time.perf_counter()
        bench._run_count(bench._timer(nothing), samples, n)  # what measure() runs
        costs["plugin"].append((time.perf_counter() - began) / n)
        began = time.perf_counter()
        times = []
        for _ in range(n):
            t = time.perf_counter()
            nothing()
            times.append(time.perf_counter() - t)
        costs["hand"].append((time.perf_counter() - began) / n)
    plugin, hand = statistics.median(costs["plugin"]), statistics.median(costs["hand"])
    print("== timing loop cost per iteration, empty callable ==")
    print(
        f"plugin {plugin * 1e6:.2f} us, hand-written loop {hand * 1e6:.2f} us: the harness adds "
        f"{(plugin - hand) * 1e6:.2f} us per iteration"
    )


def report_fidelity(tmp: Path, rounds: int, cross_check: bool) -> None:
    print("== 3. fidelity vs a hand-written torch loop, 2 ranks gloo ==")
    print("interleaved in the same ranks of one session, order rotating each round:")
    # Rounds are cheap for 4 B and the noise per round is about +-20 % here: take many.
    for nbytes, iterations, n_rounds in ((4, 1000, rounds * 10), (64 << 20, 20, rounds * 4)):
        plugin, hand, control = interleaved_fidelity(tmp, nbytes, iterations, n_rounds)
        if nbytes == 4:
            label, unit, scale = "4 B all_reduce p50 (time)", "us", 1e6
        else:
            label, unit, scale = "64 MiB all_reduce busbw", "GB/s", 1.0
            plugin, hand, control = (
                [nbytes / t / 1e9 for t in xs] for xs in (plugin, hand, control)
            )
        print(
            f"  {label}: medians plugin {statistics.median(plugin) * scale:.3f} {unit}, "
            f"hand {statistics.median(hand) * scale:.3f} {unit} ({len(plugin)} rounds)"
        )
        for name, other in (
            ("plugin/hand", plugin),
            ("control/hand (two identical hand loops)", control),
        ):
            ratios = [a / b for a, b in zip(other, hand, strict=True)]
            q = statistics.quantiles(ratios, n=4)
            print(
                f"    {name}: median of per-round ratios {q[1]:.3f}, "
                f"quartiles {q[0]:.3f} .. {q[2]:.3f}"
            )
    if not cross_check:
        return
    print(
        "cross-check, separate processes (hand loop in fresh spawned interpreters), "
        "alternating runs:"
    )
    for nbytes, iterations, metric in ((4, 2000, "p50"), (64 << 20, 20, "busbw")):
        plugin_values, hand_values = [], []
        for _ in range(rounds):
            plugin_values.append(plugin_all_reduce(tmp, nbytes, iterations)[metric])
            hand_values.append(hand_all_reduce(tmp, nbytes, iterations)[metric])
        p, h = statistics.median(plugin_values), statistics.median(hand_values)
        unit = "us" if metric == "p50" else "GB/s"
        scale = 1e6 if metric == "p50" else 1.0
        print(
            f"  all_reduce {nbytes:>9} B {metric:5}: plugin {p * scale:9.3f} {unit}, "
            f"hand {h * scale:9.3f} {unit}, ratio {p / h:.3f} "
            f"(rounds: plugin {[round(v * scale, 3) for v in plugin_values]}, "
            f"hand {[round(v * scale, 3) for v in hand_values]})"
        )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
