"""Message rate through the plugin vs the same loop written by hand, side by side in one run.

    python benchmarks/bench_message_rate.py [--slices 60] [--slice-iterations 10]
                                            [--slice-warmup 5] [--bind core|pack]
                                            [--in-world-only]
                                            [--rounds 5] [--messages 20000] [--budget 3s]

Prints, on this machine:
  0. messages/s at 1 B, credits 1 and 10, of the plugin's message loop (run_message_rate
     through distbench.measure) and of the same loop written by hand, inside the same two rank
     processes of one plugin world, in many short neighbouring slices (each order half the
     time): the harness alone, with the machine and the process placement identical; the
     median ratio of neighbours with a bootstrap 95 % interval;
  1. messages/s at 1 B, credits 1 and credits 10, client_to_computation in a 2-rank gloo
     world: through the plugin (a pytest session running the built-in test_message_rate) and
     the same algorithm written by hand with torch alone (two processes whose main threads are
     pinned to CPUs 0 and 1 after the group is up, as the plugin places its ranks),
     alternating, and the ratio plugin / hand per credits;
  2. what the harness itself costs per message: the plugin's message loop and the same loop
     by hand run over a transport that moves nothing, and the clock read per iteration spread
     over an iteration's messages.
Absolute rates on a shared 2-core machine mean little; read the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CREDITS = (1, 10)
NBYTES = 1


def plugin_rates(tmp: Path, budget: str) -> dict[int, float]:
    """msgs/s per credits from one pytest session running the built-in suite."""
    out = tmp / "plugin.json"
    cmd = [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--distbench",
        "--pyargs", "pytest_distbench.suites.test_message_rate", "-k", "client_to_computation",
        "--world-size=2", f"--tensor-size={NBYTES}B",
        f"--distbench-credits={','.join(map(str, CREDITS))}", f"--distbench-budget={budget}",
        "--distbench-max-iterations=100000", f"--distbench-json={out}",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp)
    if result.returncode != 0:
        sys.exit(f"plugin session failed:\n{result.stdout}\n{result.stderr}")
    records = [b["distbench"] for b in json.loads(out.read_text())["benchmarks"]]
    return {r["figures"]["credits"]: r["figures"]["msgs_per_s"] for r in records}


def hand_loop(rank: int, credits: int, payload, inbox, ack, rounds: int) -> None:
    """`rounds` x (credits messages 0 -> 1, one acknowledgement 1 -> 0), by hand."""
    import torch.distributed as dist

    for _ in range(rounds):
        if rank == 0:
            if credits == 1:
                dist.send(payload, 1)
            else:
                for work in [dist.isend(payload, 1) for _ in range(credits)]:
                    work.wait()
            dist.recv(ack, 1)
        else:
            if credits == 1:
                dist.recv(inbox[0], 0)
            else:
                for work in [dist.irecv(inbox[i], 0) for i in range(credits)]:
                    work.wait()
            dist.send(ack, 0)


def hand_rank(rank: int, store: str, messages: int) -> None:
    """One rank of the hand-written loop: torch.distributed and nothing else."""
    import datetime

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.FileStore(store, 2), rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=120))
    # The plugin's placement (--distbench-bind=core): after the group is up, only the main
    # thread is pinned, to CPU `rank`; gloo's I/O threads stay free.
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[rank % len(os.sched_getaffinity(0))]})
    results = {}
    for credits in CREDITS:
        payload = torch.ones(NBYTES, dtype=torch.uint8)
        inbox = [torch.zeros(NBYTES, dtype=torch.uint8) for _ in range(credits)]
        ack = torch.ones(1, dtype=torch.uint8)

        hand_loop(rank, credits, payload, inbox, ack, max(1, 200 // credits))  # warm-up
        dist.barrier()
        rounds = max(1, messages // credits)
        began = time.perf_counter()
        hand_loop(rank, credits, payload, inbox, ack, rounds)
        elapsed = time.perf_counter() - began
        results[credits] = rounds * credits / elapsed
    dist.destroy_process_group()
    if rank == 0:
        print(json.dumps(results))


def hand_rates(tmp: Path, messages: int) -> dict[int, float]:
    store = tmp / f"store-{time.monotonic_ns()}"
    procs = [
        subprocess.Popen([sys.executable, __file__, "--hand-rank", str(r), "--store", str(store),
                          "--messages", str(messages)], stdout=subprocess.PIPE, text=True)
        for r in range(2)
    ]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode for p in procs):
        sys.exit("hand-written loop failed")
    return {int(k): v for k, v in json.loads(outputs[0]).items()}


IN_WORLD_TEST = """
import json, time
import pytest, torch, torch.distributed as dist
from pytest_distbench.families.message_rate.loop import run_message_rate
from pytest_distbench.families.p2p.rates import rounds_per_iteration

ITERATIONS = {iterations}
WARMUP = {warmup}
CREDITS = {credits}
OUT = {out!r}


def hand_loop(rank, credits, payload, inbox, ack, rounds):
{hand_loop}


@pytest.mark.parametrize("i", range({rounds}))
@pytest.mark.parametrize("credits", CREDITS)
def test_in_world(distbench, credits, i):
    rank = distbench.rank
    payload = torch.ones(1, dtype=torch.uint8)
    inbox = [torch.zeros(1, dtype=torch.uint8) for _ in range(credits)]
    ack = torch.ones(1, dtype=torch.uint8)

    # The same messages as the plugin's slice: its warm-up iterations, then its timed ones.
    per_iteration = rounds_per_iteration(credits, 1)

    def by_hand():
        hand_loop(rank, credits, payload, inbox, ack, WARMUP * per_iteration)
        dist.barrier()
        rounds = ITERATIONS * per_iteration
        began = time.perf_counter()
        hand_loop(rank, credits, payload, inbox, ack, rounds)
        elapsed = time.perf_counter() - began
        # Each rank's own elapsed time: the rate is taken over the slower rank, as the
        # plugin's totals are.
        with open(OUT + f".{{rank}}", "a") as f:
            f.write(json.dumps([credits, i, rounds * credits, elapsed]) + "\\n")

    # Alternate which goes first, so a drift in machine load does not favour one side.
    if i % 2:
        by_hand()
    run_message_rate(distbench, "client_to_computation", credits, {nbytes})
    if not i % 2:
        by_hand()
"""


def median_ci(values: list[float], trials: int = 2000, seed: int = 1) -> tuple[float, float]:
    """A bootstrap 95 % interval of the median of `values`."""
    import random

    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values)))
                     for _ in range(trials))
    return medians[int(0.025 * trials)], medians[int(0.975 * trials) - 1]


def in_world(tmp: Path, rounds: int, iterations: int, warmup: int, bind: str) -> None:
    """The plugin's loop and the hand loop in the same rank processes, alternating.

    Each round is one short slice of each, moving the same messages: the plugin's
    `--distbench-warmup` and `--distbench-iterations` iterations, and the hand loop's warm-up
    and timed block of as many rounds. This VM flips between a fast and a slow mode every
    10-500 ms, so two short neighbouring slices are far more often in the same mode than two
    long ones; the figure is the median over rounds of the ratio of the two neighbours, with a
    bootstrap interval.
    """
    import inspect

    hand_source = inspect.getsource(hand_loop).split(chr(10), 2)[2]  # the body
    out, rates = tmp / "hand.jsonl", tmp / "in_world.json"
    (tmp / "test_in_world.py").write_text(IN_WORLD_TEST.format(
        iterations=iterations, warmup=warmup, credits=list(CREDITS), out=str(out),
        rounds=rounds, nbytes=NBYTES, hand_loop=hand_source))
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--distbench",
           "--world-size=2", f"--distbench-iterations={iterations}",
           f"--distbench-warmup={warmup}", f"--distbench-bind={bind}",
           f"--distbench-json={rates}", "test_in_world.py"]
    began = time.perf_counter()
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=tmp)
    if result.returncode != 0:
        sys.exit(f"in-world session failed:\n{result.stdout}\n{result.stderr}")
    wall = time.perf_counter() - began
    hand_s: dict[tuple[int, int], float] = {}
    hand_n: dict[tuple[int, int], int] = {}
    for rank in range(2):
        for c, i, n, elapsed in map(json.loads, Path(f"{out}.{rank}").read_text().splitlines()):
            hand_s[(c, i)] = max(hand_s.get((c, i), 0.0), elapsed)
            hand_n[(c, i)] = n
    hand = {k: hand_n[k] / hand_s[k] for k in hand_s}
    plugin = {}
    for b in json.loads(rates.read_text())["benchmarks"]:
        r = b["distbench"]
        plugin[(r["params"]["credits"], r["params"]["i"])] = r["figures"]["msgs_per_s"]
    print(f"in the same world (same processes; {rounds} rounds per credits, each a slice of "
          f"the plugin's loop ({warmup} warm-up + {iterations} timed iterations) next to the "
          f"hand loop moving the same messages, which first alternating; "
          f"--distbench-bind={bind}; {wall:.0f} s):")
    for c in CREDITS:
        ratios = [plugin[(c, i)] / hand[(c, i)] for i in range(rounds)]
        mine = statistics.median(plugin[(c, i)] for i in range(rounds))
        theirs = statistics.median(hand[(c, i)] for i in range(rounds))
        low, high = median_ci(ratios)
        quartiles = statistics.quantiles(ratios, n=4)
        print(f"  credits {c:>2}: plugin {mine:,.0f} msgs/s, hand {theirs:,.0f} msgs/s; "
              f"ratio plugin/hand median {statistics.median(ratios):.3f} "
              f"(95 % interval {low:.3f}-{high:.3f}; rounds: quartiles "
              f"{quartiles[0]:.3f}-{quartiles[2]:.3f}, range {min(ratios):.3f}-"
              f"{max(ratios):.3f})")
        # The order's own effect (the second slice of a pair runs in what the first left):
        # the median ratio with each side first.
        plugin_first = statistics.median(ratios[0::2])
        hand_first = statistics.median(ratios[1::2])
        print(f"             plugin first {plugin_first:.3f}, hand first {hand_first:.3f}; "
              f"their geometric mean {(plugin_first * hand_first) ** 0.5:.3f}")


def harness_overhead(credits: int) -> tuple[float, float, float]:
    """ns per message: plugin loop over a null transport, the hand loop over the same, and
    the per-iteration clock read of distbench.measure spread over the iteration's messages."""
    import torch

    from pytest_distbench.families.message_rate.loop import message_loop
    from pytest_distbench.families.p2p.common import make_endpoint
    from pytest_distbench.families.p2p.rates import rounds_per_iteration
    from pytest_distbench.families.transports.null import NullTransport

    rounds = rounds_per_iteration(credits, NBYTES)
    per_iteration = rounds * credits
    null = NullTransport()
    fn = message_loop(make_endpoint(null, 0, 1, True, credits, NBYTES, torch.device("cpu")),
                      credits, rounds)
    window, recv, ack = null.batch((), ()), null.recv, torch.zeros(1)

    def hand() -> None:
        for _ in range(rounds):
            window()
            recv(ack, 1)

    def per_message(f, n=20000) -> float:
        best = float("inf")
        for _ in range(5):
            began = time.perf_counter()
            for _ in range(n):
                f()
            best = min(best, (time.perf_counter() - began) / (n * per_iteration))
        return best * 1e9

    samples: list[float] = []
    began = time.perf_counter()
    for _ in range(100000):  # what measure() does around each call: two clock reads, append
        start = time.perf_counter()
        samples.append(time.perf_counter() - start)
    clock = (time.perf_counter() - began) / 100000 / per_iteration * 1e9
    return per_message(fn), per_message(hand), clock


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--budget", default="3s")
    parser.add_argument("--hand-rank", type=int, default=None)
    parser.add_argument("--store", default=None)
    parser.add_argument("--slices", type=int, default=60,
                        help="in-world rounds per credits (each a short slice of each loop)")
    parser.add_argument("--slice-iterations", type=int, default=10,
                        help="in-world: timed iterations per slice (~64 messages each), both "
                             "sides moving the same messages")
    parser.add_argument("--slice-warmup", type=int, default=5,
                        help="in-world: untimed warm-up iterations before each slice")
    parser.add_argument("--bind", default="core",
                        help="--distbench-bind of the in-world comparison (pack: steadier)")
    parser.add_argument("--in-world-only", action="store_true",
                        help="skip the whole-session vs standalone-process comparison")
    args = parser.parse_args()
    if args.hand_rank is not None:
        hand_rank(args.hand_rank, args.store, args.messages)
        return
    with tempfile.TemporaryDirectory() as name:
        in_world(Path(name), args.slices, args.slice_iterations, args.slice_warmup,
                 args.bind)
    if args.in_world_only:
        report_overhead()
        return
    print(f"whole plugin sessions vs standalone processes: {NBYTES} B, client_to_computation, "
          f"2-rank gloo world, {args.rounds} alternating rounds (plugin budget {args.budget}, hand "
          f"{args.messages} messages per credits)")
    plugin: dict[int, list[float]] = {c: [] for c in CREDITS}
    hand: dict[int, list[float]] = {c: [] for c in CREDITS}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        for i in range(args.rounds):
            first, second = (plugin_rates, hand_rates) if i % 2 == 0 else (hand_rates,
                                                                           plugin_rates)
            for runner in (first, second):
                got = runner(tmp, args.budget if runner is plugin_rates else args.messages)
                target = plugin if runner is plugin_rates else hand
                for c in CREDITS:
                    target[c].append(got[c])
            print(f"  round {i + 1}: " + "  ".join(
                f"credits {c}: plugin {plugin[c][-1]:,.0f} hand {hand[c][-1]:,.0f} msgs/s"
                for c in CREDITS), flush=True)
    for c in CREDITS:
        ratios = [p / h for p, h in zip(plugin[c], hand[c], strict=True)]
        print(f"credits {c:>2}: plugin {statistics.median(plugin[c]):,.0f} msgs/s, hand "
              f"{statistics.median(hand[c]):,.0f} msgs/s; ratio plugin/hand median "
              f"{statistics.median(ratios):.3f} (per round: "
              f"{', '.join(f'{r:.3f}' for r in ratios)})")
    report_overhead()


def report_overhead() -> None:
    for c in CREDITS:
        loop, by_hand, clock = harness_overhead(c)
        print(f"harness cost per message, credits {c:>2} (null transport): plugin loop "
              f"{loop:.1f} ns, hand loop {by_hand:.1f} ns, measure()'s clock per iteration "
              f"{clock:.2f} ns/message")


if __name__ == "__main__":
    main()
