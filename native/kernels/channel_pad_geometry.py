"""Host-side shapes of channel padding (no Triton import: the support check uses them too).

A ``pad_channels`` kernel (``channel_pad.py``) runs the problem whose channel runs are padded to multiples of
:data:`CHANNEL_MULTIPLE`: C'/G = ⌈C/G⌉₈ and K'/G = ⌈K/G⌉₈, every other field unchanged."""

from __future__ import annotations

import dataclasses
import math

from tiledispatch.native.problem import ConvProblem

#: Channels a padded run is a multiple of: 8 half-precision values are one 16-byte load.
CHANNEL_MULTIPLE = 8
#: Most a padding may multiply a group's channel products (C/G·K/G, so the GEMM work of every direction) by:
#: beyond it the padded tile computes mostly zeros (C/G = K/G = 1 pads to 8·8 = 64×), and the v1, direct and
#: gmerge kernels run the problem.
MAX_WORK_INFLATION = 2.0
#: Most slabs a copy's grid holds (its second axis, CUDA's limit): a weight copy has one per output channel.
MAX_SLABS = 65_535
#: Every workspace region of a channel-padded plan starts this many bytes in (a multiple of 16, which the
#: kernels' pointer alignment promise needs; 128 keeps each region on its own cache lines).
REGION_ALIGN_BYTES = 128


def round_up(value: int, multiple: int = CHANNEL_MULTIPLE) -> int:
    return -(-value // multiple) * multiple


def aligned(problem: ConvProblem) -> bool:
    """Whether C/G and K/G are multiples of :data:`CHANNEL_MULTIPLE` already."""
    return problem.c_per_group % CHANNEL_MULTIPLE == 0 and problem.k_per_group % CHANNEL_MULTIPLE == 0


def work_inflation(problem: ConvProblem) -> float:
    """``⌈C/G⌉₈·⌈K/G⌉₈ / (C/G·K/G)``: how much more GEMM work the padded problem is."""
    cg, kg = problem.c_per_group, problem.k_per_group
    return round_up(cg) * round_up(kg) / (cg * kg)


def padded_problem(problem: ConvProblem) -> ConvProblem:
    """The problem with C/G and K/G rounded up to multiples of :data:`CHANNEL_MULTIPLE`."""
    return dataclasses.replace(problem, in_channels=problem.groups * round_up(problem.c_per_group),
                               out_channels=problem.groups * round_up(problem.k_per_group))


@dataclasses.dataclass(frozen=True)
class Repack:
    """One copy between a tensor and its padded form, both seen as ``[outer, middle, rows, channels]``:
    ``dst[o, m, r, c] = src[o, m, r, c]`` where ``m < middle_src`` and ``c < channels_src``, else 0, for
    every ``m < middle_dst``, ``c < channels_dst``. Activations are one slab, ``[1, 1, N·prod(spatial)·G, C/G]``;
    weights ``[G, K/G, prod(filter), C/G]`` (a slab per output channel: ``G·K/G`` of the larger form)."""

    outer: int
    rows: int
    middle_src: int
    middle_dst: int
    channels_src: int
    channels_dst: int

    @property
    def slabs(self) -> int:
        return self.outer * self.middle_dst


def repack(src_shape: tuple[int, ...], dst_shape: tuple[int, ...], *, weight: bool) -> Repack:
    """The :class:`Repack` from a grouped tensor of ``src_shape`` to one of ``dst_shape`` (same layout, other
    channel counts)."""
    if weight:  # G, K/G, *filter, C/G
        return Repack(outer=src_shape[0], rows=math.prod(src_shape[2:-1]), middle_src=src_shape[1],
                      middle_dst=dst_shape[1], channels_src=src_shape[-1], channels_dst=dst_shape[-1])
    return Repack(outer=1, rows=math.prod(src_shape[:-1]), middle_src=1, middle_dst=1,
                  channels_src=src_shape[-1], channels_dst=dst_shape[-1])


def copy_bytes(problem: ConvProblem) -> int:
    """Bytes a ``pad_channels`` kernel's copies move on ``problem``: each padded operand read and its copy written,
    and a padded result written and read back into the caller's tensor (0 on aligned problems)."""
    padded = padded_problem(problem)
    return sum((math.prod(shape) + math.prod(padded_shape)) * problem.dtype.itemsize
               for shape, padded_shape in zip(problem.operand_shapes, padded.operand_shapes) if shape != padded_shape)


def region_bytes(elements: int, itemsize: int) -> int:
    """Bytes a workspace region of ``elements`` takes, rounded up to :data:`REGION_ALIGN_BYTES`."""
    return round_up(elements * itemsize, REGION_ALIGN_BYTES)
