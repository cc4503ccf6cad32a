"""Unaligned channel runs on an aligned tile (``pad_channels``: igemm and gemm1x1, direct and dwrow, every direction).

Zero channels add nothing to any sum, so a problem P whose C/G or K/G is not a multiple of 8 is the problem P'
with both rounded up (:func:`~tiledispatch.native.kernels.channel_pad_geometry.padded_problem`) on operands
padded with zeros, and the result is P''s with the padding dropped. A depthwise problem (C/G = 1) whose
channel count G is not a multiple of 8 is likewise the problem with G' = ⌈G⌉₈ groups, the added groups' inputs
and weights zero (their outputs are dropped):

    forward:          Y  = unpad_K(conv(pad_C(X), pad_KC(W)))
    backward-data:    dX = unpad_C(conv_bwd_data(pad_K(dY), pad_KC(W)))
    backward-weight:  dW = unpad_KC(conv_bwd_weight(pad_C(X), pad_K(dY)))

``pad_C`` / ``pad_K`` copy a tensor into the workspace with each group's channel run widened to the multiple of 8
(zeros after it), ``pad_KC`` both channel axes of the weight (``G, K/G, taps, C/G``); ``unpad`` copies the kept
part of a padded result into the caller's tensor (padded groups: each position's G-channel run widened to G', the
weight's ``G·K/G·taps`` values followed by zeros). An operand or result whose runs are aligned already is used
in place. The kernel in the middle is the ``v8`` tile's own, over P': for igemm and gemm1x1 the GEMM M, N, K of
``igemm_*.py``; for direct and dwrow the FMA loops of ``direct.py`` and ``dwrow.py``.

Why: a ``v1`` tile gathers every operand element through its own address and cannot use 16-byte ``cp.async``,
so nothing is pipelined. On the H200 (synthetic sweep of session 34) the dense n1 c781→488 107×107 3×3 layer
ran at 0.12× cuDNN in every direction (forward 1,469 against 183 µs) and c605→24 7×7 at 0.25–0.40×, while the
padded copies cost one read and one write of the activations (c781 107×107: 36 MB, about 9 µs). A copy runs
:func:`_repack_kernel`: one program per ``REPACK_ROWS × REPACK_CHANNELS`` block of one slab of the destination.

Depthwise: a channel count that is not a multiple of 8 (931, 37, 23 in the synthetic sweep) leaves every v8 binary
out (a position's run is not 16-byte aligned), so such layers ran on the v1 binaries: on the H200 (session 34) the
n135 g931 28×28 7×7 stride-2 layer took 995 / 2,304 / 2,258 µs forward / backward-data / backward-weight against a
58 µs bound, its v1 forward binary issuing 11.5 SASS instructions an FMA to the v8 tap-row binary's 3.7
(``bench/results/2026-11-29_h200_s37/sass_direct_depthwise.md``). Padding its groups costs one read and write of
X (or dY) and of Y (or dX), about 0.5 GB there.

``is_supported`` refuses a padding that more than doubles the work (``channel_pad_geometry.MAX_WORK_INFLATION``:
padding a depthwise channel's run of 1 would be 64×, hence the groups instead), and aligned problems (the v8 tile
runs them without copies).

Measured (H200, ``bench/results/2026-11-29_h200_s36/``, every ``default`` kernel and cuDNN in one run, the 14 seed-7
synthetic problems with unaligned groups ≥ 16 channels wide × 3 directions): a padded tile was the fastest kernel on
23 of 42 problem-directions, 1.2–7.4× the best unpadded one (c781→488 107×107 3×3: forward 1,462 → 198 µs,
backward-data 1,398 → 215, backward-weight 1,024 → 239; cuDNN 170 / 192 / 158); the 2D dense ones went from 0.38×
to 1.02× cuDNN (geomean of 18). It loses where the copies outweigh the GEMM (small 1×1 problems, 2–2.4× slower than
the v1 ``gemm1x1`` tiles) and to ``gmerge`` on merged groups that are 8-aligned already. Those times had the first
copy program, 32 × 32 blocks with each row's (o, m, r) divided out per thread: 65 SASS instructions an element, and
on the n72 g4 c660 1×1 stride-2 layer its copies took 489 µs beside the 236 µs GEMM (Nsight Compute). The slab
program here (24 an element) made the padded kernels 1.12× faster over those problems (two runs) and that layer's
backward-data 730 → 526 µs (the v1 tile: 717).
"""

from __future__ import annotations

import math

import triton
import triton.language as tl

from tiledispatch.native.configs import PADDABLE_FAMILIES, KernelConfig
from tiledispatch.native.kernels.base import KernelTemplate, Launch, Program, cdiv, pointer_type
from tiledispatch.native.kernels.channel_pad_geometry import Repack, padded_problem, region_bytes, repack
from tiledispatch.native.problem import ConvProblem, Direction

#: A copy program's block: ``REPACK_ROWS`` rows × ``REPACK_CHANNELS`` channels of one slab (Triton 3.6 lays it out
#: as 32 channels a warp, the 4 warps side by side, each thread one channel of the 8 rows: one row offset a row).
REPACK_ROWS = 8
REPACK_CHANNELS = 128
_REPACK_INTS = ("ROWS", "MIDDLE_DST", "MIDDLE_SRC", "CHANNELS_DST", "CHANNELS_SRC")
#: Which operand of each direction's runner contract is the weight (first, second, result).
_WEIGHT_OPERAND = {Direction.FORWARD: 1, Direction.BACKWARD_DATA: 1, Direction.BACKWARD_WEIGHT: 2}


@triton.jit
def _repack_kernel(src_ptr, dst_ptr, ROWS, MIDDLE_DST, MIDDLE_SRC, CHANNELS_DST, CHANNELS_SRC,
                   BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """``dst[o, m, r, c] = src[o, m, r, c]`` if ``m < MIDDLE_SRC`` and ``c < CHANNELS_SRC`` else 0, for ``r < ROWS``,
    ``c < CHANNELS_DST``. Grid: (row blocks, slabs ``o·MIDDLE_DST + m``, channel blocks); the slab's (o, m) is one
    scalar division a program, so an element costs its offset and masks alone (32-bit: every tensor of a
    ``pad_channels`` kernel is under 2^31 elements, ``is_supported``)."""
    slab = tl.program_id(1)
    o = slab // MIDDLE_DST
    m = slab % MIDDLE_DST
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
    inside = (r < ROWS)[:, None] & (c < CHANNELS_DST)[None, :]
    kept = inside & (c < CHANNELS_SRC)[None, :] & (m < MIDDLE_SRC)
    src_row = ((o * MIDDLE_SRC + m) * ROWS + r) * CHANNELS_SRC
    dst_row = (slab * ROWS + r) * CHANNELS_DST
    value = tl.load(src_ptr + src_row[:, None] + c[None, :], mask=kept, other=0)
    tl.store(dst_ptr + dst_row[:, None] + c[None, :], value, mask=inside)


def _repack_launch(src, dst, shape: Repack) -> Launch:
    grid = (cdiv(shape.rows, REPACK_ROWS), shape.slabs, cdiv(shape.channels_dst, REPACK_CHANNELS))
    return Launch("repack", grid, (src, dst, shape.rows, shape.middle_dst, shape.middle_src, shape.channels_dst,
                                   shape.channels_src))


class ChannelPadded:
    """Template of the ``pad_channels`` configs of one direction and family group, around the template that runs
    their v8 tiles (igemm / gemm1x1, direct, dwrow)."""

    def __init__(self, inner: KernelTemplate):
        self.inner = inner
        self.direction = inner.direction
        self.families = inner.families & PADDABLE_FAMILIES

    def programs(self, config: KernelConfig) -> dict[str, Program]:
        ptr = pointer_type(config.dtype)
        repack_program = Program(_repack_kernel, {"BLOCK_R": REPACK_ROWS, "BLOCK_C": REPACK_CHANNELS},
                                 {"src_ptr": ptr, "dst_ptr": ptr, **{name: "i32" for name in _REPACK_INTS}}, 4, 1)
        return {**self.inner.programs(config.unpadded), "repack": repack_program}

    def _regions(self, problem: ConvProblem) -> list[tuple[int, tuple[int, ...], tuple[int, ...]]]:
        """(operand index, its shape, its padded shape) of every operand whose channel runs are padded."""
        padded = padded_problem(problem)
        return [(index, shape, padded_shape) for index, (shape, padded_shape)
                in enumerate(zip(problem.operand_shapes, padded.operand_shapes)) if shape != padded_shape]

    def _copies_elements(self, problem: ConvProblem) -> int:
        return sum(region_bytes(math.prod(padded_shape), problem.dtype.itemsize)
                   for _, _, padded_shape in self._regions(problem)) // 4

    def workspace_elements(self, problem: ConvProblem, config: KernelConfig) -> int:
        """fp32 elements: the padded copies (each region 128-byte aligned), then the v8 tile's own workspace."""
        return (self._copies_elements(problem)
                + self.inner.workspace_elements(padded_problem(problem), config.unpadded))

    def plan(self, problem, config, first, second, out, workspace) -> list[Launch]:
        from tiledispatch.native.launch import torch_dtype

        dtype = torch_dtype(problem.dtype)
        operands = [first, second, out]
        weight = _WEIGHT_OPERAND[problem.direction]
        before, after = [], []
        start = 0  # fp32 elements into the workspace
        for index, shape, padded_shape in self._regions(problem):
            elements = math.prod(padded_shape)
            size = region_bytes(elements, problem.dtype.itemsize) // 4
            region = workspace[start:start + size].view(dtype)[:elements].view(padded_shape)
            start += size
            if index < 2:
                before.append(_repack_launch(operands[index], region,
                                             repack(shape, padded_shape, weight=index == weight)))
            else:
                after.append(_repack_launch(region, out, repack(padded_shape, shape, weight=index == weight)))
            operands[index] = region
        inner_workspace = workspace[start:] if workspace is not None and workspace.numel() > start else None
        inner = self.inner.plan(padded_problem(problem), config.unpadded, *operands, inner_workspace)
        return [*before, *inner, *after]
