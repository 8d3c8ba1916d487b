"""The one harness every built-in collective benchmark runs through.

Each collective module states only what differs between collectives, the way each nccl-tests
``*.cu`` file does: its bus-bandwidth factor, how a requested byte count maps to element counts,
how to launch it once, and what a correct output looks like.  Everything else -- allocation,
the timed closure, the correctness check, the arguments handed to ``distbench.measure`` -- lives
here, so that every collective is measured and checked the same way.

Check values.  Inputs for the check are small non-negative integers ("tags") derived from the
rank and the element position, so they are exact in every dtype the suite can run
(int8/uint8 .. float64, float16, bfloat16) and any misplaced chunk, dropped rank or untouched
output shows up as a wrong element.  Outputs are set to a sentinel (0) that no expected value
ever equals before the check runs, so a collective that writes nothing cannot pass.  For
reductions, each position gets a tag from exactly one rank (its "owner") plus, where the dtype
can hold ``world_size + tag`` exactly, a 1 from every rank, so that every partial sum a ring or
tree algorithm may form stays an exactly representable integer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "ROOT",
    "CHECK_BLOCK",
    "Buffers",
    "Collective",
    "Layout",
    "barrier_device_ids",
    "contribution",
    "dtype_name",
    "element_count",
    "exact_integer_limit",
    "gathered_output",
    "no_bytes",
    "no_values",
    "reduced",
    "reduction_period",
    "ring_allreduce_factor",
    "ring_split_factor",
    "run_collective",
    "scattered_input",
    "split_buffer",
    "split_element_count",
    "tag",
    "tag_period",
    "unit_factor",
    "whole_tensor",
]

#: Root rank of the rooted collectives (broadcast, reduce), as in nccl-tests' default.
ROOT = 0

# Tags cycle modulo a prime so a shift by any chunk size that is not a multiple of it changes
# the value; 127 keeps every tag exact even in int8.
_TAG_MODULUS = 127
# Reductions add a tag to a count of ranks, so their tags stay small enough that int8 can
# still carry the per-rank 1s at 64 ranks (64 + 63 == 127).
_REDUCTION_TAG_MODULUS = 63
# Multiplier that spreads the first tag coordinate (a rank or chunk index) across the cycle;
# coprime with both moduli so distinct ranks get distinct tags within one cycle.
_TAG_STRIDE = 37


# ----------------------------------------------------------------------------------------------
# Byte accounting
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Per-rank element counts of one collective call and the size it is reported as.

    ``nbytes`` is what bandwidth is computed from (nccl-tests' "size" column); ``count`` is
    ``nbytes`` in elements.  Both are ``None`` for a collective that moves no data (barrier).
    """

    in_count: int
    out_count: int
    nbytes: int | None
    count: int | None


def _validate(nbytes: int, world_size: int, elem_size: int) -> None:
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 1:
        raise ValueError(f"nbytes must be a positive int, got {nbytes!r}")
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size!r}")
    if elem_size < 1:
        raise ValueError(f"elem_size must be >= 1, got {elem_size!r}")


def element_count(nbytes: int, elem_size: int) -> int:
    """Elements in a tensor of ``nbytes``: rounded down, never below one element."""
    return max(1, nbytes // elem_size)


def split_element_count(nbytes: int, world_size: int, elem_size: int) -> int:
    """Elements of a buffer that is split into ``world_size`` equal chunks.

    Rounded down to a multiple of ``world_size`` and never below one element per rank.
    """
    whole = nbytes // elem_size
    return max(world_size, whole - whole % world_size)


def whole_tensor(nbytes: int, world_size: int, elem_size: int) -> Layout:
    """Every rank holds one tensor of the requested size (all_reduce, broadcast, reduce)."""
    _validate(nbytes, world_size, elem_size)
    n = element_count(nbytes, elem_size)
    return Layout(in_count=n, out_count=n, nbytes=n * elem_size, count=n)


def gathered_output(nbytes: int, world_size: int, elem_size: int) -> Layout:
    """The requested size is the gathered output; each rank contributes 1/n of it."""
    _validate(nbytes, world_size, elem_size)
    total = split_element_count(nbytes, world_size, elem_size)
    return Layout(
        in_count=total // world_size, out_count=total, nbytes=total * elem_size, count=total
    )


def scattered_input(nbytes: int, world_size: int, elem_size: int) -> Layout:
    """The requested size is the input to be reduced; each rank keeps 1/n of the result."""
    _validate(nbytes, world_size, elem_size)
    total = split_element_count(nbytes, world_size, elem_size)
    return Layout(
        in_count=total, out_count=total // world_size, nbytes=total * elem_size, count=total
    )


def split_buffer(nbytes: int, world_size: int, elem_size: int) -> Layout:
    """Input and output are both the requested size, exchanged in n chunks (all_to_all)."""
    _validate(nbytes, world_size, elem_size)
    total = split_element_count(nbytes, world_size, elem_size)
    return Layout(in_count=total, out_count=total, nbytes=total * elem_size, count=total)


def no_bytes(nbytes: int | None, world_size: int, elem_size: int) -> Layout:
    """A collective that moves no payload (barrier): nothing to size, nothing to report."""
    if nbytes is not None:
        raise ValueError("this collective moves no bytes; run it without nbytes")
    return Layout(in_count=0, out_count=0, nbytes=None, count=None)


# Bus-bandwidth factors (nccl-tests PERFORMANCE.md).  Module-level functions rather than
# lambdas so a Collective pickles by reference if someone parametrizes over them.


def ring_allreduce_factor(world_size: int) -> float:
    """2(n-1)/n: each byte crosses the busiest link twice (reduce-scatter then all-gather)."""
    return 2.0 * (world_size - 1) / world_size


def ring_split_factor(world_size: int) -> float:
    """(n-1)/n: each rank must receive the (n-1)/n of the data it does not hold."""
    return (world_size - 1) / world_size


def unit_factor(world_size: int) -> float:
    """1: rooted collectives are bound by one link regardless of world size."""
    return 1.0


# ----------------------------------------------------------------------------------------------
# Check values
# ----------------------------------------------------------------------------------------------


def exact_integer_limit(dtype: torch.dtype) -> int:
    """Largest N such that every integer in [0, N] is exactly representable in ``dtype``."""
    if dtype.is_complex or dtype == torch.bool:
        raise TypeError(f"collective benchmarks do not support dtype {dtype}")
    if dtype.is_floating_point:
        # eps == 2**-mantissa_bits, and integers are exact up to 2**(mantissa_bits + 1).
        return round(2.0 / torch.finfo(dtype).eps)
    return torch.iinfo(dtype).max


def _modulus(dtype: torch.dtype, preferred: int) -> int:
    return max(1, min(preferred, exact_integer_limit(dtype)))


def tag(major: torch.Tensor | int, minor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Tags in 1..127 (fewer for tiny float8 types) from two int64 coordinates.

    ``major`` is typically a rank or chunk index, ``minor`` a position inside a chunk.
    """
    m = _modulus(dtype, _TAG_MODULUS)
    return (1 + (major * _TAG_STRIDE + minor) % m).to(dtype)


def _reduction_base(world_size: int, dtype: torch.dtype) -> int:
    # Only add the per-rank 1s when the largest possible partial sum is still exact.
    limit = exact_integer_limit(dtype)
    return 1 if world_size + _modulus(dtype, _REDUCTION_TAG_MODULUS) <= limit else 0


def _reduction_tag(
    owner: torch.Tensor, index: torch.Tensor, world_size: int, dtype: torch.dtype
) -> torch.Tensor:
    m = _modulus(dtype, _REDUCTION_TAG_MODULUS)
    return 1 + (owner * _TAG_STRIDE + index // world_size) % m


def tag_period(buffers: Buffers) -> int:
    """Period, in the minor coordinate, of :func:`tag` values in this buffer's dtype."""
    return _modulus(buffers.input.dtype, _TAG_MODULUS)


def reduction_period(buffers: Buffers) -> int:
    """Period, in position, of :func:`contribution` and :func:`reduced` values."""
    return buffers.world_size * _modulus(buffers.input.dtype, _REDUCTION_TAG_MODULUS)


def contribution(
    rank: int, world_size: int, positions: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    """What ``rank`` feeds into a SUM at the given global element positions (int64)."""
    owner = positions % world_size
    mine = (owner == rank).to(torch.int64)
    value = _reduction_base(world_size, dtype) + mine * _reduction_tag(
        owner, positions, world_size, dtype
    )
    return value.to(dtype)


def reduced(world_size: int, positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The SUM over all ranks of :func:`contribution` at the given positions."""
    owner = positions % world_size
    value = world_size * _reduction_base(world_size, dtype) + _reduction_tag(
        owner, positions, world_size, dtype
    )
    return value.to(dtype)


# ----------------------------------------------------------------------------------------------
# The collective description
# ----------------------------------------------------------------------------------------------


@dataclass
class Buffers:
    """The tensors one rank benchmarks with, plus what the run and check functions need."""

    input: torch.Tensor
    output: torch.Tensor
    rank: int
    world_size: int
    group: Any
    layout: Layout


# Check values are built and compared this many elements at a time: a 64 MiB uint8 buffer
# would otherwise need several int64 index temporaries of 512 MiB each, in every rank.
CHECK_BLOCK = 1 << 20

ValuesAt = Callable[[Buffers, torch.Tensor], "torch.Tensor | None"]


def _pieces(numel: int, segment: int):
    """(start, stop) ranges covering [0, numel) that never straddle a segment boundary."""
    segment = max(1, segment)
    for seg_start in range(0, numel, segment):
        seg_stop = min(numel, seg_start + segment)
        for start in range(seg_start, seg_stop, CHECK_BLOCK):
            yield start, min(seg_stop, start + CHECK_BLOCK)


def _values(
    fn: ValuesAt, buffers: Buffers, start: int, stop: int, period: int | None
) -> torch.Tensor | None:
    """``fn`` over positions [start, stop), evaluated on one period and tiled.

    The tag arithmetic costs three integer divisions per element; repeating one period is a
    memory copy, which keeps the check of a 64 MiB buffer well under a second.
    """
    n = stop - start
    head = n if period is None else min(n, period)
    device = buffers.input.device
    values = fn(buffers, torch.arange(start, start + head, dtype=torch.int64, device=device))
    if values is None or head == n:
        return values
    return values.repeat(-(-n // head))[:n]


@dataclass(frozen=True)
class Collective:
    """What one collective benchmark needs to say; :func:`run_collective` does the rest.

    - ``busbw_factor(world_size)``: bus bandwidth / algorithm bandwidth.
    - ``layout(nbytes, world_size, elem_size)``: element counts and the reported byte count.
    - ``run(buffers)``: launch the operation once (this is what is timed); may return a Work.
    - ``input_at(buffers, positions)``: this rank's check input at the given int64 positions
      of its input buffer, or ``None`` to leave the 0 sentinel there (a non-root broadcast).
    - ``output_at(buffers, positions)``: the correct output at the given positions of this
      rank's output buffer, or ``None`` if this rank's output is not defined (non-root reduce).
    - ``period(buffers)``: optional; inside a segment, values at p and p + period are equal,
      so the harness computes one period and tiles it.
    - ``segments(buffers)``: optional (input, output) segment lengths inside which ``period``
      holds (a chunk, for the collectives that place a different rank's data per chunk);
      default: the whole buffer.
    - ``in_place``: the output is the input tensor.
    - ``sized``: takes a message size; ``False`` for barrier, which runs once per world.
    """

    name: str
    busbw_factor: Callable[[int], float]
    layout: Callable[..., Layout]
    run: Callable[[Buffers], Any]
    input_at: ValuesAt
    output_at: ValuesAt
    period: Callable[[Buffers], int] | None = None
    segments: Callable[[Buffers], tuple[int, int]] | None = None
    in_place: bool = False
    sized: bool = True

    def sizes(self, nbytes: int | None, world_size: int, elem_size: int) -> Layout:
        """The layout for a requested size (``None`` for an unsized collective)."""
        if self.sized and nbytes is None:
            raise ValueError(f"{self.name} needs nbytes")
        return self.layout(nbytes, world_size, elem_size)

    def moves_no_data(self, world_size: int) -> str | None:
        """Why a call at this world size moves no data, or None: one rank in place has
        nothing to receive and nowhere to write but where its input already is (NCCL returns
        without a kernel: nccl-tests timed 0.29 us for 1 GiB), so its bytes over its time are
        a rate of nothing."""
        if self.in_place and world_size == 1:
            return "one rank, in place: the output is the input"
        return None

    def allocate(
        self,
        layout: Layout,
        *,
        rank: int,
        world_size: int,
        group: Any,
        device: torch.device,
        dtype: torch.dtype,
    ) -> Buffers:
        """Allocate the buffers once, zero-filled.

        Zeros are what the timed loop runs on: a SUM of zeros repeated any number of times
        stays zero, where ones would grow until they overflow to inf and time a different
        (denormal/inf) code path.  The check writes its own values.
        """
        inp = torch.zeros(layout.in_count, dtype=dtype, device=device)
        out = inp if self.in_place else torch.zeros(layout.out_count, dtype=dtype, device=device)
        return Buffers(inp, out, rank, world_size, group, layout)

    def run_once(self, buffers: Buffers) -> None:
        """Run the operation once and wait for it (for the check, not the timed loop)."""
        work = self.run(buffers)
        if work is not None:
            work.wait()

    def _tiling(self, buffers: Buffers) -> tuple[int | None, int, int]:
        period = self.period(buffers) if self.period is not None else None
        if self.segments is not None:
            in_seg, out_seg = self.segments(buffers)
        else:
            in_seg, out_seg = buffers.input.numel(), buffers.output.numel()
        return period, in_seg, out_seg

    def prepare(self, buffers: Buffers) -> None:
        """Put the 0 sentinel in the outputs and the check values in the inputs."""
        # The sentinel matters: what the timed loop or an earlier check left in the output
        # could otherwise pass for the result of an operation that wrote nothing.
        buffers.input.zero_()
        if buffers.output is not buffers.input:
            buffers.output.zero_()
        period, in_seg, _ = self._tiling(buffers)
        for start, stop in _pieces(buffers.input.numel(), in_seg):
            values = _values(self.input_at, buffers, start, stop, period)
            if values is None:
                return
            buffers.input[start:stop].copy_(values)

    def count_wrong(self, buffers: Buffers) -> int:
        """Output elements on this rank that differ from the expected result."""
        period, _, out_seg = self._tiling(buffers)
        wrong = torch.zeros((), dtype=torch.int64, device=buffers.output.device)
        for start, stop in _pieces(buffers.output.numel(), out_seg):
            want = _values(self.output_at, buffers, start, stop, period)
            if want is None:
                return 0
            wrong += (buffers.output[start:stop] != want).sum()
        return int(wrong.item())

    def check(self, buffers: Buffers) -> int:
        """Re-initialize, run once, return the number of wrong output elements on this rank."""
        self.prepare(buffers)
        self.run_once(buffers)
        return self.count_wrong(buffers)


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"``, the spelling results tables use."""
    return str(dtype).removeprefix("torch.")


def run_collective(distbench: Any, collective: Collective, nbytes: int | None = None) -> None:
    """Benchmark ``collective`` at ``nbytes`` in this rank through ``distbench.measure``.

    The byte count handed to ``measure`` is the actual size after rounding to whole elements
    (and to a multiple of the world size for split collectives), never the requested one.
    """
    dtype = distbench.dtype
    world_size = distbench.world_size
    layout = collective.sizes(nbytes, world_size, torch.empty((), dtype=dtype).element_size())
    buffers = collective.allocate(
        layout,
        rank=distbench.rank,
        world_size=world_size,
        group=distbench.group,
        device=distbench.device,
        dtype=dtype,
    )

    def fn() -> Any:
        return collective.run(buffers)

    def check() -> int:
        return collective.check(buffers)

    distbench.measure(
        fn,
        nbytes=layout.nbytes,
        count=layout.count,
        dtype=dtype_name(dtype) if layout.nbytes is not None else None,
        family=collective.name,
        busbw_factor=collective.busbw_factor(world_size),
        check=check,
        moves_no_data=collective.moves_no_data(world_size),
    )


def barrier_device_ids(buffers: Buffers) -> list[int] | None:
    """Device ids for ``dist.barrier`` on NCCL, so it does not guess the GPU (and warn)."""
    device = buffers.input.device
    if device.type == "cuda" and device.index is not None:
        return [device.index]
    return None


def no_values(buffers: Buffers, positions: torch.Tensor) -> None:
    """``input_at``/``output_at`` of a collective with no check values (barrier)."""
    return None
