"""Unit tests of the built-in collective benchmarks.

Three layers: the byte accounting (pure arithmetic, property-tested), the check values
(simulated worlds in one process, so large world sizes are cheap), and real gloo worlds of 2
and 3 forked ranks that run every collective through ``run_collective`` with a stand-in for the
plugin's ``distbench`` object, including deliberately broken collectives that must be caught.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import pickle
import queue
import time
import traceback
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_distbench.families.collectives import common as harness
from pytest_distbench.families.collectives.members import (
    COLLECTIVES,
    Buffers,
    Collective,
    run_collective,
)

SIZED = [c for c in COLLECTIVES.values() if c.sized]
SPLIT = {"all_gather", "reduce_scatter", "all_to_all"}
CHECK_DTYPES = [
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.int64,
]

# The nccl-tests bus-bandwidth factors, written out independently of the harness.
EXPECTED_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "barrier": lambda n: 1.0,
}


# ----------------------------------------------------------------------------------------------
# Registry
# ----------------------------------------------------------------------------------------------


def test_registry_order_and_names():
    assert list(COLLECTIVES) == [
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "broadcast",
        "reduce",
        "all_to_all",
        "barrier",
    ]
    for name, coll in COLLECTIVES.items():
        assert isinstance(coll, Collective)
        assert coll.name == name
    assert [c.name for c in COLLECTIVES.values() if not c.sized] == ["barrier"]


def test_collectives_pickle_by_reference():
    # Parametrize values are shipped from the controller to the ranks.
    for coll in COLLECTIVES.values():
        assert pickle.loads(pickle.dumps(coll)) == coll


# ----------------------------------------------------------------------------------------------
# Byte accounting
# ----------------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(1, 64),
    nbytes=st.integers(1, 2**30),
    es=st.sampled_from([1, 2, 4, 8]),
)
def test_byte_accounting(n, nbytes, es):
    for coll in SIZED:
        lay = coll.sizes(nbytes, n, es)
        assert lay.in_count >= 1 and lay.out_count >= 1, coll.name
        assert lay.nbytes == lay.count * es, coll.name
        if coll.name in SPLIT:
            # The buffer the size describes splits evenly, at least one element per rank.
            assert lay.count % n == 0 and lay.count >= n, coll.name
            cap = max(nbytes, n * es)
            # Rounding down to a multiple of n elements loses less than n elements.
            assert lay.nbytes > nbytes - n * es, coll.name
        else:
            cap = max(nbytes, es)
            assert lay.nbytes > nbytes - es, coll.name
        assert lay.nbytes <= cap, coll.name

        name = coll.name
        if name in ("all_reduce", "broadcast", "reduce"):
            assert lay.in_count == lay.out_count == lay.count
        elif name == "all_gather":
            # Reported size is the output: n times what each rank contributes.
            assert lay.out_count == lay.count == lay.in_count * n
            assert lay.nbytes == lay.in_count * es * n
        elif name == "reduce_scatter":
            # Reported size is the input; each rank keeps 1/n.
            assert lay.in_count == lay.count == lay.out_count * n
            assert lay.nbytes == lay.out_count * es * n
        elif name == "all_to_all":
            assert lay.in_count == lay.out_count == lay.count
        else:  # pragma: no cover - a new collective must be added here
            raise AssertionError(f"no accounting rule for {name}")


@pytest.mark.parametrize(
    "name, nbytes, n, es, in_count, out_count, reported",
    [
        ("all_gather", 4, 8, 4, 1, 8, 32),  # one float per rank: reported as 32 B, not 4 B
        ("reduce_scatter", 1 << 20, 3, 4, 262143, 87381, 1048572),
        ("all_to_all", 6, 4, 2, 4, 4, 8),
        ("all_reduce", 6, 8, 4, 1, 1, 4),
        ("all_reduce", 1, 2, 8, 1, 1, 8),  # below one element: one element
        ("broadcast", 64 << 20, 8, 4, 16 << 20, 16 << 20, 64 << 20),
    ],
)
def test_byte_accounting_examples(name, nbytes, n, es, in_count, out_count, reported):
    lay = COLLECTIVES[name].sizes(nbytes, n, es)
    assert (lay.in_count, lay.out_count, lay.nbytes) == (in_count, out_count, reported)


def test_bus_bandwidth_factors():
    for n in range(1, 65):
        for name, coll in COLLECTIVES.items():
            assert coll.busbw_factor(n) == pytest.approx(EXPECTED_FACTOR[name](n)), (name, n)
    # A one-rank all_reduce moves nothing over a bus: factor 0 is the honest answer.
    assert COLLECTIVES["all_reduce"].busbw_factor(1) == 0


def test_barrier_reports_no_bytes():
    lay = COLLECTIVES["barrier"].sizes(None, 8, 4)
    assert lay.nbytes is None and lay.count is None
    with pytest.raises(ValueError, match="no bytes"):
        COLLECTIVES["barrier"].sizes(1024, 8, 4)


@pytest.mark.parametrize("bad", [0, -4, True, 1.5, None])
def test_invalid_sizes_rejected(bad):
    for coll in SIZED:
        with pytest.raises(ValueError):
            coll.sizes(bad, 4, 4)


class _NoGroupDistbench:
    """Enough of ``distbench`` to reach argument validation without a process group."""

    rank, world_size, backend = 0, 4, "gloo"
    device, dtype, group = torch.device("cpu"), torch.float32, None

    def measure(self, *args: Any, **kwargs: Any) -> None:  # pragma: no cover - must not run
        raise AssertionError("measure reached with invalid arguments")


def test_run_collective_rejects_mismatched_nbytes():
    with pytest.raises(ValueError):
        run_collective(_NoGroupDistbench(), COLLECTIVES["barrier"], 1024)
    with pytest.raises(ValueError):
        run_collective(_NoGroupDistbench(), COLLECTIVES["all_reduce"])


def test_allocate_is_zeroed_and_in_place_aliases():
    for coll in SIZED:
        lay = coll.sizes(4099, 3, 2)
        b = coll.allocate(
            lay, rank=1, world_size=3, group=None, device=torch.device("cpu"), dtype=torch.float16
        )
        assert b.input.numel() == lay.in_count and b.output.numel() == lay.out_count
        # Zeros survive any number of timed SUMs without growing towards inf.
        assert not b.input.any() and not b.output.any()
        assert (b.output is b.input) == coll.in_place, coll.name


@pytest.mark.parametrize("world_size", [1, 2, 3, 5])
def test_only_an_in_place_call_at_one_rank_moves_no_data(world_size):
    for coll in SIZED:
        reason = coll.moves_no_data(world_size)
        assert (reason is not None) == (coll.in_place and world_size == 1), coll.name
    assert {c.name for c in SIZED if c.moves_no_data(1)} == {"all_reduce", "broadcast", "reduce"}


# ----------------------------------------------------------------------------------------------
# Check values, in simulated worlds
# ----------------------------------------------------------------------------------------------


def test_exact_integer_limits():
    assert harness.exact_integer_limit(torch.float16) == 2048
    assert harness.exact_integer_limit(torch.bfloat16) == 256
    assert harness.exact_integer_limit(torch.float32) == 2**24
    assert harness.exact_integer_limit(torch.float64) == 2**53
    assert harness.exact_integer_limit(torch.int8) == 127
    assert harness.exact_integer_limit(torch.uint8) == 255
    with pytest.raises(TypeError):
        harness.exact_integer_limit(torch.complex64)


@pytest.mark.parametrize("dtype", CHECK_DTYPES, ids=str)
@pytest.mark.parametrize("n", [1, 2, 3, 8, 64, 65, 129, 200, 300])
def test_reduction_partial_sums_stay_exact(dtype, n):
    # Any order a ring or tree may add contributions in must give the exact expected sum.
    positions = torch.arange(3 * n + 5)
    parts = [harness.contribution(r, n, positions, dtype) for r in range(n)]
    want = harness.reduced(n, positions, dtype)
    assert (want > 0).all(), "an expected value equal to the 0 sentinel hides a no-op"
    for order in (parts, parts[::-1], parts[1::2] + parts[::2]):
        acc = order[0].clone()
        for p in order[1:]:
            acc += p
        assert torch.equal(acc, want)
    # The exact integers, computed without the dtype, agree too.
    exact = sum(p.to(torch.int64) for p in parts)
    assert torch.equal(exact, want.to(torch.int64))


@pytest.mark.parametrize("dtype", CHECK_DTYPES, ids=str)
def test_tags_exact_and_never_the_sentinel(dtype):
    major = torch.arange(300).repeat_interleave(300)
    minor = torch.arange(300).repeat(300)
    got = harness.tag(major, minor, dtype).to(torch.int64)
    assert torch.equal(got, 1 + (major * 37 + minor) % 127)


def _simulate(coll: Collective, bufs: list[Buffers]) -> None:
    """What a correct backend leaves in every rank's output, computed in one process."""
    n = len(bufs)
    root = harness.ROOT
    total = bufs[0].input.clone()
    for b in bufs[1:]:
        total += b.input
    outputs: list[torch.Tensor | None]
    if coll.name == "all_reduce":
        outputs = [total] * n
    elif coll.name == "reduce":
        outputs = [total if r == root else None for r in range(n)]
    elif coll.name == "broadcast":
        outputs = [bufs[root].input.clone()] * n
    elif coll.name == "all_gather":
        outputs = [torch.cat([b.input for b in bufs])] * n
    elif coll.name == "reduce_scatter":
        outputs = list(total.chunk(n))
    elif coll.name == "all_to_all":
        outputs = [torch.cat([b.input.chunk(n)[r] for b in bufs]) for r in range(n)]
    else:  # pragma: no cover
        raise AssertionError(coll.name)
    for b, out in zip(bufs, outputs, strict=True):
        if out is not None:
            b.output.copy_(out)


def _simulated_world(coll: Collective, n: int, nbytes: int, dtype: torch.dtype) -> list[Buffers]:
    lay = coll.sizes(nbytes, n, torch.empty((), dtype=dtype).element_size())
    bufs = [
        coll.allocate(
            lay, rank=r, world_size=n, group=None, device=torch.device("cpu"), dtype=dtype
        )
        for r in range(n)
    ]
    for b in bufs:
        coll.prepare(b)
    return bufs


def _wrong(coll: Collective, bufs: list[Buffers]) -> int:
    return sum(coll.count_wrong(b) for b in bufs)


@settings(max_examples=25, deadline=None)  # 0.2 s an example at 70 ranks (issue 40)
@given(
    name=st.sampled_from([c.name for c in SIZED]),
    n=st.integers(1, 70),
    nbytes=st.integers(1, 3000),
    dtype=st.sampled_from([torch.float16, torch.bfloat16, torch.int8, torch.float32]),
)
def test_simulated_collectives_check_clean(name, n, nbytes, dtype):
    coll = COLLECTIVES[name]
    bufs = _simulated_world(coll, n, nbytes, dtype)
    _simulate(coll, bufs)
    assert _wrong(coll, bufs) == 0


@settings(max_examples=15, deadline=None)  # 0.2-0.5 s an example: the suite's time (issue 40)
@given(
    name=st.sampled_from([c.name for c in SIZED]),
    n=st.integers(1, 12),
    nbytes=st.integers(1, 40_000),
    dtype=st.sampled_from([torch.bfloat16, torch.int8, torch.float32, torch.float64]),
    block=st.sampled_from([5, 127, 1 << 20]),
)
def test_tiled_values_equal_direct_evaluation(name, n, nbytes, dtype, block):
    # The harness computes one declared period per segment and tiles it; that is only valid
    # if every collective declares its period and segments truthfully.
    coll = COLLECTIVES[name]
    old_block = harness.CHECK_BLOCK
    harness.CHECK_BLOCK = block
    try:
        bufs = _simulated_world(coll, n, nbytes, dtype)
        _simulate(coll, bufs)
        for b in bufs:
            direct_in = coll.input_at(b, torch.arange(b.input.numel()))
            if direct_in is not None and not coll.in_place:
                assert torch.equal(b.input, direct_in)
            direct_out = coll.output_at(b, torch.arange(b.output.numel()))
            if direct_out is not None:
                assert torch.equal(b.output, direct_out)
            assert coll.count_wrong(b) == 0
    finally:
        harness.CHECK_BLOCK = old_block


@pytest.mark.parametrize("name", [c.name for c in SIZED])
def test_check_values_built_in_blocks(name, monkeypatch):
    # Large buffers are filled and compared block by block; an odd block size must give the
    # same values and catch the same single wrong element as one block.
    coll, n, dtype = COLLECTIVES[name], 3, torch.bfloat16
    whole = _simulated_world(coll, n, 2000, dtype)
    monkeypatch.setattr(harness, "CHECK_BLOCK", 7)
    blocked = _simulated_world(coll, n, 2000, dtype)
    for a, b in zip(whole, blocked, strict=True):
        assert torch.equal(a.input, b.input)
    _simulate(coll, blocked)
    assert _wrong(coll, blocked) == 0
    for b in blocked:
        b.output[-1] += 1
    assert _wrong(coll, blocked) == (1 if name == "reduce" else n)


@pytest.mark.parametrize("name", ["all_gather", "reduce_scatter", "all_to_all"])
def test_check_does_not_trust_a_stale_output(name):
    # In a one-rank world these collectives copy input to output; a second check whose op does
    # nothing must not pass on the correct values the first check left behind.
    coll = COLLECTIVES[name]
    lay = coll.sizes(4096, 1, 4)
    b = coll.allocate(
        lay, rank=0, world_size=1, group=None, device=torch.device("cpu"), dtype=torch.float32
    )

    def copy(buffers: Buffers) -> None:
        buffers.output.copy_(buffers.input)

    assert dataclasses.replace(coll, run=copy).check(b) == 0
    assert dataclasses.replace(coll, run=_noop).check(b) == lay.out_count


@pytest.mark.parametrize("name", ["all_gather", "reduce_scatter", "all_to_all"])
@pytest.mark.parametrize("chunk", [1, 2, 127, 254, 381])
def test_swapped_chunks_are_detected(name, chunk):
    # Chunk sizes that are multiples of the tag cycle (127) are the hard case for a pattern.
    coll, n, dtype = COLLECTIVES[name], 4, torch.bfloat16
    # Every split buffer here is n chunks of ``chunk`` two-byte elements.
    nbytes = chunk * 2 * n
    bufs = _simulated_world(coll, n, nbytes, dtype)
    _simulate(coll, bufs)
    if name == "reduce_scatter":
        # Two ranks keep each other's share.
        a, b = bufs[1].output.clone(), bufs[2].output.clone()
        bufs[1].output.copy_(b)
        bufs[2].output.copy_(a)
    else:
        out = bufs[1].output.view(n, -1)
        out[[0, 1]] = out[[1, 0]].clone()
    assert _wrong(coll, bufs) > 0


# ----------------------------------------------------------------------------------------------
# Real gloo worlds
# ----------------------------------------------------------------------------------------------


class _FakeDistbench:
    """The in-rank ``distbench`` API reduced to: call fn a few times, then call check once."""

    def __init__(self, rank: int, world_size: int, dtype: torch.dtype) -> None:
        self.rank = rank
        self.world_size = world_size
        self.backend = "gloo"
        self.device = torch.device("cpu")
        self.dtype = dtype
        self.group = dist.group.WORLD
        self.record: dict[str, Any] | None = None

    def measure(
        self,
        fn: Callable[[], Any],
        *,
        nbytes: int | None = None,
        count: int | None = None,
        dtype: str | None = None,
        family: str | None = None,
        busbw_factor: float = 1.0,
        check: Callable[[], int] | None = None,
        name: str | None = None,
        moves_no_data: str | None = None,
    ) -> None:
        assert self.record is None, "measure called twice"
        for _ in range(3):
            work = fn()
            if work is not None:
                work.wait()
        dist.barrier()
        wrong = check() if check is not None else None
        self.record = dict(
            nbytes=nbytes,
            count=count,
            dtype=dtype,
            family=family,
            busbw_factor=busbw_factor,
            wrong=wrong,
            moves_no_data=moves_no_data,
        )


def _noop(buffers: Buffers) -> None:
    return None


def _perturbing(coll: Collective) -> Collective:
    """The real op, then one output element off by one: exactly one wrong element per rank."""

    def run(buffers: Buffers) -> None:
        coll.run_once(buffers)
        buffers.output[-1] += 1

    return dataclasses.replace(coll, run=run)


# (case id, collective, nbytes, dtype, kind); kind says what the test expects of it.
Case = tuple[str, Collective, int | None, torch.dtype, str]

WORLD_SIZES = [2, 3]
GOOD_SIZES = [1, 4, 6, 100, 4099, 8192]
GOOD_DTYPES = [
    torch.float32,
    torch.bfloat16,
    torch.int32,
    torch.float16,
    torch.uint8,
    torch.float64,
]


def _cases() -> list[Case]:
    cases: list[Case] = []
    for coll in SIZED:
        for nbytes in GOOD_SIZES:
            for dtype in GOOD_DTYPES:
                cases.append((f"{coll.name}-{nbytes}-{dtype}", coll, nbytes, dtype, "good"))
        for nbytes in (4, 4099):
            for dtype in (torch.float32, torch.bfloat16):
                noop = dataclasses.replace(coll, run=_noop)
                cases.append((f"noop-{coll.name}-{nbytes}-{dtype}", noop, nbytes, dtype, "noop"))
                off = _perturbing(coll)
                cases.append((f"off-{coll.name}-{nbytes}-{dtype}", off, nbytes, dtype, "off"))
    barrier = COLLECTIVES["barrier"]
    cases.append(("barrier", barrier, None, torch.float32, "good"))
    return cases


def _rank_main(rank: int, world_size: int, store_path: str, cases: list[Case], results) -> None:
    try:
        # Small tensors and one thread: nothing here needs the intra-op pool inherited via fork.
        torch.set_num_threads(1)
        store = dist.FileStore(store_path, world_size)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
        out = {}
        for key, coll, nbytes, dtype, _kind in cases:
            fake = _FakeDistbench(rank, world_size, dtype)
            run_collective(fake, coll, nbytes)
            out[key] = fake.record
        results.put((rank, out, None))
    except BaseException:
        results.put((rank, None, traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _run_world(world_size: int, cases: list[Case], store_path: str, timeout: float = 120.0):
    """Fork a gloo world, run ``cases`` in every rank, return {rank: {case id: record}}.

    Every rank process is joined or killed before this returns or raises.
    """
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=_rank_main,
            args=(r, world_size, store_path, cases, results),
            name=f"distbench-unit-rank{r}",
            daemon=True,
        )
        for r in range(world_size)
    ]
    gathered: dict[int, dict[str, Any]] = {}
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout
        while len(gathered) < world_size:
            try:
                rank, out, err = results.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                missing = sorted(set(range(world_size)) - set(gathered))
                pytest.fail(f"{world_size}-rank world: ranks {missing} silent for {timeout}s")
            if err is not None:
                pytest.fail(f"{world_size}-rank world: rank {rank} raised:\n{err}")
            gathered[rank] = out
        for p in procs:
            p.join(timeout=max(1.0, deadline - time.monotonic()))
            assert p.exitcode == 0, f"{p.name} exited with {p.exitcode}"
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(10)
        results.close()
    return gathered


# Its tests on one xdist worker (--dist=loadgroup): each world would start again in the other.
GLOO_WORLD_GROUP = pytest.mark.xdist_group("gloo_world")


@pytest.fixture(scope="module", params=WORLD_SIZES, ids=lambda n: f"ws{n}")
def gloo_world(request, tmp_path_factory):
    n = request.param
    cases = _cases()
    store = tmp_path_factory.mktemp(f"store-ws{n}") / "filestore"
    return n, cases, _run_world(n, cases, str(store))


def _total_wrong(results: dict[int, dict[str, Any]], key: str) -> int:
    return sum(per_rank[key]["wrong"] for per_rank in results.values())


@GLOO_WORLD_GROUP
def test_gloo_checks_pass(gloo_world):
    n, cases, results = gloo_world
    failures = {
        key: _total_wrong(results, key)
        for key, _c, _b, _d, kind in cases
        if kind == "good" and _total_wrong(results, key) != 0
    }
    assert failures == {}


@GLOO_WORLD_GROUP
def test_gloo_broken_collectives_detected(gloo_world):
    n, cases, results = gloo_world
    undetected = []
    for key, coll, _nbytes, _dtype, kind in cases:
        total = _total_wrong(results, key)
        if kind == "noop" and total == 0:
            undetected.append(key)
        if kind == "off":
            # One wrong element on every rank whose output is checked (reduce: the root only).
            checked = 1 if coll.name == "reduce" else n
            if total != checked:
                undetected.append(f"{key}: {total} wrong, wanted {checked}")
    assert undetected == []


@GLOO_WORLD_GROUP
def test_gloo_measure_arguments(gloo_world):
    n, cases, results = gloo_world
    for key, coll, nbytes, dtype, kind in cases:
        if kind != "good":
            continue
        lay = coll.sizes(nbytes, n, torch.empty((), dtype=dtype).element_size())
        for rank, per_rank in results.items():
            rec = per_rank[key]
            assert rec["family"] == coll.name, (key, rank)
            assert rec["nbytes"] == lay.nbytes and rec["count"] == lay.count, (key, rank)
            assert rec["busbw_factor"] == pytest.approx(EXPECTED_FACTOR[coll.name](n)), key
            if coll.sized:
                assert rec["dtype"] == str(dtype).removeprefix("torch."), key
            else:
                assert rec["nbytes"] is None and rec["count"] is None and rec["dtype"] is None
