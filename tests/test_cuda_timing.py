"""CUDA timing (batch, each, graph) and GPU memory, driven without a GPU.

A fake `torch.cuda` runs a virtual stream: every fake collective queues its cost on the
stream's clock, events stamp that clock, a captured graph replays its nodes without the
per-launch gap. So the batch arithmetic, the count/budget/duration loops in batch mode, the
graph path and the skips are checked here exactly; only the figures a real GPU gives are
left for docs/gpu.md.
"""

from __future__ import annotations

import contextlib
import json
import textwrap
import time

import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st
from results_data import ENVIRONMENT, benchmark_record
from tables import unwrapped

from pytest_distbench.harness.ranks import cuda_timing
from pytest_distbench.harness.ranks.measure import Distbench
from pytest_distbench.harness.wire import MeasureSettings
from pytest_distbench.results.comparison.verdict import compare_documents
from pytest_distbench.results.document import make_document
from pytest_distbench.results.document.schema import RecordError, check_record
from pytest_distbench.results.rendering import markdown
from pytest_distbench.results.rendering.table import render_tables, timing_note

MS = 1e-3


class FakeStream:
    def __init__(self, cuda: FakeCuda, name: str) -> None:
        self.cuda = cuda
        self.name = name

    def wait_stream(self, other: FakeStream) -> None:
        self.cuda.log.append(("wait_stream", self.name, other.name))


class FakeEvent:
    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda = cuda
        self.t: float | None = None

    def record(self, stream=None) -> None:
        self.t = self.cuda.queued

    def synchronize(self) -> None:
        self.cuda.event_waits += 1

    def elapsed_time(self, end_event: FakeEvent) -> float:
        assert self.t is not None and end_event.t is not None, "event never recorded"
        return (end_event.t - self.t) * 1e3  # milliseconds, as torch's


class FakeGraph:
    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda = cuda
        self.nodes: list[float] = []

    def replay(self) -> None:
        self.cuda.replays += 1
        self.cuda.queued += sum(self.nodes)  # one launch for every node: no gap between them


class FakeCuda:
    """What measure.py and cuda_timing.py use of torch.cuda, on a virtual clock.

    `launch_gap_s`: device idle time before each eagerly launched call (what a host launch
    costs when the GPU outruns it); a graph replays its nodes without it.
    """

    def __init__(self, launch_gap_s: float = 0.0, *, capturable: bool = True) -> None:
        self.queued = 0.0  # device time at which the stream's queued work ends
        self.gap = launch_gap_s
        self.capturable = capturable
        self.syncs = 0  # device-wide synchronizations (the host waits for everything)
        self.event_waits = 0
        self.replays = 0
        self.calls: list[tuple[str, int, int]] = []  # (stream, syncs, event waits) per call
        self.log: list[tuple[str, ...]] = []
        self.current = FakeStream(self, "default")
        self._capture: list[float] | None = None
        self.allocated = 0
        self.reserved = 0
        self.peak_resets = 0

    # what a fake collective does
    def work(self, cost_s: float) -> None:
        self.calls.append((self.current.name, self.syncs, self.event_waits))
        if self._capture is not None:
            if not self.capturable:
                raise RuntimeError("operation not permitted when stream is capturing")
            self._capture.append(cost_s)
            return
        self.queued += self.gap + cost_s

    # torch.cuda's surface
    def Event(self, enable_timing: bool = False) -> FakeEvent:  # noqa: N802 - torch's name
        assert enable_timing, "a timing event needs enable_timing=True"
        return FakeEvent(self)

    def Stream(self) -> FakeStream:  # noqa: N802 - torch's name
        return FakeStream(self, "side")

    def CUDAGraph(self) -> FakeGraph:  # noqa: N802 - torch's name
        return FakeGraph(self)

    def current_stream(self) -> FakeStream:
        return self.current

    @contextlib.contextmanager
    def stream(self, stream: FakeStream):
        previous, self.current = self.current, stream
        try:
            yield
        finally:
            self.current = previous

    @contextlib.contextmanager
    def graph(self, graph: FakeGraph):
        previous, self.current = self.current, FakeStream(self, "capture")
        self._capture = []
        try:
            yield
        finally:
            graph.nodes, self._capture = self._capture, None
            self.current = previous

    def synchronize(self, device=None) -> None:
        self.syncs += 1

    def reset_peak_memory_stats(self, device=None) -> None:
        self.peak_resets += 1

    def max_memory_allocated(self, device=None) -> int:
        return self.allocated

    def max_memory_reserved(self, device=None) -> int:
        return self.reserved


class Untouchable:
    """A torch.cuda a CPU world must never reach."""

    def __getattr__(self, name: str):
        raise AssertionError(f"a CPU measurement used torch.cuda.{name}")


# -- the batch itself -------------------------------------------------------------------------


def test_a_batch_of_8_calls_of_1_ms_is_1_ms_per_iteration_with_one_wait():
    cuda = FakeCuda()
    timer = cuda_timing.BatchTimer(cuda_timing.eager_batch(lambda: cuda.work(MS), 8), 8, cuda)
    assert timer() == pytest.approx(MS)
    assert timer() == pytest.approx(MS)  # the events are reused batch after batch
    assert cuda.event_waits == 2 and cuda.syncs == 0
    # No host synchronization inside a batch: every call of a batch saw the same count.
    first, second = cuda.calls[:8], cuda.calls[8:]
    assert len({waits for _, _, waits in first}) == 1
    assert len({waits for _, _, waits in second}) == 1


@settings(max_examples=60, deadline=None)
@given(costs=st.lists(st.floats(1e-7, 1e-2), min_size=1, max_size=40),
       gap=st.floats(0, 1e-5))
def test_per_iteration_is_the_batch_time_over_its_iterations(costs, gap):
    cuda = FakeCuda(gap)
    pending = iter(costs)
    timer = cuda_timing.BatchTimer(
        cuda_timing.eager_batch(lambda: cuda.work(next(pending)), len(costs)), len(costs), cuda)
    assert timer() == pytest.approx((sum(costs) + gap * len(costs)) / len(costs), rel=1e-9)


def test_a_batch_needs_an_iteration():
    with pytest.raises(ValueError, match="at least one iteration"):
        cuda_timing.BatchTimer(lambda: None, 0, FakeCuda())


@settings(max_examples=100, deadline=None)
@given(per_call=st.floats(1e-9, 10.0))
def test_auto_batch_lasts_about_the_target_within_bounds(per_call):
    batch = cuda_timing.batch_size(None, per_call)
    assert cuda_timing.MIN_BATCH <= batch <= cuda_timing.MAX_BATCH
    if cuda_timing.MIN_BATCH < batch < cuda_timing.MAX_BATCH:
        assert batch * per_call >= cuda_timing.BATCH_TARGET_S
        assert (batch - 1) * per_call < cuda_timing.BATCH_TARGET_S


def test_a_requested_batch_size_is_kept():
    assert cuda_timing.batch_size(7, 1.0) == 7
    assert cuda_timing.batch_size(5000, 1e-9) == 5000


def test_an_async_work_is_waited_on_inside_the_batch():
    waited = []

    class Work:
        def wait(self) -> None:
            waited.append(True)

    cuda_timing.eager_batch(cuda_timing.call_of(Work), 3)()
    assert waited == [True, True, True]


@pytest.mark.parametrize(("device", "timing", "graph", "label"), [
    ("cpu", "batch", False, "host-each"),
    ("cpu", "each", False, "host-each"),
    ("cpu", "batch", True, "host-each"),
    ("cuda", "each", False, "cuda-each"),
    ("cuda", "batch", False, "cuda-batch"),
    ("cuda", "batch", True, "cuda-graph"),
])
def test_timing_labels(device, timing, graph, label):
    assert cuda_timing.timing_label(device, timing, graph) == label


# -- graphs -----------------------------------------------------------------------------------


def test_graph_capture_warms_up_on_a_side_stream_and_replays_without_launch_gaps():
    cuda = FakeCuda(launch_gap_s=3 * MS)
    replay = cuda_timing.capture_batch(lambda: cuda.work(MS), 8, cuda)
    streams = [stream for stream, _, _ in cuda.calls]
    assert streams == ["side"] * cuda_timing.GRAPH_WARMUP + ["capture"] * 8
    assert ("wait_stream", "side", "default") in cuda.log  # the side stream waits first
    assert ("wait_stream", "default", "side") in cuda.log  # and the stream after it
    timer = cuda_timing.BatchTimer(replay, 8, cuda)
    assert timer() == pytest.approx(MS)  # 1 ms of work, no 3 ms gaps: one launch in all
    eager = cuda_timing.BatchTimer(cuda_timing.eager_batch(lambda: cuda.work(MS), 8), 8, cuda)
    assert eager() == pytest.approx(4 * MS)


def test_a_call_that_cannot_be_captured_says_why():
    cuda = FakeCuda(capturable=False)
    with pytest.raises(cuda_timing.CaptureError,
                       match="cannot be captured in a CUDA graph .RuntimeError: operation not "
                             "permitted when stream is capturing"):
        cuda_timing.capture_batch(lambda: cuda.work(MS), 4, cuda)


def test_graphs_on_a_cpu_world_name_the_reason():
    reason = cuda_timing.graph_unsupported("cpu", "gloo")
    assert reason is not None and "backend gloo runs on the CPU" in reason
    assert "--distbench-cuda-graph" in reason
    assert cuda_timing.graph_unsupported("cuda", "nccl") is None


# -- the measure loop in batch mode (a one-rank gloo control group, a fake device) ------------


@pytest.fixture
def control(one_rank_group):
    return one_rank_group


def bench(control, cuda, *, device="cuda", backend="nccl", **overrides) -> Distbench:
    values = dict(warmup=2, iterations=None, min_iterations=1, max_iterations=10_000,
                  budget_s=1.0, dtype="float32")
    values.update(overrides)
    return Distbench(rank=0, world_size=1, backend=backend, device=torch.device(device),
                     group=control, control_group=control, settings=MeasureSettings(**values),
                     cuda=cuda)


def test_count_mode_takes_that_many_batches(control):
    cuda = FakeCuda()
    b = bench(control, cuda, iterations=5, cuda_batch=8)
    b.measure(lambda: cuda.work(MS), nbytes=4)
    m = b.measurements[0]
    assert m.timing == "cuda-batch" and m.batch_iterations == 8
    assert m.samples == pytest.approx([MS] * 5)
    # warm-up, three probe batches, then the five timed batches
    assert len(cuda.calls) == 2 + 3 * cuda_timing.PROBE_BATCH + 5 * 8
    timed = cuda.calls[-40:]
    for start in range(0, 40, 8):  # no host wait inside any timed batch
        assert len({(syncs, waits) for _, syncs, waits in timed[start:start + 8]}) == 1


def test_budget_mode_plans_batches_from_the_probe(control):
    cuda = FakeCuda()
    b = bench(control, cuda, budget_s=0.2)  # auto batch: 1 ms calls -> MIN_BATCH per batch
    b.measure(lambda: cuda.work(MS), nbytes=4)
    m = b.measurements[0]
    assert m.batch_iterations == cuda_timing.MIN_BATCH
    assert len(m.samples) == 10  # 0.2 s / (20 x 1 ms)
    assert m.samples == pytest.approx([MS] * 10)


def test_budget_mode_respects_the_iteration_bounds_in_batches(control):
    cuda = FakeCuda()
    b = bench(control, cuda, budget_s=10.0, max_iterations=7, cuda_batch=4)
    b.measure(lambda: cuda.work(MS), nbytes=4)
    assert len(b.measurements[0].samples) == 7


def test_duration_mode_stops_in_batch_mode(control):
    cuda = FakeCuda()

    def call() -> None:
        cuda.work(MS)
        time.sleep(0.0002)  # the duration loop runs on the host clock: let time pass

    b = bench(control, cuda, duration_s=0.3, cuda_batch=10)
    began = time.perf_counter()
    b.measure(call, nbytes=4)
    elapsed = time.perf_counter() - began
    m = b.measurements[0]
    assert m.batch_iterations == 10 and m.duration_s == 0.3
    assert 0.3 <= elapsed < 3.0
    assert len(m.samples) >= 5 and m.samples == pytest.approx([MS] * len(m.samples))


def test_each_mode_synchronizes_after_every_call(control):
    cuda = FakeCuda()
    b = bench(control, cuda, iterations=6, cuda_timing="each")
    b.measure(lambda: cuda.work(MS), nbytes=4)
    m = b.measurements[0]
    assert m.timing == "cuda-each" and m.batch_iterations is None
    assert len(m.samples) == 6
    # one drain per warm-up and timed call, one before the barrier
    assert cuda.syncs == 2 + 6 + 1 and cuda.event_waits == 0


def test_graph_mode_replays_the_captured_batch(control):
    cuda = FakeCuda(launch_gap_s=2 * MS)
    b = bench(control, cuda, iterations=4, cuda_batch=5, cuda_graph=True)
    b.measure(lambda: cuda.work(MS), nbytes=4)
    m = b.measurements[0]
    assert m.timing == "cuda-graph" and m.batch_iterations == 5
    assert m.samples == pytest.approx([MS] * 4)  # the eager batch would be 3 ms per call
    assert cuda.replays == 2 + 4  # two planning replays, then the timed ones


def test_a_call_no_graph_can_hold_skips_the_measurement_with_the_reason(control):
    cuda = FakeCuda(capturable=False)
    b = bench(control, cuda, iterations=4, cuda_graph=True)
    with pytest.raises(pytest.skip.Exception, match="cannot be captured in a CUDA graph"):
        b.measure(lambda: cuda.work(MS), nbytes=4)


def test_graphs_in_a_cpu_world_skip_before_anything_runs(control):
    calls = []
    b = bench(control, Untouchable(), device="cpu", backend="gloo", iterations=4,
              cuda_graph=True)
    with pytest.raises(pytest.skip.Exception, match="backend gloo runs on the CPU"):
        b.measure(lambda: calls.append(1))
    assert calls == []


def test_gpu_memory_peaks_per_measurement_and_reset_between(control):
    cuda = FakeCuda()
    b = bench(control, cuda, iterations=2, cuda_batch=2)
    resets = cuda.peak_resets
    assert resets >= 1  # a test's peak starts with the test
    cuda.allocated, cuda.reserved = 3 << 20, 8 << 20
    b.measure(lambda: cuda.work(MS), nbytes=4, name="a")
    b.record([1.0], name="b")
    first, second = b.measurements
    assert (first.peak_gpu_allocated_bytes, first.peak_gpu_reserved_bytes) == (3 << 20, 8 << 20)
    assert second.timing == "test"
    assert cuda.peak_resets >= resets + 2  # at the measurement's start and after each one


def test_a_cpu_world_is_timed_as_before_and_never_touches_cuda(control):
    calls = []
    b = bench(control, Untouchable(), device="cpu", backend="gloo", iterations=7,
              cuda_timing="batch", cuda_batch=16)
    b.measure(lambda: calls.append(1), nbytes=4)
    m = b.measurements[0]
    assert len(calls) == 2 + 7  # warm-up and the timed calls: no probe, no batches
    assert len(m.samples) == 7
    assert m.timing == "host-each" and m.batch_iterations is None
    assert m.peak_gpu_allocated_bytes is None and m.peak_gpu_reserved_bytes is None


# -- records, schema, tables ------------------------------------------------------------------


def cuda_record(size: int, timing: str, batch: int | None) -> dict:
    record = benchmark_record(size, [1e-5, 2e-5, 3e-5])
    record.update(backend="nccl", device="cuda", timing=timing, batch_iterations=batch,
                  peak_gpu_allocated_bytes=[5 << 20, 6 << 20],
                  peak_gpu_reserved_bytes=[20 << 20, 22 << 20], peak_rss_bytes=[1 << 30] * 2)
    return record


@pytest.mark.parametrize(("field", "value"), [
    ("timing", 3),
    ("timing", ""),
    ("batch_iterations", 0),
    ("batch_iterations", 2.5),
    ("peak_gpu_allocated_bytes", [1]),
    ("peak_gpu_reserved_bytes", [1, -1]),
])
def test_schema_names_a_bad_timing_or_gpu_field(field, value):
    record = cuda_record(4, "cuda-batch", 20)
    check_record(record)
    record[field] = value
    with pytest.raises(RecordError, match=field):
        check_record(record)


def test_titles_say_the_timing_when_it_is_not_the_host_clock():
    batch = unwrapped(render_tables([cuda_record(4, "cuda-batch", 20),
                                     cuda_record(1024, "cuda-batch", 40)]))
    assert "timing=cuda-batch: CUDA events around 20-40 back-to-back iterations" in batch
    graph = unwrapped(render_tables([cuda_record(4, "cuda-graph", 100)]))
    assert "timing=cuda-graph: CUDA events around a graph replay of 100 iterations" in graph
    each = unwrapped(render_tables([cuda_record(4, "cuda-each", None)]))
    assert "timing=cuda-each: host clock, device synchronized after every call" in each
    cpu = benchmark_record(4, [1e-5])
    assert timing_note([cpu]) is None and timing_note([dict(cpu, timing="host-each")]) is None
    assert "timing" not in render_tables([cpu])
    md = markdown.render([cuda_record(4, "cuda-batch", 20)])
    assert "timing=cuda-batch" in md


def test_gpu_memory_columns_only_when_asked():
    records = [cuda_record(4, "cuda-batch", 20)]
    plain = render_tables(records)
    assert "GPU peak" not in plain and "peak RSS" not in plain
    shown = render_tables(records, memory=True)
    assert "GPU peak alloc/rank (MiB)" in shown and "GPU peak reserved/rank (MiB)" in shown
    assert "peak RSS/rank (MiB)" in shown  # beside the host memory
    assert "5/6" in shown and "20/22" in shown
    cpu = render_tables([benchmark_record(4, [1e-5])], memory=True)
    assert "GPU peak alloc/rank (MiB)" in cpu  # a CPU row shows "-" in the GPU columns


# -- options and a real CPU world -------------------------------------------------------------

BENCH = """
import pytest, torch, torch.distributed as dist

@pytest.mark.distbench
def test_sum(distbench):
    x = torch.zeros(4)
    distbench.measure(lambda: dist.all_reduce(x), nbytes=16)
"""


@pytest.mark.parametrize(("args", "message"), [
    (["--distbench-cuda-timing=fast"],
     "--distbench-cuda-timing: invalid CUDA timing 'fast': expected batch or each"),
    (["--distbench-cuda-batch=0"], "--distbench-cuda-batch: *"),
    (["--distbench-cuda-graph", "--distbench-cuda-timing=each"],
     "--distbench-cuda-graph replays a captured batch: it needs --distbench-cuda-timing=batch*"),
])
def test_bad_cuda_option_is_a_usage_error_naming_it(pytester, args, message):
    pytester.makepyfile(BENCH)
    result = pytester.runpytest_subprocess("--distbench", *args, timeout=120)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


def test_cuda_options_on_a_cpu_world(pytester, distbench_run):
    """Batch timing is a no-op on CPU (the records say host-each); graphs skip, saying why."""
    out = pytester.path / "out.json"
    pytester.makepyfile(textwrap.dedent("""
        import pytest, torch, torch.distributed as dist

        @pytest.mark.distbench(iterations=6, warmup=1)
        def test_host(distbench):
            x = torch.zeros(4)
            distbench.measure(lambda: dist.all_reduce(x), nbytes=16)

        @pytest.mark.distbench(cuda_graph=True)
        def test_graph(distbench):
            x = torch.zeros(4)
            distbench.measure(lambda: dist.all_reduce(x), nbytes=16)
    """))
    result = distbench_run("--distbench", "--world-size=2", "--backend=gloo", "-rs",
                           "--distbench-cuda-timing=batch", "--distbench-cuda-batch=50",
                           "--distbench-gpu-memory", f"--distbench-json={out}")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*--distbench-cuda-graph: backend gloo runs on the CPU, and a "
                                 "CUDA graph captures GPU work only*"])
    [record] = [b["distbench"] for b in json.loads(out.read_text())["benchmarks"]]
    assert record["timing"] == "host-each" and record["batch_iterations"] is None
    assert record["iterations"] == 6 and len(record["samples"]) == 6
    assert record["peak_gpu_allocated_bytes"] is None
    assert record["peak_gpu_reserved_bytes"] is None
    assert len(record["peak_rss_bytes"]) == 2
    text = result.stdout.str()
    assert "GPU peak alloc/rank (MiB)" in text and "timing=" not in text


def test_a_comparison_across_timings_says_so():
    # An old CUDA baseline (no timing field: synchronized per call) against batch timing is
    # flagged; CPU records from before the field, and samples a test timed itself, are not.
    old_cuda = dict(cuda_record(4, "cuda-batch", 20), timing=None)
    old_cpu = dict(benchmark_record(8, [1e-5, 2e-5]), id="cpu")
    own = dict(cuda_record(16, "test", None), id="own")
    baseline = make_document([old_cuda, old_cpu, dict(own, timing=None)], ENVIRONMENT, [])
    current = make_document([cuda_record(4, "cuda-batch", 20), dict(old_cpu, timing="host-each"),
                             own], ENVIRONMENT, [])
    lines = [line for line in compare_documents(baseline, current, threshold=0.1)
             .fingerprint_differences if line.startswith("timing")]
    assert lines == ["timing: cuda-each (baseline) vs cuda-batch (current) for 1 benchmark(s); "
                     "the two measure different things (docs/gpu.md)"]
    assert not [line for line in compare_documents(current, current, threshold=0.1)
                .fingerprint_differences if line.startswith("timing")]


def _agreeing_rank(rank: int, store_path: str, results) -> None:
    try:
        torch.set_num_threads(1)
        dist.init_process_group("gloo", store=dist.FileStore(store_path, 2), rank=rank,
                                world_size=2)
        cuda = FakeCuda()
        settings = MeasureSettings(warmup=1, iterations=None, min_iterations=1,
                                   max_iterations=10_000, budget_s=0.4, dtype="float32")
        b = Distbench(rank=rank, world_size=2, backend="nccl", device=torch.device("cuda"),
                      group=dist.group.WORLD, control_group=dist.group.WORLD,
                      settings=settings, cuda=cuda)
        cost = 10e-6 if rank == 0 else 50e-6  # rank 1 is five times slower per call
        b.measure(lambda: cuda.work(cost), nbytes=4)
        m = b.measurements[0]
        results.put((rank, (m.batch_iterations, len(m.samples)), None))
    except BaseException:  # noqa: BLE001 - handed to the test, which fails with it
        import traceback

        results.put((rank, None, traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_ranks_agree_on_the_batch_size_and_count_from_the_slowest(tmp_path):
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    procs = [ctx.Process(target=_agreeing_rank, args=(r, str(tmp_path / "store"), results),
                         daemon=True) for r in range(2)]
    try:
        for p in procs:
            p.start()
        got = {}
        for _ in procs:
            rank, out, err = results.get(timeout=120)
            assert err is None, f"rank {rank} raised:\n{err}"
            got[rank] = out
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join(10)
    # 2 ms / 50 us = 40 calls per batch (rank 0 alone would ask for 200), and 0.4 s / (40 x
    # 50 us) = 200 batches, in both ranks.
    assert got == {0: (40, 200), 1: (40, 200)}


# -- the GPU's copy rate: measured when a CUDA world starts, the bound of its figures --------


@settings(max_examples=40, deadline=None)
@given(rate_gbps=st.floats(10.0, 5000.0), nbytes=st.integers(1 << 20, 1 << 30))
def test_the_device_probe_times_back_to_back_copies_between_events(rate_gbps, nbytes):
    from pytest_distbench.harness.ranks import device_probe

    cuda = FakeCuda(launch_gap_s=5e-6)  # a graph replays its copies without the gap
    got = device_probe.copy_rate_gbps(lambda: cuda.work(nbytes / rate_gbps / 1e9), nbytes, cuda)
    assert got == pytest.approx(rate_gbps, rel=1e-9)
    assert cuda.replays == device_probe.BATCHES and cuda.event_waits == device_probe.BATCHES
    streams = [stream for stream, _, _ in cuda.calls]  # warmed up aside, then captured once
    assert streams == (["side"] * cuda_timing.GRAPH_WARMUP
                       + ["capture"] * device_probe.COPIES)


@pytest.fixture
def device_bounds(monkeypatch):
    from pytest_distbench.harness.environment import physical

    monkeypatch.setattr(physical, "_device_copies", [])
    monkeypatch.setattr(physical, "_best", [physical.MachineBounds(copy_gbps=1.0,
                                                                   round_trip_s=1e-5)])
    return physical


def test_a_cuda_world_s_probe_fails_its_impossible_figure_and_goes_to_the_file(device_bounds):
    """The ranks' device_copy_gbps, noted when their world starts, is what the controller holds
    that world's records to (fail, never print) and what the results file's environment says."""
    from pytest_distbench.harness.controller import records
    from pytest_distbench.harness.controller.session import Session

    cuda = FakeCuda()
    from pytest_distbench.harness.ranks import device_probe

    rate = device_probe.copy_rate_gbps(lambda: cuda.work(1e9 / 2000e9), 10**9, cuda)
    Session().add_rank_infos([{"gpu": "NVIDIA H200", "device_copy_gbps": rate},
                              {"gpu": "NVIDIA H200", "device_copy_gbps": None}])
    fine = dict(cuda_record(1 << 30, "cuda-batch", 20), algbw_gbps=2095.0, busbw_gbps=0.0)
    impossible = dict(cuda_record(1 << 30, "cuda-graph", 20), id="graph", name="graph",
                      algbw_gbps=5_099_682.0, busbw_gbps=0.0)
    invalid = [records.violations(fine), records.violations(impossible)]
    text = records.invalid_text([fine, impossible], invalid)
    assert invalid[0] == ()
    assert list(invalid[1]) == [
        "bandwidth within the GPU's memory: algorithm bandwidth 5.1e+06 GB/s is above twice "
        "this GPU's measured copy rate (2000 GB/s: a copy reads and writes each byte, so its "
        "memory moved 4000 GB/s)"]
    assert text.startswith("a figure that is physically impossible is not printed")
    assert device_bounds.measured_bounds().as_dict()["device_copy_gbps"] == pytest.approx(2000)
    assert "5,099,682" not in render_tables([fine, dict(impossible, invalid=list(invalid[1]))])
