"""CUDA timing as nccl-tests does it: back-to-back launches between two CUDA events.

A host clock around one CUDA call has to synchronize the device to see the work end, so every
iteration pays a launch and a full synchronization; for small messages that is several times
the collective itself. nccl-tests instead launches its iterations back to back on the stream,
records an event before and after, and divides the elapsed time by the count (optionally with
the batch captured in a CUDA graph, -G). This module does the same, per *batch*: one batch is
one sample of per-iteration time, and the harness's count, budget and duration loops
(measure.py) repeat batches exactly as they repeat single calls on the CPU.

Everything CUDA is reached through a `cuda` object (by default `torch.cuda`), so the tests
drive the batch logic with a fake stream, fake events and a fake clock on a machine without
a GPU (tests/test_cuda_timing.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from itertools import repeat
from typing import Any, Protocol

TIMINGS = ("batch", "each")

# Timing labels a record carries (record["timing"], docs/results-schema.md).
HOST_EACH = "host-each"  # CPU worlds: host clock around every call, as always
CUDA_EACH = "cuda-each"  # host clock, device synchronized after every call
CUDA_BATCH = "cuda-batch"  # CUDA events around back-to-back iterations
CUDA_GRAPH = "cuda-graph"  # the same batch captured once in a CUDA graph, then replayed
TEST_TIMED = "test"  # distbench.record(): the test timed its samples itself

# Automatic batch size: enough back-to-back calls that a batch lasts about this long, so the
# two events and the synchronization after the batch are a small share of it...
BATCH_TARGET_S = 0.002
# ...and at least nccl-tests' default -n (20), at most this many (a graph of many thousand
# nodes is slow to capture, and a 4-byte all_reduce would otherwise ask for ~1000s).
MIN_BATCH = 20
MAX_BATCH = 1000
# Calls in the batch that measures the per-call time used to size the real batches.
PROBE_BATCH = 10
# Side-stream warm-up calls before a capture (the CUDA graphs notes in torch's docs: lazy
# initialization such as an NCCL communicator's must happen outside the capture).
GRAPH_WARMUP = 3


class Event(Protocol):
    """What the timing needs of a `torch.cuda.Event(enable_timing=True)`."""

    def record(self, stream: Any = None) -> None: ...

    def synchronize(self) -> None: ...

    def elapsed_time(self, end_event: Any) -> float: ...  # milliseconds, as torch's


def timing_label(device_type: str, cuda_timing: str, cuda_graph: bool) -> str:
    """The record's `timing`: how its samples were taken."""
    if device_type != "cuda":
        return HOST_EACH
    if cuda_graph:
        return CUDA_GRAPH
    return CUDA_BATCH if cuda_timing == "batch" else CUDA_EACH


def graph_unsupported(device_type: str, backend: str) -> str | None:
    """Why this world cannot replay a captured batch (None: it may try)."""
    if device_type != "cuda":
        return (f"--distbench-cuda-graph: backend {backend} runs on the CPU, and a CUDA graph "
                "captures GPU work only (run with --backend=nccl on a GPU)")
    return None


def batch_size(requested: int | None, per_call_s: float) -> int:
    """Iterations per batch: the requested count, or as many as last about BATCH_TARGET_S."""
    if requested is not None:
        return requested
    wanted = math.ceil(BATCH_TARGET_S / max(per_call_s, 1e-9))
    return max(MIN_BATCH, min(MAX_BATCH, wanted))


def call_of(fn: Callable[[], Any]) -> Callable[[], None]:
    """`fn` as one iteration of a batch.

    A Work returned by an async call is waited on: for NCCL that only makes the current
    stream wait for the collective's stream, so the host does not block and the next call
    is launched at once (a batch stays back to back).
    """

    def call() -> None:
        result = fn()
        if result is not None and hasattr(result, "wait"):
            result.wait()

    return call


def eager_batch(call: Callable[[], None], iterations: int) -> Callable[[], None]:
    """A batch launched call by call, with no host synchronization between them."""

    def launch() -> None:
        for _ in repeat(None, iterations):
            call()

    return launch


class BatchTimer:
    """Per-iteration seconds of one batch: `launch()` between two events on the stream.

    Built once per measurement with its two events, reused for every batch: the end event is
    waited for before the next batch records the start again.
    """

    def __init__(self, launch: Callable[[], None], iterations: int, cuda: Any) -> None:
        if iterations < 1:
            raise ValueError(f"a batch needs at least one iteration, got {iterations}")
        self.iterations = iterations
        self._launch = launch
        self._start: Event = cuda.Event(enable_timing=True)
        self._end: Event = cuda.Event(enable_timing=True)

    def __call__(self) -> float:
        self._start.record()
        self._launch()
        self._end.record()
        self._end.synchronize()  # the one host wait per batch, after its last launch
        return self._start.elapsed_time(self._end) / 1e3 / self.iterations


class CaptureError(RuntimeError):
    """The batch could not be captured in a CUDA graph; the message says why."""


def capture_batch(call: Callable[[], None], iterations: int, cuda: Any) -> Callable[[], None]:
    """Capture `iterations` calls in one CUDA graph; return what replays it (nccl-tests -G).

    Warm-up runs on a side stream first, as torch's CUDA graphs notes require; the capture
    itself also runs on a side stream (torch.cuda.graph's own), and the replay on the
    current stream, where the timing events are recorded.
    """
    side = cuda.Stream()
    side.wait_stream(cuda.current_stream())
    try:
        with cuda.stream(side):
            for _ in repeat(None, GRAPH_WARMUP):
                call()
        cuda.current_stream().wait_stream(side)
        cuda.synchronize()
        graph = cuda.CUDAGraph()
        with cuda.graph(graph):
            for _ in repeat(None, iterations):
                call()
    except Exception as exc:  # noqa: BLE001 - whatever capture refuses becomes the skip reason
        raise CaptureError(f"--distbench-cuda-graph: the measured call cannot be captured in "
                           f"a CUDA graph ({type(exc).__name__}: {exc})") from exc
    return graph.replay
