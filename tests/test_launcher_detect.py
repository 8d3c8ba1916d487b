"""Reading the launcher's environment (torchrun, SLURM, Open MPI, MPICH): pure logic."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_distbench.harness.failures import describe_problems
from pytest_distbench.harness.launcher.agreement import first_difference
from pytest_distbench.harness.launcher.detect import (
    DEFAULT_PORT,
    MAX_WORLD_SIZE,
    SLURM_PORT_BASE,
    SLURM_PORT_SPAN,
    LaunchError,
    detect,
    expand_hostlist,
)
from pytest_distbench.harness.launcher.rank0 import run_result
from pytest_distbench.harness.launcher.wire import Outcome

TORCHRUN = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "node0", "MASTER_PORT": "29400", "TORCHELASTIC_RUN_ID": "abc",
            "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": "1"}


def test_no_launcher_is_local_mode():
    assert detect({"PATH": "/bin", "HOME": "/root"}) is None


def test_torchrun():
    launch = detect(TORCHRUN)
    assert (launch.launcher, launch.rank, launch.world_size, launch.local_rank) == (
        "torchrun", 3, 8, 1)
    assert (launch.master_addr, launch.master_port, launch.agent_store) == ("node0", 29400, True)
    assert launch.run_id == "abc.1"  # a restarted torchrun job does not reuse old keys


def test_plain_rank_variables_without_torchrun():
    env = {k: v for k, v in TORCHRUN.items() if not k.startswith("TORCHELASTIC")}
    launch = detect(env)
    assert launch.launcher == "env" and not launch.agent_store  # rank 0 hosts the store


def test_slurm_master_is_first_host_of_the_step():
    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "16", "SLURM_LOCALID": "5",
           "SLURM_STEP_NODELIST": "gpu[07-08],login1", "SLURM_JOB_ID": "1234"}
    launch = detect(env)
    assert (launch.launcher, launch.rank, launch.world_size, launch.local_rank) == (
        "slurm", 5, 16, 5)
    assert launch.master_addr == "gpu07"
    assert launch.master_port == SLURM_PORT_BASE + 1234  # per job: two jobs on a node differ
    assert detect({**env, "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "4000"}).master_addr == (
        "10.0.0.1")


def test_open_mpi_and_mpich_on_one_host_use_loopback():
    ompi = detect({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "4",
                   "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"})
    assert (ompi.launcher, ompi.rank, ompi.world_size, ompi.master_addr, ompi.master_port) == (
        "openmpi", 1, 4, "127.0.0.1", DEFAULT_PORT)
    mpich = detect({"PMI_RANK": "2", "PMI_SIZE": "3", "MPI_LOCALRANKID": "2",
                    "MPI_LOCALNRANKS": "3", "MASTER_PORT": "5000"})
    assert (mpich.launcher, mpich.rank, mpich.world_size, mpich.master_port) == (
        "mpich", 2, 3, 5000)


def test_mpi_inside_a_slurm_allocation_is_mpi():
    # mpirun in a batch script: every process inherits the batch step's SLURM_PROCID=0.
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_NODELIST": "a1",
           "OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}
    assert (detect(env).launcher, detect(env).rank) == ("openmpi", 2)


@pytest.mark.parametrize("env, message", [
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "1"}, "MASTER_ADDR is not"),
    ({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1"},
     "RANK=2 is not below WORLD_SIZE=2"),
    ({"RANK": "x", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1"},
     "RANK='x' is not an integer"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "70000"},
     "MASTER_PORT=70000 is not a TCP port"),
    ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4",
      "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, "set MASTER_ADDR"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}, "SLURM_STEP_NODELIST"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_NODELIST": "n[3-1]"}, "runs backwards"),
])
def test_garbled_environment_names_the_variable(env, message):
    with pytest.raises(LaunchError, match=message.replace("[", r"\[")):
        detect(env)


@pytest.mark.parametrize("text, hosts", [
    ("node1", ["node1"]),
    ("node[1-3]", ["node1", "node2", "node3"]),
    ("gpu[08-10],cpu5", ["gpu08", "gpu09", "gpu10", "cpu5"]),
    ("a[1,3-4]b", ["a1b", "a3b", "a4b"]),
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
])
def test_expand_hostlist_examples(text, hosts):
    assert expand_hostlist(text) == hosts


names = st.text(alphabet="abcdefgh-", min_size=1, max_size=6)


@given(prefix=names, start=st.integers(0, 500), span=st.integers(0, 20),
       width=st.integers(1, 4), rest=st.lists(names, max_size=3))
def test_expand_hostlist_ranges_keep_padding_and_order(prefix, start, span, width, rest):
    low, high = str(start).zfill(width), str(start + span).zfill(width)
    text = ",".join([f"{prefix}[{low}-{high}]"] + rest)
    hosts = expand_hostlist(text)
    assert hosts[0] == prefix + low  # the master is the first host
    assert len(hosts) == span + 1 + len(rest)
    assert [int(h[len(prefix):]) for h in hosts[:span + 1]] == list(range(start, start + span + 1))
    assert all(len(h) - len(prefix) >= width for h in hosts[:span + 1])
    assert hosts[span + 1:] == rest


@given(ids=st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=20, unique=True),
       cut=st.integers(0, 19))
def test_first_difference_names_the_first_item_that_differs(ids, cut):
    cut = min(cut, len(ids) - 1)
    changed = ids[:cut] + ["<other>"] + ids[cut + 1:]
    assert first_difference(ids, changed, 3) == (
        f"item {cut}: rank 0 has {ids[cut]!r}, rank 3 has '<other>'")
    shorter = ids[:cut]
    assert f"the first missing on rank 1 is {ids[cut]!r}" in first_difference(ids, shorter, 1)


def test_failures_are_tagged_and_the_first_comes_first():
    posted = {
        0: Outcome("failed", "RuntimeError: Connection closed by peer", [], "", order=2),
        1: Outcome("failed", "ValueError: boom", [], "", order=1, released=True),
        2: Outcome("passed", "", [], ""),
    }
    text = describe_problems(run_result(posted), 60.0)
    # pytest's short summary shows the first line: the first failing rank's error.
    assert text.startswith("rank 1: ValueError: boom\n")
    assert text.index("rank 1 raised:\n[rank 1] ValueError: boom") < text.index(
        "rank 0 failed after rank 1 did")
    assert "[rank 0] RuntimeError: Connection closed by peer" in text
    assert "ranks [1] closed their process group" in text


# -- absurd values (issue 19, item 10) ---------------------------------------------------------

BASE = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "node0", "MASTER_PORT": "29400"}
SLURM = {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_NODELIST": "n1"}


@pytest.mark.parametrize("env, message", [
    ({**BASE, "WORLD_SIZE": str(10**30)}, f"WORLD_SIZE=1{'0' * 30} is above {MAX_WORLD_SIZE}"),
    ({**BASE, "WORLD_SIZE": "3000000"}, f"WORLD_SIZE=3000000 is above {MAX_WORLD_SIZE}"),
    ({**BASE, "WORLD_SIZE": "9" * 5000}, "WORLD_SIZE='999"),
    ({**BASE, "RANK": "1_0", "WORLD_SIZE": "20"}, "RANK='1_0' is not an integer"),
    ({**BASE, "RANK": "\u0661"}, "RANK='\u0661' is not an integer"),  # Arabic-Indic one
    ({**BASE, "WORLD_SIZE": "\uff12"}, "WORLD_SIZE='\uff12' is not an integer"),  # fullwidth 2
    ({**BASE, "LOCAL_RANK": "+1"}, "LOCAL_RANK='\\+1' is not an integer"),
    ({**BASE, "MASTER_PORT": "2_9400"}, "MASTER_PORT='2_9400' is not an integer"),
    ({**BASE, "MASTER_ADDR": ""}, "MASTER_ADDR is empty"),
    ({**BASE, "MASTER_ADDR": "  "}, "MASTER_ADDR is empty"),
    ({**BASE, "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"},
     "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"),
    ({**SLURM, "SLURM_JOB_ID": "\u00b2"}, "SLURM_JOB_ID='\u00b2' is not an integer"),
    ({**SLURM, "SLURM_JOB_ID": "12a"}, "SLURM_JOB_ID='12a' is not an integer"),
    ({**SLURM, "MASTER_ADDR": ""}, "MASTER_ADDR is empty"),
    ({**SLURM, "SLURM_NODELIST": "n[\u0661-\u0663]"}, "bad range"),
    ({**SLURM, "SLURM_NODELIST": "n[1-" + "9" * 5000 + "]"}, "bad range"),
    ({**SLURM, "SLURM_NODELIST": "n[1-999999999]"}, "more than"),
    ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4", "MASTER_ADDR": ""},
     "MASTER_ADDR is empty"),
])
def test_absurd_values_name_the_variable(env, message):
    with pytest.raises(LaunchError, match=message):
        detect(env)


def test_leading_and_trailing_blanks_and_zeros_still_read():
    launch = detect({**BASE, "RANK": " 01 ", "WORLD_SIZE": "0002\n"})
    assert (launch.rank, launch.world_size) == (1, 2)
    assert detect({**SLURM, "SLURM_JOB_ID": "41"}).master_port == SLURM_PORT_BASE + 41


VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_PORT",
             "MASTER_ADDR")
# Digits of every script, signs, underscores, blanks and exponents: what int() and
# str.isdigit() accept that a launcher never writes.
texts = st.one_of(st.text(max_size=12), st.text(alphabet="0123456789_+- \u00b2\u0661\uff12e",
                                                max_size=12), st.integers(-10, 10**40).map(str))


def _bounded(launch) -> bool:
    return (0 <= launch.rank < launch.world_size <= MAX_WORLD_SIZE
            and 0 <= launch.local_rank < MAX_WORLD_SIZE
            and (launch.local_world_size is None
                 or launch.local_rank < launch.local_world_size <= MAX_WORLD_SIZE)
            and 1 <= launch.master_port <= 65535 and launch.master_addr.strip() != "")


@given(name=st.sampled_from(VARIABLES), text=texts)
def test_any_torchrun_variable_reads_bounded_or_raises_launch_error(name, text):
    env = {**BASE, "WORLD_SIZE": "65536", name: text}
    try:
        launch = detect(env)
    except LaunchError:
        return
    assert _bounded(launch)


@given(name=st.sampled_from(("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_JOB_ID",
                             "SLURM_NODELIST")), text=texts)
def test_any_slurm_variable_reads_bounded_or_raises_launch_error(name, text):
    try:
        launch = detect({**SLURM, name: text})
    except LaunchError:
        return
    assert _bounded(launch)
    assert SLURM_PORT_BASE <= launch.master_port < SLURM_PORT_BASE + SLURM_PORT_SPAN


@pytest.mark.parametrize("nodelist, message", [
    (" , ", "names no host"),
    ("r[1-9999]n[1-9999]", "more than"),
])
def test_host_lists_that_name_no_host_or_too_many(nodelist, message):
    with pytest.raises(LaunchError, match=message):
        detect({**SLURM, "SLURM_NODELIST": nodelist})
