"""Per-test overhead of launcher mode next to local mode, measured side by side in one run.

    python benchmarks/bench_launcher.py [--quick] [--ranks 4] [--tests 40] [--rounds 3]

An empty distbench test body at 4 ranks, in alternating sessions:
  local     pytest --distbench --world-size=4        (the controller drives a forkserver world)
  launcher  torchrun --standalone --nproc-per-node=4 -m pytest --distbench
            (every rank is a pytest process; rank 0 judges through the store)
For each session: the median time from one test's start to the next one's (everything pytest
and the harness do per test; the first test excluded: it also starts the world), as rank 0 /
the controller sees it. Printed: each round, the medians over
rounds, and the ratio launcher / local (<= 1 means launcher mode costs no more per test).
Absolute times on a shared 2-core machine mean little; read the ratio.
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

CALL_TIMER = """
import json, os, time, pytest

STARTS = []

def pytest_runtest_logstart(nodeid, location):
    STARTS.append(time.perf_counter())

def pytest_sessionfinish(session):
    if os.environ.get("RANK", "0") == "0":  # the controller, or launcher rank 0
        with open("call_times.json", "w") as f:
            json.dump([b - a for a, b in zip(STARTS, STARTS[1:])], f)
"""

SOURCE = """
import pytest

@pytest.mark.distbench
@pytest.mark.parametrize("i", range({tests}))
def test_empty(distbench, i):
    pass
"""


def session(tmp: Path, mode: str, ranks: int, tests: int) -> tuple[float, float]:
    """(median time per empty test, session wall time) for one pytest session."""
    (tmp / "test_bench.py").write_text(textwrap.dedent(SOURCE.format(tests=tests)))
    (tmp / "conftest.py").write_text(CALL_TIMER)
    pytest_args = ["-m", "pytest", "-p", "no:cacheprovider", "-q", "--distbench"]
    if mode == "local":
        argv = [sys.executable, *pytest_args, f"--world-size={ranks}",
                "--distbench-launcher=local"]
    else:
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc-per-node={ranks}", *pytest_args]
    began = time.perf_counter()
    result = subprocess.run(argv, cwd=tmp, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - began
    if result.returncode != 0:
        raise SystemExit(f"{mode} session failed:\n{result.stdout}\n{result.stderr}")
    per_test = json.loads((tmp / "call_times.json").read_text())
    return statistics.median(per_test[1:]), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round of 20 tests")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--tests", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rounds, tests = (1, 20) if args.quick else (args.rounds, args.tests)
    print(f"== per-test overhead, empty body, {args.ranks} ranks, {tests} tests per session, "
          f"{rounds} rounds (local and launcher sessions alternate, order rotating) ==")
    results: dict[str, list[float]] = {"local": [], "launcher": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            order = ("local", "launcher") if r % 2 == 0 else ("launcher", "local")
            for mode in order:
                call, wall = session(Path(tmp), mode, args.ranks, tests)
                results[mode].append(call)
                print(f"round {r + 1}  {mode:8s}  per test {call * 1000:7.2f} ms  "
                      f"(session {wall:5.1f} s)", flush=True)
    local = statistics.median(results["local"])
    launcher = statistics.median(results["launcher"])
    print(f"median over rounds: local {local * 1000:.2f} ms, launcher {launcher * 1000:.2f} ms")
    print(f"ratio launcher / local per-test overhead: {launcher / local:.2f}")


if __name__ == "__main__":
    main()
