"""Launcher mode's seal (harness/launcher/seal.py): a process that can reach the launcher's store
cannot write a test's outcome, a verdict or the end status.

The forger here is what the issue's attacker was: another process of the same user that learns
MASTER_PORT and TORCHELASTIC_RUN_ID (a rank's environment is readable in /proc) and keeps
writing a "passed" outcome for rank 1 under the launcher's own key.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import timedelta

import pytest
import torch.distributed as dist
from hypothesis import given
from hypothesis import strategies as st
from launching import PYTEST, TORCHRUN, free_port, run_all

from pytest_distbench.harness.launcher import rank0, wire
from pytest_distbench.harness.launcher.seal import Forged, Seal
from pytest_distbench.harness.launcher.storechannel import StoreChannel

FORGER = textwrap.dedent("""
    import json, os, sys, time
    from datetime import timedelta
    import torch.distributed as dist

    info, writing, stop = sys.argv[1:4]
    while not os.path.exists(info):
        time.sleep(0.02)
    found = json.load(open(info))
    store = dist.TCPStore("127.0.0.1", int(found["port"]), is_master=False,
                          timeout=timedelta(seconds=30))
    prefix = f"distbench/{found['run']}.0/"
    passed = json.dumps({"status": "passed", "message": "", "measurements": [], "output": "",
                         "order": None, "released": False, "info": None, "rebuild": ""})
    deadline = time.monotonic() + 120
    while not os.path.exists(stop) and time.monotonic() < deadline:
        store.set(prefix + "t1/outcome/1", passed)
        store.set(prefix + "end", json.dumps({"exitstatus": 0}))
        open(writing, "w").close()
        time.sleep(0.005)
""")

TESTS = textwrap.dedent("""
    import json, os, time, pytest

    @pytest.mark.distbench
    def test_shows_the_store(distbench):
        if distbench.rank == 0:  # what any process of the user can read in /proc/PID/environ
            with open("store.json.tmp", "w") as f:
                json.dump({"port": os.environ["MASTER_PORT"],
                           "run": os.environ["TORCHELASTIC_RUN_ID"]}, f)
            os.replace("store.json.tmp", "store.json")
        deadline = time.monotonic() + 60
        while not os.path.exists("forging") and time.monotonic() < deadline:
            time.sleep(0.02)

    @pytest.mark.distbench
    def test_fails_on_rank_1(distbench):
        if distbench.rank == 1:
            time.sleep(1.0)  # the forged outcome is in the store well before this rank's own
            raise ValueError("boom on rank one")
""")


# Extended: rank 0's refusal of a forged outcome is held by
# test_rank_0_fails_a_test_whose_outcome_no_rank_sealed below (a real store, the intruder's own
# write); this runs the attack end to end under torchrun, a forger process writing throughout.
@pytest.mark.extended
def test_a_forged_passed_outcome_in_torchrun_store_is_refused_and_named(pytester, leak_tag):
    pytester.makepyfile(TESTS)
    stop = pytester.path / "stop"
    forger = subprocess.Popen([sys.executable, "-c", FORGER, str(pytester.path / "store.json"),
                               str(pytester.path / "forging"), str(stop)])
    try:
        [done] = run_all([(TORCHRUN + ["--standalone", "--nproc-per-node=2", "-m", "pytest",
                                       "-p", "no:cacheprovider", "--distbench", "-rA"], {})],
                         pytester.path, timeout=300)
    finally:
        stop.touch()
        forger.wait(30)
    assert done.returncode != 0, done.output
    assert "FAILED test_a_forged_passed_outcome_in_torchrun_store_is_refused_and_named.py::" \
           "test_fails_on_rank_1" in done.output, done.output
    assert "rank 0 refused rank 1's outcome" in done.output, done.output
    assert "t1/outcome/1' does not carry the run's seal" in done.output, done.output
    assert "1 failed, 1 passed" in done.output, done.output


@pytest.fixture
def store():
    server = dist.TCPStore("127.0.0.1", free_port(), is_master=True,
                           timeout=timedelta(seconds=5), wait_for_workers=False)
    yield server


def test_an_unsealed_or_moved_value_is_forged_and_a_sealed_one_reads_back(store):
    ranks = StoreChannel(store, "distbench/run.0/", Seal(b"s" * 32))
    ranks.set(wire.END, {"exitstatus": 1})
    assert ranks.get(wire.END) == {"exitstatus": 1}
    intruder = StoreChannel(store, "distbench/run.0/")  # reaches the store, has no secret
    intruder.set(wire.END, {"exitstatus": 0})
    with pytest.raises(Forged, match="'distbench/run.0/end' does not carry the run's seal"):
        ranks.get(wire.END)
    # A sealed value copied under another key (another test's verdict, another rank's outcome)
    ranks.set(wire.of_test(3, wire.VERDICT), {"status": "passed", "message": "",
                                              "rebuild": False})
    store.set("distbench/run.0/" + wire.of_test(4, wire.VERDICT),
              store.get("distbench/run.0/" + wire.of_test(3, wire.VERDICT)))
    with pytest.raises(Forged):
        ranks.get(wire.of_test(4, wire.VERDICT))
    # Another run's secret is no better than none.
    StoreChannel(store, "distbench/run.0/", Seal(b"t" * 32)).set(wire.END, {"exitstatus": 0})
    got = ranks.get_texts([wire.END, wire.of_test(3, wire.VERDICT)])
    assert isinstance(got[0], Forged) and json.loads(got[1])["status"] == "passed"


def test_rank_0_fails_a_test_whose_outcome_no_rank_sealed(store):
    """What rank 0 makes of the outcomes it reads for test 1: rank 2's, sealed, stands; rank
    1's, written over by a process that reaches the store without the run's secret, fails the
    test naming the key, as the end-to-end attack above reads it."""
    prefix = "distbench/run.0/"
    ranks = StoreChannel(store, prefix, Seal(b"s" * 32))
    passed = {"status": "passed", "message": "", "measurements": [], "output": "",
              "order": None, "released": False, "info": None, "rebuild": ""}
    for rank in (1, 2):
        ranks.set(wire.of_test(1, wire.outcome(rank)), passed)
    StoreChannel(store, prefix).set(wire.of_test(1, wire.outcome(1)), passed)
    keys = [wire.of_test(1, wire.outcome(rank)) for rank in (1, 2)]
    posted = {rank: rank0._read_outcome(rank, raw)
              for rank, raw in zip((1, 2), ranks.get_texts(keys), strict=True)}
    assert posted[2].status == "passed"
    assert posted[1].status == "failed"
    assert posted[1].message.startswith("rank 0 refused rank 1's outcome: ")
    assert "'distbench/run.0/t1/outcome/1' does not carry the run's seal" in posted[1].message
    outcomes = rank0.run_result(posted).outcomes
    assert outcomes[1].status == "failed" and "refused rank 1's outcome" in outcomes[1].message


@given(key=st.text(max_size=40), text=st.text(max_size=200), flip=st.integers(0, 10**6))
def test_a_seal_opens_only_what_it_sealed_unchanged(key, text, flip):
    seal = Seal(b"k" * 32)
    sealed = seal.seal(key, text)
    assert seal.open(key, sealed) == text.encode()
    changed = bytearray(sealed)
    changed[flip % len(changed)] ^= 1
    with pytest.raises(Forged):
        seal.open(key, bytes(changed))
    with pytest.raises(Forged):
        seal.open(key + "x", sealed)


LISTENS = textwrap.dedent("""
    import os, pytest

    def listening(port):
        found = []
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with open(table) as f:
                for line in f.read().splitlines()[1:]:
                    local, state = line.split()[1], line.split()[3]
                    address, at = local.split(":")
                    if state == "0A" and int(at, 16) == port:  # 0A: LISTEN
                        found.append(address)
        return found

    @pytest.mark.distbench
    def test_the_store_listens_on_loopback_alone(distbench):
        assert listening(int(os.environ["MASTER_PORT"])) == ["0100007F"]  # 127.0.0.1
""")


def test_a_store_rank_0_hosts_at_a_loopback_address_listens_there_alone(pytester, leak_tag):
    """TCPStore's server listens on every interface whatever host it is given; where rank 0
    hosts the launcher's store (srun, mpirun, MASTER_ADDR/MASTER_PORT) at a loopback address,
    no other host can reach it."""
    pytester.makepyfile(LISTENS)
    port = free_port()
    ranks = run_all([(PYTEST + ["--distbench"],
                      {"RANK": str(r), "WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port)}) for r in range(3)], pytester.path, timeout=240)
    assert [r.returncode for r in ranks] == [0, 0, 0], "\n".join(r.output for r in ranks)
    assert "1 passed" in ranks[0].output, ranks[0].output
