"""Host-side shapes of channel padding (no Triton import: the support check uses them too).

A ``pad_channels`` kernel (``channel_pad.py``) runs the problem whose channel runs are padded to multiples of
:data:`CHANNEL_MULTIPLE`, every other field unchanged:

* C/G > 1 (grouped and dense): each group's runs, C'/G = ⌈C/G⌉₈ and K'/G = ⌈K/G⌉₈;
* C/G = 1 (depthwise, and the depthwise multiplier K/G > 1): the number of groups, G' = ⌈G⌉₈, so C' = G' and
  K' = G'·K/G. A depthwise channel's run is one element, so padding it would multiply the work by 64 (the tile
  is then mostly zeros); padding the groups adds G' − G zero channels (at most 7) at the end of each position's
  channel run, which is what the v8 depthwise binaries need: every position's run 16-byte aligned."""

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


def pads_groups(problem: ConvProblem) -> bool:
    """Whether padding adds groups (C/G = 1) rather than channels to each group."""
    return problem.c_per_group == 1


def aligned(problem: ConvProblem) -> bool:
    """Whether the padded problem is the problem itself: C/G and K/G multiples of :data:`CHANNEL_MULTIPLE`
    (C/G = 1: G a multiple of it)."""
    if pads_groups(problem):
        return problem.groups % CHANNEL_MULTIPLE == 0
    return problem.c_per_group % CHANNEL_MULTIPLE == 0 and problem.k_per_group % CHANNEL_MULTIPLE == 0


def runs_inflation(problem: ConvProblem) -> float:
    """``⌈C/G⌉₈·⌈K/G⌉₈ / (C/G·K/G)``: how much more work padding each group's runs would be."""
    cg, kg = problem.c_per_group, problem.k_per_group
    return round_up(cg) * round_up(kg) / (cg * kg)


def work_inflation(problem: ConvProblem) -> float:
    """How much more work the padded problem is: :func:`runs_inflation` (C/G = 1: ``⌈G⌉₈ / G``)."""
    if pads_groups(problem):
        return round_up(problem.groups) / problem.groups
    return runs_inflation(problem)


def padded_problem(problem: ConvProblem) -> ConvProblem:
    """The problem with its channel runs padded to multiples of :data:`CHANNEL_MULTIPLE` (see the module)."""
    if pads_groups(problem):
        groups = round_up(problem.groups)
        return dataclasses.replace(problem, groups=groups, in_channels=groups,
                                   out_channels=groups * problem.k_per_group)
    return dataclasses.replace(problem, in_channels=problem.groups * round_up(problem.c_per_group),
                               out_channels=problem.groups * round_up(problem.k_per_group))


@dataclasses.dataclass(frozen=True)
class Repack:
    """One copy between a tensor and its padded form, both seen as ``[outer, middle, rows, channels]``:
    ``dst[o, m, r, c] = src[o, m, r, c]`` where ``m < middle_src`` and ``c < channels_src``, else 0, for
    every ``m < middle_dst``, ``c < channels_dst``. Activations are one slab: ``[1, 1, N·prod(spatial)·G, C/G]``
    (padded groups: ``[1, 1, N·prod(spatial), G·C/G]``); weights of padded runs ``[G, K/G, prod(filter), C/G]`` (a
    slab per output channel: ``G·K/G`` of the larger form), of padded groups one row ``[1, 1, 1, G·K/G·prod(filter)]``
    (the added groups' weights are the zeros after the last one's)."""

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
    channel or group counts)."""
    if weight and src_shape[0] == dst_shape[0]:  # G, K/G, *filter, C/G: padded runs
        return Repack(outer=src_shape[0], rows=math.prod(src_shape[2:-1]), middle_src=src_shape[1],
                      middle_dst=dst_shape[1], channels_src=src_shape[-1], channels_dst=dst_shape[-1])
    # One axis differs (the last: padded runs of an activation; G: padded groups): the rows are the axes before it,
    # and everything from it on is one run, equal up to its length in both (the axes after it agree).
    differing = [axis for axis, (s, d) in enumerate(zip(src_shape, dst_shape)) if s != d]
    if len(differing) != 1 or len(src_shape) != len(dst_shape):
        raise ValueError(f"repack: {src_shape} -> {dst_shape} must differ in exactly one axis")
    axis = differing[0]
    return Repack(outer=1, rows=math.prod(src_shape[:axis]), middle_src=1, middle_dst=1,
                  channels_src=math.prod(src_shape[axis:]), channels_dst=math.prod(dst_shape[axis:]))


def copy_bytes(problem: ConvProblem) -> int:
    """Bytes a ``pad_channels`` kernel's copies move on ``problem``: each padded operand read and its copy written,
    and a padded result written and read back into the caller's tensor (0 on aligned problems)."""
    padded = padded_problem(problem)
    return sum((math.prod(shape) + math.prod(padded_shape)) * problem.dtype.itemsize
               for shape, padded_shape in zip(problem.operand_shapes, padded.operand_shapes) if shape != padded_shape)


def region_bytes(elements: int, itemsize: int) -> int:
    """Bytes a workspace region of ``elements`` takes, rounded up to :data:`REGION_ALIGN_BYTES`."""
    return round_up(elements * itemsize, REGION_ALIGN_BYTES)
