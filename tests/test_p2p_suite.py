"""The p2p and message-rate suites through the plugin, with real ranks (small and fast)."""

from __future__ import annotations

import json
import math
import re

import pytest
from tables import table_under

FAST = ("--distbench-budget=50ms", "--distbench-warmup=1", "--distbench-min-iterations=5")


def _records(path) -> list[dict]:
    return [b["distbench"] for b in json.loads(path.read_text())["benchmarks"]]


def test_p2p_suite_two_ranks_exact_sizes_window_and_rates(pytester, distbench_run):
    out = pytester.path / "out.json"
    result = distbench_run(
        "--distbench", "--pyargs", "pytest_distbench.suites.test_p2p", "--world-size=2",
        "--tensor-size=1B,1MiB+1B", "--distbench-window=4", f"--distbench-json={out}", *FAST,
    )
    result.assert_outcomes(passed=8)
    text = result.stdout.str()
    headers, rows = table_under(
        text, "# p2p_latency  backend=gloo  ranks=2  device=cpu  | one-way latency: p50 of the "
        "ping-pong round trips / 2 ± 95 % CI")
    assert headers == ["size (B)", "one-way p50 (us) ± 95% CI", "one-way p95 (us)",
                       "one-way mean (us)", "#wrong", "iters"]
    assert [(r[0], r[4]) for r in rows] == [("1", "0"), ("1048577", "0")]
    result.stdout.fnmatch_lines(["# one-way latency = round trip / 2*"])
    headers, rows = table_under(
        text, "# p2p_bandwidth  backend=gloo  ranks=2  device=cpu  | MB/s: total messages / "
        "total time ± 95 % CI (block bootstrap)")
    assert headers == ["size (B)", "window", "pairs", "MB/s ± 95% CI", "MB/s p50", "MB/s p95",
                       "msgs/s", "msgs/s p50", "msgs/s p95", "#wrong", "iters"]
    assert [r[:3] + r[-2:-1] for r in rows] == [["1", "4", "1", "0"], ["1048577", "4", "1", "0"]]
    records = {(r["family"], r["nbytes"]): r for r in _records(out)}
    assert set(records) == {(f, n) for f in ("p2p_latency", "p2p_bandwidth", "p2p_bibw",
                                             "p2p_message_rate_pairs") for n in (1, 1048577)}
    for (family, nbytes), r in records.items():
        f = r["figures"]
        assert r["wrong"] == 0 and r["dtype"] == "uint8" and r["count"] == nbytes
        expected = {"p2p_latency": 2, "p2p_bandwidth": 4, "p2p_bibw": 8,
                    "p2p_message_rate_pairs": 4}[family]
        assert f["messages_per_iteration"] == expected
        # Totals: the slowest rank's whole timed region, from the record's own samples.
        total = max(sum(rank) for rank in r["rank_samples"])
        assert total <= sum(r["samples"]) and math.isclose(f["total_s"], total)
        assert f["total_messages"] == expected * r["iterations"]
        assert math.isclose(f["msgs_per_s"], expected * r["iterations"] / total)
        assert math.isclose(f["mbps"], f["msgs_per_s"] * nbytes / 1e6)
        if family == "p2p_latency":
            assert math.isclose(f["one_way_us"], r["summary"]["p50"] * 1e6 / 2)
            assert f["round_trip"] is True and "window" not in f
        else:
            assert f["window"] == 4 and f["pairs"] == 1


def test_message_rate_pairs_four_ranks_two_windows(pytester, distbench_run):
    out = pytester.path / "out.json"
    result = distbench_run(
        "--distbench", "--pyargs", "pytest_distbench.suites.test_p2p", "-k", "pairs",
        "--world-size=4", "--tensor-size=64B", "--distbench-window=2,8",
        f"--distbench-json={out}", *FAST,
    )
    result.assert_outcomes(passed=2)
    by_window = {r["figures"]["window"]: r for r in _records(out)}
    assert sorted(by_window) == [2, 8]
    for window, r in by_window.items():
        # 4 ranks: pairs (0, 2) and (1, 3), each a window per iteration.
        assert r["figures"]["pairs"] == 2
        assert r["figures"]["messages_per_iteration"] == 2 * window
        assert r["wrong"] == 0
        assert r["params"]["window"] == window


def test_message_rate_paths_and_credits_skip_when_ranks_are_too_few(pytester, distbench_run):
    out = pytester.path / "out.json"
    result = distbench_run(
        "--distbench", "--pyargs", "pytest_distbench.suites.test_message_rate",
        "-k", "not rpc",
        "--world-size=2", "--tensor-size=1B", "--distbench-credits=1,3", "-rs",
        f"--distbench-json={out}", *FAST,
    )
    result.assert_outcomes(passed=4, skipped=2)
    result.stdout.fnmatch_lines([
        "*SKIPPED*path computation_to_computation needs 3 ranks (rank 0 = client, ranks 1.. "
        "= computations; computation 1 sends to computation 2); this world has 2*",
    ])
    result.stdout.fnmatch_lines([
        "# message_rate  backend=gloo  ranks=2  device=cpu  | msgs/s: total messages / total "
        "time ± 95 % CI (block bootstrap)",
        "# transport: process_group",  # one table per transport
    ])
    headers, rows = table_under(result.stdout.str(), "# transport: process_group")
    assert headers == ["path", "size (B)", "credits", "msgs/s ± 95% CI", "us/msg", "bandwidth",
                       "msgs", "time (s)", "#wrong"]
    # One-byte messages move little: the figure reads in its own unit, never 0.0001483 MB/s.
    assert all(re.fullmatch(r"[\d.]+ [KMG]B/s", r[5]) and float(r[5].split()[0]) >= 0.1
               for r in rows), rows
    assert [r[:3] + r[-1:] for r in rows] == [
        [p, "1", c, "0"] for p in ("client_to_computation", "computation_to_client")
        for c in ("1", "3")]
    records = _records(out)
    assert {(r["figures"]["path"], r["figures"]["credits"]) for r in records} == {
        (p, c) for p in ("client_to_computation", "computation_to_client") for c in (1, 3)}
    for r in records:
        f = r["figures"]
        credits = f["credits"]
        # At most about 64 small messages per iteration, in whole rounds of `credits`: fewer
        # rounds where 64 would not let --distbench-min-iterations fit the budget.
        assert f["messages_per_iteration"] == credits * f["rounds_per_iteration"]
        assert 1 <= f["rounds_per_iteration"] <= math.ceil(64 / credits)
        assert r["iterations"] >= 5
        assert r["params"]["credits"] == credits and r["params"]["path"] == f["path"]
        assert (f["sender"], f["receiver"]) == (
            (0, 1) if f["path"] == "client_to_computation" else (1, 0))
        assert math.isclose(f["us_per_msg"] * f["msgs_per_s"], 1e6)
        assert r["wrong"] == 0


def test_computation_to_computation_runs_with_three_ranks(pytester, distbench_run):
    out = pytester.path / "out.json"
    result = distbench_run(
        "--distbench", "--pyargs", "pytest_distbench.suites.test_message_rate",
        "-k", "computation_to_computation and not rpc", "--world-size=3", "--tensor-size=1KiB+1B",
        "--distbench-credits=2", f"--distbench-json={out}", *FAST,
    )
    result.assert_outcomes(passed=1)
    (r,) = _records(out)
    assert (r["figures"]["sender"], r["figures"]["receiver"]) == (1, 2)
    assert r["nbytes"] == 1025 and r["wrong"] == 0
    result.stdout.fnmatch_lines(["*computation_to_computation*1025*2*0"])


@pytest.mark.parametrize("world_size", [3, pytest.param(5, marks=pytest.mark.extended)])
def test_a_duration_run_on_a_path_that_leaves_rank_0_idle_lasts_its_duration(
        pytester, distbench_run, world_size):
    """Rank 0 is not on the computation_to_computation path: its idle loop must not set the
    pace of the duration agreement (it asked for chunks of a million messages: a hang)."""
    out = pytester.path / "out.json"
    result = distbench_run(
        "--distbench", "--pyargs", "pytest_distbench.suites.test_message_rate",
        "-k", "computation_to_computation and not rpc", f"--world-size={world_size}",
        "--tensor-size=1B", "--distbench-credits=1", "--distbench-duration=2s",
        "--distbench-report-every=0.5s", "--distbench-timeout=60", f"--distbench-json={out}",
        "-s", "-v", "--durations=0")
    result.assert_outcomes(passed=1)
    (r,) = _records(out)
    timed = sum(r["samples"])
    # The slowest rank's time per iteration, summed: the duration, give or take a chunk (and a
    # loaded machine's scheduling: five ranks share two cores here).
    assert 1.8 <= timed <= 3.0, timed
    rate = r["figures"]["messages_per_iteration"] * len(r["samples"]) / timed
    assert rate < 1e6, rate  # a round trip per message over loopback: far below 1e6/s
    lines = re.findall(r"Rate: ([0-9.]+)msg/s", result.stdout.str())
    assert lines and all(float(x) < 1e6 for x in lines), lines


def test_one_rank_world_skips_with_the_reason(distbench_run):
    result = distbench_run(
        "--distbench", "--pyargs", "pytest_distbench.suites.test_p2p", "-k", "latency",
        "--world-size=1", "--tensor-size=1B", "-rs", *FAST,
    )
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*p2p_latency needs at least 2 ranks; this world has 1*"])


# A transport is the public, pluggable part: these tests bring faulty ones through it.
FAULTY_TRANSPORTS = """
import torch
from pytest_distbench.families.transports.process_group import ProcessGroupTransport


class Corrupting(ProcessGroupTransport):
    name = "corrupting"

    def recv(self, tensor, peer):
        super().recv(tensor, peer)
        tensor[0] ^= 0xFF  # one wrong byte per message received this way

    def batch(self, sends, recvs):
        run = super().batch(sends, recvs)
        first = recvs[0][0] if recvs else None

        def corrupt():
            run()
            if first is not None:
                first[-1] ^= 0xFF

        return corrupt


class Losing(ProcessGroupTransport):
    name = "losing"

    def batch(self, sends, recvs):
        # Receives land in scratch buffers: the payloads never reach the benchmark's buffers.
        scratch = [(torch.empty_like(t), p) for t, p in recvs]
        return super().batch(sends, scratch)
"""


def test_wrong_payloads_fail_the_test_with_their_count(pytester, distbench_run):
    pytester.makepyfile(transports=FAULTY_TRANSPORTS)
    pytester.makepyfile(
        test_faulty="""
        import pytest
        from transports import Corrupting, Losing
        from pytest_distbench.families.p2p.members import P2P, run_p2p
        from pytest_distbench.families.message_rate.loop import run_message_rate

        pytestmark = pytest.mark.distbench(iterations=3, warmup=1)

        def test_latency_corrupted(distbench):
            run_p2p(distbench, P2P["p2p_latency"], 1000, transport=Corrupting(distbench))

        def test_bandwidth_corrupted(distbench):
            run_p2p(distbench, P2P["p2p_bandwidth"], 1000, 4, transport=Corrupting(distbench))

        def test_message_rate_lost(distbench):
            run_message_rate(distbench, "client_to_computation", 2, 100,
                             transport=Losing(distbench))

        def test_message_rate_clean(distbench):
            run_message_rate(distbench, "client_to_computation", 2, 100)
        """
    )
    out = pytester.path / "out.json"
    result = distbench_run("--distbench", "--world-size=2", f"--distbench-json={out}")
    result.assert_outcomes(failed=3, passed=1)
    result.stdout.fnmatch_lines(["*wrong element(s) in the checked result*"])
    wrong = {r["name"].split("[")[0]: r["wrong"] for r in _records(out)}
    # Latency: each side's one buffer, after the timed loop and after the fresh check run.
    assert wrong["test_latency_corrupted"] == 2 * 2
    # Bandwidth: only the receiver's first buffer (of 4) is hit, the same two times.
    assert wrong["test_bandwidth_corrupted"] == 2
    # Lost: both receive buffers (credits 2, 100 B) are never written: all 200 bytes wrong
    # after the timed loop and again after the fresh check run.
    assert wrong["test_message_rate_lost"] == 2 * 200
    assert wrong["test_message_rate_clean"] == 0


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("--distbench-window=0", "*--distbench-window: invalid window '0': must be a positive*"),
        ("--tensor-size=1MiB+", "*--tensor-size: invalid size '1MiB+': empty term*"),
        ("--tensor-size=1MiB+x", "*--tensor-size: invalid size '1MiB+x': in term 'x'*"),
    ],
)
def test_bad_window_or_size_sum_is_a_usage_error(distbench_run, option, message):
    result = distbench_run("--distbench", "--pyargs", "pytest_distbench.suites.test_p2p",
                           option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_a_rank_failing_mid_transfer_is_reported_and_the_world_recovers(pytester, distbench_run):
    pytester.makepyfile(
        test_breaks="""
        import pytest
        from pytest_distbench.families.transports.process_group import ProcessGroupTransport
        from pytest_distbench.families.message_rate.loop import run_message_rate

        pytestmark = pytest.mark.distbench(iterations=20, warmup=1, timeout="20s")


        class BreaksInRank1(ProcessGroupTransport):
            calls = 0

            def send(self, tensor, peer):
                BreaksInRank1.calls += 1
                if self.rank == 1 and BreaksInRank1.calls == 300:  # in the timed region
                    raise RuntimeError("link broke mid-transfer")
                super().send(tensor, peer)

            def __init__(self, distbench):
                super().__init__(distbench)
                self.rank = distbench.rank


        def test_breaks(distbench):
            run_message_rate(distbench, "client_to_computation", 1, 8,
                             transport=BreaksInRank1(distbench))


        def test_after(distbench):
            run_message_rate(distbench, "client_to_computation", 1, 8)
        """
    )
    result = distbench_run("--distbench", "--world-size=2", timeout=180)
    result.assert_outcomes(failed=1, passed=1)
    out = result.stdout.str()
    assert "rank 1 raised" in out and "link broke mid-transfer" in out
    assert "in receive_rounds" in out  # where, in the message loop
    # Rank 0 waits for an acknowledgement that never comes: stopped, and a new world serves
    # the next test.
    assert "ranks [0] were still running after that and were stopped" in out
    assert "gloo ws2 cpu x2 (" in out  # two worlds started


def test_message_rate_over_rpc_counts_every_message_and_checks_it(pytester, distbench_run):
    out = pytester.path / "out.json"
    result = distbench_run(
        "--distbench", "--pyargs", "pytest_distbench.suites.test_message_rate",
        "-k", "rpc and not computation_to_computation", "--world-size=2",
        "--tensor-size=1KiB", "--distbench-credits=1,4", f"--distbench-json={out}",
        "--distbench-iterations=3", "--distbench-warmup=1",
    )
    result.assert_outcomes(passed=4)
    records = _records(out)
    assert {(r["figures"]["path"], r["figures"]["credits"]) for r in records} == {
        (p, c) for p in ("client_to_computation", "computation_to_client") for c in (1, 4)}
    for r in records:
        f = r["figures"]
        assert f["transport"] == "rpc"
        assert r["wrong"] == 0
        assert r["nbytes"] == 1024
        # Count mode: the user's iterations, each the full batch of about 64 messages.
        assert f["messages_per_iteration"] == f["credits"] * math.ceil(64 / f["credits"])
        assert r["iterations"] == 3 and f["msgs_per_s"] > 0


def test_rpc_transport_without_an_agent_says_what_is_missing(pytester, distbench_run):
    pytester.makepyfile(
        """
        import pytest
        from pytest_distbench.families.message_rate.loop import run_message_rate

        @pytest.mark.distbench
        def test_no_agent(distbench):
            run_message_rate(distbench, "client_to_computation", 1, 8, transport="rpc")
        """
    )
    result = distbench_run("--distbench", "--world-size=2")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the rpc transport needs RPC up in every rank*rpc_agent*"])
