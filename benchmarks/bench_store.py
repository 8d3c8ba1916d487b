"""Scale and cost of the TCPStore suite, measured on this machine.

    python benchmarks/bench_store.py [--quick] [--scale 4096,8192,16384,20000]

Prints:
  1. reach: test_store_init (and test_store_barrier up to --barrier-max) through the plugin,
     for both backends, at each client count, each in its own pytest session under the
     default --distbench-timeout (300 s): pass/fail, the init time, connect p50/p95/max and
     slow connects, the session's wall time, and for a failure the reason the harness gave
     (the descriptor limit, memory, threads, a timeout);
  2. the harness's own cost per client next to a connect, side by side in one process
     (alternating): starting a client thread, handing it a task and joining it, against
     one client's TCPStore constructor (connect + the init add) to a local server; as a ratio.
Absolute times on a shared 2-core machine mean little; read the ratios and the reasons.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_session(test: str, clients: int, backend: str, rounds: int) -> dict:
    """One pytest session running one store test; its record or its failure reason."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--distbench",
               "--pyargs", "pytest_distbench.suites", "-k", test,
               f"--distbench-store-clients={clients}", f"--distbench-store-backend={backend}",
               f"--distbench-store-rounds={rounds}", f"--distbench-json={out}"]
        began = time.perf_counter()
        try:
            done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            return {"ok": False, "wall_s": time.perf_counter() - began,
                    "reason": "session did not end within 900 s"}
        wall = time.perf_counter() - began
        if done.returncode == 0 and out.exists():
            record = json.loads(out.read_text())["benchmarks"][0]["distbench"]
            return {"ok": True, "wall_s": wall, "record": record}
        lines = [ln.strip() for ln in done.stdout.splitlines()
                 if "E " in ln[:4] or "needs about" in ln or "did not" in ln
                 or "could " in ln or "timed out" in ln]
        return {"ok": False, "wall_s": wall, "reason": " | ".join(lines[:3])[:600]
                or done.stdout[-600:]}


def reach(scale: list[int], barrier_max: int, rounds: int) -> None:
    print("1. reach through the plugin (one session per point, default --distbench-timeout)")
    print(f"{'test':>14} {'backend':>7} {'clients':>8} {'result':>6} {'init s':>8} "
          f"{'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'slow':>6} {'barrier ms':>10} "
          f"{'session s':>9}")
    for clients in scale:
        for backend in ("libuv", "legacy"):
            tests = ["test_store_init"] + (["test_store_barrier"] if clients <= barrier_max
                                           else [])
            for test in tests:
                r = run_session(test, clients, backend, rounds)
                if not r["ok"]:
                    print(f"{test[5:]:>14} {backend:>7} {clients:>8} {'FAIL':>6}  "
                          f"session {r['wall_s']:.0f} s: {r['reason']}")
                    continue
                rec, f = r["record"], r["record"]["figures"]
                barrier = (f"{rec['summary']['mean'] * 1e3:10.1f}"
                           if test == "test_store_barrier" else f"{'-':>10}")
                print(f"{test[5:]:>14} {f['server_backend']:>7} {clients:>8} {'ok':>6} "
                      f"{f['init_s']:8.2f} {f.get('connect_p50_s', 0) * 1e3:8.1f} "
                      f"{f.get('connect_p95_s', 0) * 1e3:8.1f} "
                      f"{f.get('connect_max_s', 0) * 1e3:8.1f} {f.get('slow_connects', 0):>6} "
                      f"{barrier} {r['wall_s']:9.1f}", flush=True)


def harness_cost(clients: int, rounds: int) -> None:
    """Per client, alternating in one process: the harness's parts vs a real connect.

    Thread start and join happen outside any timed region; the hand-off (waking every thread
    with a task and collecting that it is done) happens inside the init and every phase, so
    it is the part to hold against a connect.
    """
    from datetime import timedelta

    import torch.distributed as dist

    from pytest_distbench.families.store.common import Crew, Server, raise_nofile

    raise_nofile()
    ids = range(1, clients)
    n = len(ids)
    start, handoff, join, connect, connect_p50, per_client_init = [], [], [], [], [], []
    for i in range(2 * rounds):
        if i % 2 == 0:
            began = time.perf_counter()
            crew = Crew(ids)
            started = time.perf_counter()
            crew.start(lambda slot: None)
            crew.wait(60)
            handed = time.perf_counter()
            crew.close(60)
            joined = time.perf_counter()
            start.append((started - began) / n)
            handoff.append((handed - started) / n)
            join.append((joined - handed) / n)
        else:
            server = Server(clients)
            port = server.port
            crew = Crew(ids)

            def task(slot: int, crew=crew, port=port) -> float:
                began = time.perf_counter()
                crew.clients[slot] = dist.TCPStore("127.0.0.1", port, clients, False,
                                                   timedelta(seconds=60))
                return time.perf_counter() - began

            crew.start(task)
            per_client_init.append(server.start(clients, "libuv", 60) / clients)
            crew.wait(60)
            times = [t for t in crew.results if t is not None]
            connect.append(statistics.mean(times))
            connect_p50.append(statistics.median(times))
            crew.close(60)
            server.close()
    st, ho, jo, c, c50, ci = (statistics.median(x) for x in (
        start, handoff, join, connect, connect_p50, per_client_init))
    print(f"\n2. harness cost per client ({clients} clients, {rounds} rounds each, alternating, "
          "one process, libuv server in the same process)")
    print(f"   thread start (before any timed region):        {st * 1e6:9.1f} us per client")
    print(f"   task hand-off (inside the timed regions):      {ho * 1e6:9.1f} us per client")
    print(f"   stop + join (after):                           {jo * 1e6:9.1f} us per client")
    print(f"   connect, the client's own view (mean):         {c * 1e6:9.1f} us "
          f"(median client {c50 * 1e6:.1f} us)")
    print(f"   server init / clients (the study's figure / N): {ci * 1e6:9.1f} us")
    print(f"   ratio hand-off / server init per client: {ho / ci:.3f}; "
          f"hand-off / client connect: {ho / c:.4f}; "
          f"all harness parts / server init per client: {(st + ho + jo) / ci:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small points only")
    parser.add_argument("--scale", default="4096,8192,16384,20000",
                        help="client counts to try, comma-separated")
    parser.add_argument("--barrier-max", type=int, default=4096,
                        help="largest client count to run the barrier at")
    parser.add_argument("--rounds", type=int, default=5, help="barrier rounds per point")
    parser.add_argument("--skip-reach", action="store_true")
    args = parser.parse_args()
    scale = [64, 256] if args.quick else [int(x) for x in args.scale.split(",")]
    if not args.skip_reach:
        reach(scale, args.barrier_max, args.rounds)
    harness_cost(256 if args.quick else 1024, 3 if args.quick else 5)


if __name__ == "__main__":
    main()
