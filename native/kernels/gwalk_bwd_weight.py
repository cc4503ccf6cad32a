"""Grouped 3×3 backward-weight on tensor cores, walking down the output rows (gwalk), 2D: stride 1 and
dilation 1 for walks of 2 or 4 rows, any stride and dilation for one-row walks (last paragraph).

``dW[g, k, fr, s, c] = Σ_n Σ_{oh, iw} dY[n, oh, iw + pad_w − s, g, k] · X[n, oh − pad_h + fr, iw, g, c]``
(the sum over output columns written over input columns ``iw = ow − pad_w + s``: padding columns add zero).

GEMM mapping, per program (one block of ``MERGE`` groups, ``k0 = gb·MERGE·K/G``, ``c0 = gb·MERGE·C/G``):
rows (GEMM M = 4·``BLOCK_M``): ``r = s·BLOCK_M + m``, filter column ``s`` (3 of 4 blocks used) × the
block's output channel ``k0 + m`` (``BLOCK_M`` ≥ MERGE·K/G); columns (GEMM N = ``BLOCK_N`` ≥ MERGE·C/G):
its input channels; reduction (GEMM K = ``BLOCK_K`` lanes per step): ``IMAGES`` images × ``TILE_W`` input
columns of one input row (``TILE_W = min(in_w, BLOCK_K)``). Three accumulators, one per filter row ``q``:
block ``s`` of ``acc_q`` is tap ``(q, s)``. The reduction's (image, output-row block, column tile) units
are cut into ``ROWS``-row walks; ``split_k`` programs share them (contiguous ranges, a grid axis) and each
walks its units top to bottom::

    for t = 0 … ROWS + 1 (input row ih = oh0 − pad_h + t):
        if t < ROWS:  A_t[s·BLOCK_M + m, p] = dY[n_p, oh0 + t, iw_p + pad_w − s, k0 + m]  (one load per output row)
        B[p, j] = X[n_p, ih, iw_p, c0 + j]                                         (one load per input row)
        for each output row i with 0 ≤ t − i < 3:  acc_{t − i} += A_i · B

so each gradient row and each activation row is loaded once per walk and serves every tap it meets (the
filter-column shift rides on the gradient's stacked rows, the filter-row shift on which accumulator),
and no address is decoded per pixel in the walk. The stacked rows are one accumulator per filter row
rather than nine per tap because Triton lays a chain of dots out with warps along M only: nine 32×32
tiles on 4 warps would hold duplicate rows (ptxas: 255 registers and spills). Merged groups are kept
apart at the store: only the block-diagonal entries (``m // (K/G) == j // (C/G)``) are written, at
``dW[((k0 + m)·9 + 3q + s)·C/G + j mod C/G]`` (GKYXC).

split_k > 1: each program writes fp32 partials to the workspace row ``[split, weight elements]`` (an empty
split writes zeros) and the shared reduce (``split_reduce.py``) sums the rows in a fixed order
(deterministic, no atomics). One tensor-core accumulator per split sums at most
:data:`~tiledispatch.native.kernels.gwalk_geometry.MAX_LANES_PER_SPLIT` reduction lanes (the support check
refuses longer splits), the length igemm's kernels sum before promoting to fp32 adds.
Host-side sizes: ``gwalk_geometry.py``.

One-row walks (``ROWS`` = 1) take any stride and dilation (run-time sizes): the output row ``oh`` reads input
rows ``oh·STR_H − pad_h + q·DIL_H`` (one load each), and stacked row ``s`` of lane ``iw`` holds
``dY[.., ow, ..]`` with ``iw = ow·STR_W − pad_w + s·DIL_W`` (zero where no such ``ow`` exists: at stride 2 half
the lanes of each row block).

TMA-fed walks (``num_stages`` 2, 3; stride 1 and dilation 1, any walk length): the same walk, with every operand
tile one TMA box of a device-side descriptor over the 4D tensors (``[N, OH, OW, K]`` and ``[N, H, W, C]``): the
gradient's stacked rows are three boxes ``[IMAGES, 1, TILE_W, BLOCK_M]`` at column origins ``iw0 + pad_w − s``,
joined into the ``[4·BLOCK_M, lanes]`` operand, the input row one box ``[IMAGES, 1, TILE_W, BLOCK_N]``. The TMA unit
zero-fills every box element outside its tensor (negative or past-the-end images, rows, columns and channels),
which is the convolution's padding and the tiles' edges, so the walk computes no address and no mask, and
Triton's software pipeline issues the next unit's boxes while the current one's dots run. ``TILE_W`` (compiled
in: one binary per width, :func:`~tiledispatch.native.kernels.gwalk_geometry.tma_tile_widths`) is the power of
two at or above the input width, at most the lanes; ``IMAGES = lanes / TILE_W``. Measured (H200, session 34,
``bench/results/2026-11-29_h200_s34``): 16×16×64 compiles to 88 registers instead of the pointer walk's 115 (5
four-warp programs an SM instead of 4) and ran n32 g32 c128 56² in 38.9 µs against the pointer walk's 48.5
(cuDNN 75.7) and c256 28² in 24.6 against 30.2 (gmerge 29.9, cuDNN 31.2); on c512 14² (18.4 against 17.8),
c1024 7² (15.0 against 13.9) and batch 1 it lost. 32×32 tiles hold their four stacked gradient tiles in
registers (246 registers).

Why: the igemm / gmerge backward-weight programs own one tap each, so every activation and gradient tile
is loaded nine times and every lane's (n, h, w) is decoded per step; the forward / backward-data walk was
10–46 % faster than those programs on ResNeXt's stride-1 grouped layers (H200, session 12). A first form
of this kernel (``952af45``) stacked the gradient over filter rows and loaded the activations once per
filter column: 42 operand tiles per 4-row walk instead of 22, and never faster than default's best (H100).
"""

from __future__ import annotations

import triton
import triton.language as tl

from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.kernels.base import Launch, Program, pointer_type
from tiledispatch.native.kernels.gwalk_geometry import tma_tile_widths, weight_walk_geometry
from tiledispatch.native.kernels.split_reduce import (
    weight_partials_elements,
    weight_split_plan,
    with_split_reduce,
)
from tiledispatch.native.kernels.tma_conv import ensure_scratch_allocator
from tiledispatch.native.problem import ConvProblem, Direction

# The TMA walk's run-time sizes; the pointer walk's add strides, dilations and its lane tile.
_TMA_SIZE_PARAMS = ("BATCH", "C_TOTAL", "K_TOTAL", "CG", "KG", "GC", "GK", "IN_H", "IN_W", "OUT_H", "OUT_W",
                    "PAD_H", "PAD_W")
_SIZE_PARAMS = (*_TMA_SIZE_PARAMS, "STR_H", "STR_W", "DIL_H", "DIL_W", "TILE_W", "IMAGES")


@triton.jit
def _gwalk_bwd_weight_kernel(
    x_ptr, dy_ptr, out_ptr,
    BATCH, C_TOTAL, K_TOTAL, CG, KG, GC, GK, IN_H, IN_W, OUT_H, OUT_W, PAD_H, PAD_W, STR_H, STR_W, DIL_H, DIL_W,
    TILE_W, IMAGES,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, ROWS: tl.constexpr,
    SPLIT_K: tl.constexpr,
):
    """CG / KG: channels per group; GC / GK: a group block's merged input / output channels (c0 = gb·GC,
    k0 = gb·GK). 3×3 filter. ROWS > 1: stride 1 and dilation 1 (the walk's row sharing is compiled in; the
    support check refuses others); ROWS = 1: any stride and dilation (STR_*, DIL_*)."""
    C_TOTAL, K_TOTAL, GC, GK = _channel_runs(C_TOTAL, K_TOTAL, GC, GK)
    split = tl.program_id(0)
    group_block = tl.program_id(1)
    w_tiles, h_tiles, unit_begin, unit_end = _split_units(split, BATCH, IMAGES, OUT_H, ROWS, IN_W, TILE_W, SPLIT_K)

    lane = tl.arange(0, BLOCK_K)  # reduction lanes: (image, input column) pairs of a unit
    lane_image = lane // TILE_W
    lane_col = lane % TILE_W
    lane_used = lane < IMAGES * TILE_W
    c0 = group_block * GC
    k0 = group_block * GK
    # Stacked rows r = s·BLOCK_M + k: filter column s (3 of 4 blocks used), output channel k0 + k.
    r = tl.arange(0, 4 * BLOCK_M)
    s = r // BLOCK_M
    ks = r % BLOCK_M
    k_ok = (ks < GK) & (k0 + ks < K_TOTAL) & (s < 3)  # a partial last group block
    a_row = k0 + ks - s * K_TOTAL  # the filter column's shift of the gradient's column, per stacked row
    cs = tl.arange(0, BLOCK_N)
    c_ok = (cs < GC) & (c0 + cs < C_TOTAL)

    acc0 = tl.zeros((4 * BLOCK_M, BLOCK_N), dtype=tl.float32)  # filter row 0; row block s: tap (0, s)
    acc1 = tl.zeros((4 * BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc2 = tl.zeros((4 * BLOCK_M, BLOCK_N), dtype=tl.float32)
    for unit in range(unit_begin, unit_end):
        tile_w = unit % w_tiles
        t = unit // w_tiles
        oh0 = (t % h_tiles) * ROWS
        image = (t // h_tiles) * IMAGES + lane_image
        iw = tile_w * TILE_W + lane_col
        pix_ok = lane_used & (image < BATCH) & (iw < IN_W)
        x_pix = x_ptr + (image * IN_H * IN_W + iw) * C_TOTAL + c0  # per lane: its input column in row 0
        if ROWS == 1:
            # One output row, any stride and dilation: A[s·BLOCK_M + k, lane] = dY[image, oh0, ow, k0 + k] where
            # iw = ow·STR_W − PAD_W + s·DIL_W (lanes with no such ow add zero), then its three filter rows'
            # input rows, one load each.
            ow_num0 = iw + PAD_W
            ow_num1 = ow_num0 - DIL_W
            ow_num2 = ow_num1 - DIL_W
            ow0 = ow_num0 // STR_W
            ow1 = ow_num1 // STR_W
            ow2 = ow_num2 // STR_W
            ok0 = (ow_num0 >= 0) & (ow0 * STR_W == ow_num0) & (ow0 < OUT_W)
            ok1 = (ow_num1 >= 0) & (ow1 * STR_W == ow_num1) & (ow1 < OUT_W)
            ok2 = (ow_num2 >= 0) & (ow2 * STR_W == ow_num2) & (ow2 < OUT_W)
            ow = tl.where(s[:, None] == 0, ow0[None, :], tl.where(s[:, None] == 1, ow1[None, :], ow2[None, :]))
            col_ok = tl.where(s[:, None] == 0, ok0[None, :], tl.where(s[:, None] == 1, ok1[None, :], ok2[None, :]))
            a = tl.load(dy_ptr + (((image * OUT_H + oh0) * OUT_W)[None, :] + ow) * K_TOTAL + (k0 + ks)[:, None],
                        mask=(k_ok[:, None] & pix_ok[None, :]) & col_ok, other=0.0)
            for q in tl.static_range(3):
                ih = oh0 * STR_H - PAD_H + q * DIL_H
                b = tl.load(x_pix[:, None] + ih * IN_W * C_TOTAL + cs[None, :],
                            mask=(pix_ok & (ih >= 0) & (ih < IN_H))[:, None] & c_ok[None, :], other=0.0)
                if q == 0:
                    acc0 = tl.dot(a, b, acc0)
                elif q == 1:
                    acc1 = tl.dot(a, b, acc1)
                else:
                    acc2 = tl.dot(a, b, acc2)
        # ROWS > 1 (stride 1, dilation 1): A[s·BLOCK_M + k, lane] = dY[image, oh0 + i, iw + PAD_W − s, k0 + k]: a
        # per-lane offset plus a per-row one (2D offset tensors held across the walk cost the 4-warp tiles their
        # spill-free build)
        dy_lane = ((image * OUT_H + oh0) * OUT_W + iw + PAD_W) * K_TOTAL
        held = ()  # the walk's gradient tiles, output row oh0 + i at held[i]
        for step in tl.static_range(ROWS + 2 if ROWS > 1 else 0):
            if step < ROWS:  # output row oh0 + step: the A operand of the three filter rows it meets
                ow = iw[None, :] + PAD_W - s[:, None]
                a_ok = (k_ok[:, None] & (pix_ok & (oh0 + step < OUT_H))[None, :]) & (ow >= 0) & (ow < OUT_W)
                held = held + (tl.load(dy_ptr + (dy_lane + step * OUT_W * K_TOTAL)[None, :] + a_row[:, None],
                                       mask=a_ok, other=0.0),)
            ih = oh0 - PAD_H + step
            b = tl.load(x_pix[:, None] + ih * IN_W * C_TOTAL + cs[None, :],
                        mask=(pix_ok & (ih >= 0) & (ih < IN_H))[:, None] & c_ok[None, :], other=0.0)
            acc0, acc1, acc2 = _walk_dots(step, held, b, acc0, acc1, acc2, ROWS)

    _store_walk(out_ptr, acc0, acc1, acc2, split, k0, ks, s, cs, k_ok[:, None] & c_ok[None, :], K_TOTAL, KG, CG,
                SPLIT_K)


@triton.jit
def _gwalk_tma_bwd_weight_kernel(
    x_ptr, dy_ptr, out_ptr,
    BATCH, C_TOTAL, K_TOTAL, CG, KG, GC, GK, IN_H, IN_W, OUT_H, OUT_W, PAD_H, PAD_W,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TILE_W: tl.constexpr, IMAGES: tl.constexpr, ROWS: tl.constexpr,
    SPLIT_K: tl.constexpr,
):
    """The walk of ``_gwalk_bwd_weight_kernel`` (stride 1, dilation 1) with every operand tile one TMA box (module
    docstring, "TMA-fed walks"): ``TILE_W`` input columns of ``IMAGES`` images (``IMAGES·TILE_W`` lanes)."""
    LANES: tl.constexpr = IMAGES * TILE_W
    C_TOTAL, K_TOTAL, GC, GK = _channel_runs(C_TOTAL, K_TOTAL, GC, GK)
    split = tl.program_id(0)
    group_block = tl.program_id(1)
    w_tiles, h_tiles, unit_begin, unit_end = _split_units(split, BATCH, IMAGES, OUT_H, ROWS, IN_W, TILE_W, SPLIT_K)
    c0 = group_block * GC
    k0 = group_block * GK
    # Boxes past any edge (images, rows, columns, channels; negative coordinates too) read zeros: the padding.
    dy_desc = tl.make_tensor_descriptor(dy_ptr, shape=[BATCH, OUT_H, OUT_W, K_TOTAL],
                                        strides=[OUT_H * OUT_W * K_TOTAL, OUT_W * K_TOTAL, K_TOTAL, 1],
                                        block_shape=[IMAGES, 1, TILE_W, BLOCK_M])
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[BATCH, IN_H, IN_W, C_TOTAL],
                                       strides=[IN_H * IN_W * C_TOTAL, IN_W * C_TOTAL, C_TOTAL, 1],
                                       block_shape=[IMAGES, 1, TILE_W, BLOCK_N])
    unused = tl.zeros((LANES, BLOCK_M), dtype=dy_ptr.dtype.element_ty)  # stacked block 3 (no filter column 3)
    acc0 = tl.zeros((4 * BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc1 = tl.zeros((4 * BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc2 = tl.zeros((4 * BLOCK_M, BLOCK_N), dtype=tl.float32)
    for unit in range(unit_begin, unit_end):
        tile_w = unit % w_tiles
        t = unit // w_tiles
        oh0 = (t % h_tiles) * ROWS
        n0 = (t // h_tiles) * IMAGES
        iw0 = tile_w * TILE_W
        held = ()
        for step in tl.static_range(ROWS + 2):
            if step < ROWS:  # output row oh0 + step, stacked: block s holds the columns iw + PAD_W − s
                col0 = dy_desc.load([n0, oh0 + step, iw0 + PAD_W, k0]).reshape(LANES, BLOCK_M)
                col1 = dy_desc.load([n0, oh0 + step, iw0 + PAD_W - 1, k0]).reshape(LANES, BLOCK_M)
                col2 = dy_desc.load([n0, oh0 + step, iw0 + PAD_W - 2, k0]).reshape(LANES, BLOCK_M)
                stacked = tl.join(tl.join(col0, col1), tl.join(col2, unused))  # [lane, k, s mod 2, s // 2]
                held = held + (tl.permute(stacked, (3, 2, 1, 0)).reshape(4 * BLOCK_M, LANES),)
            b = x_desc.load([n0, oh0 - PAD_H + step, iw0, c0]).reshape(LANES, BLOCK_N)
            acc0, acc1, acc2 = _walk_dots(step, held, b, acc0, acc1, acc2, ROWS)

    r = tl.arange(0, 4 * BLOCK_M)
    s = r // BLOCK_M
    ks = r % BLOCK_M
    cs = tl.arange(0, BLOCK_N)
    tile_ok = ((ks < GK) & (k0 + ks < K_TOTAL) & (s < 3))[:, None] & ((cs < GC) & (c0 + cs < C_TOTAL))[None, :]
    _store_walk(out_ptr, acc0, acc1, acc2, split, k0, ks, s, cs, tile_ok, K_TOTAL, KG, CG, SPLIT_K)


@triton.jit
def _channel_runs(C_TOTAL, K_TOTAL, GC, GK):
    """The channel counts as multiples of 8 (the support check guarantees they are), written so that the compiler
    can prove every channel run 16-byte aligned (run-time sizes carry no divisibility hint in the registry's
    build; see gwalk.py)."""
    return (C_TOTAL // 8) * 8, (K_TOTAL // 8) * 8, (GC // 8) * 8, (GK // 8) * 8


@triton.jit
def _split_units(split, BATCH, IMAGES, OUT_H, ROWS: tl.constexpr, IN_W, TILE_W, SPLIT_K: tl.constexpr):
    """(column tiles, row walks, first unit, end unit) of this split: the reduction units (images ×
    output-row walks × input-column tiles) in ``SPLIT_K`` contiguous ranges."""
    w_tiles = tl.cdiv(IN_W, TILE_W)
    h_tiles = tl.cdiv(OUT_H, ROWS)
    units = tl.cdiv(BATCH, IMAGES) * h_tiles * w_tiles
    per_split = tl.cdiv(units, SPLIT_K)
    unit_begin = split * per_split
    return w_tiles, h_tiles, unit_begin, tl.minimum(unit_begin + per_split, units)


@triton.jit
def _walk_dots(step: tl.constexpr, held, b, acc0, acc1, acc2, ROWS: tl.constexpr):
    """Input row ``oh0 − pad_h + step`` (``b``) against every held output row ``oh0 + i`` it meets: filter row
    ``step − i`` (0..2) of output row ``i``'s stacked gradient ``held[i]``."""
    for i in tl.static_range(ROWS):
        if step - i >= 0 and step - i < 3:
            if step - i == 0:
                acc0 = tl.dot(held[i], b, acc0)
            elif step - i == 1:
                acc1 = tl.dot(held[i], b, acc1)
            else:
                acc2 = tl.dot(held[i], b, acc2)
    return acc0, acc1, acc2


@triton.jit
def _store_walk(out_ptr, acc0, acc1, acc2, split, k0, ks, s, cs, tile_ok, K_TOTAL, KG, CG, SPLIT_K: tl.constexpr):
    """dW[g0 + k // (K/G), k % (K/G), q, s, j % (C/G)] sits at ((k0 + k)·9 + 3q + s)·C/G + j % (C/G); split-K:
    in this split's row of the fp32 workspace ``[SPLIT_K, weight elements]``."""
    if SPLIT_K > 1:
        out_ptr += split.to(tl.int64) * (K_TOTAL * 9 * CG)
    if CG % 4 == 0:
        # Written so that the compiler can prove runs of 4 channels 16-byte aligned: stores of element pairs
        # (the accumulator's layout) instead of scalars, whole 32-byte sectors per row (the scalar stores of
        # the registry's build ran at a fifth of the JIT-specialised kernel's speed where every merged channel
        # is stored: H100, c1024 7x7, 91.6 vs 21.2 us at 16 splits).
        cg4 = (CG // 4) * 4
        _store_taps(out_ptr, acc0, acc1, acc2, k0, ks, s, cs, tile_ok, KG, cg4)
    else:
        _store_taps(out_ptr, acc0, acc1, acc2, k0, ks, s, cs, tile_ok, KG, CG)


@triton.jit
def _store_taps(out_ptr, acc0, acc1, acc2, k0, ks, s, cs, tile_ok, KG, CG):
    """The three filter rows' tiles, block-diagonal entries only (merged group ks // K/G = cs // C/G): tap
    (q, s) of stacked row (s, output channel k0 + ks) and column cs at ((k0 + ks)·9 + 3q + s)·C/G + cs mod C/G."""
    mask = tile_ok & ((ks // KG)[:, None] == (cs // CG)[None, :])
    ptrs = out_ptr + (((k0 + ks) * 9 + s) * CG)[:, None] + (cs % CG)[None, :]
    tl.store(ptrs, acc0.to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(ptrs + 3 * CG, acc1.to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(ptrs + 6 * CG, acc2.to(out_ptr.dtype.element_ty), mask=mask)


class GwalkBackwardWeight:
    """The gwalk backward-weight template (X, dY → dW): pointer loads (``num_stages`` 1) or TMA boxes
    (``num_stages`` 2, 3: Triton's software pipeline over the walk's units, that many deep)."""

    direction = Direction.BACKWARD_WEIGHT
    families = frozenset({Family.GWALK})

    def programs(self, config: KernelConfig) -> dict[str, Program]:
        ptr = pointer_type(config.dtype)
        out = "*fp32" if config.split_k > 1 else ptr
        pointers = {"x_ptr": ptr, "dy_ptr": ptr, "out_ptr": out}
        if config.num_stages == 1:
            main = {"main": Program(_gwalk_bwd_weight_kernel,
                                    {"BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "BLOCK_K": config.block_k,
                                     "ROWS": config.group_m, "SPLIT_K": config.split_k},
                                    {**pointers, **{name: "i32" for name in _SIZE_PARAMS}}, config.num_warps, 1)}
        else:  # one binary per box width (the box is compiled in), never per problem
            main = {_tma_program(width): Program(
                _gwalk_tma_bwd_weight_kernel,
                {"BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "TILE_W": width,
                 "IMAGES": config.block_k // width, "ROWS": config.group_m, "SPLIT_K": config.split_k},
                {**pointers, **{name: "i32" for name in _TMA_SIZE_PARAMS}}, config.num_warps, config.num_stages)
                for width in tma_tile_widths(config.block_k)}
        return with_split_reduce(main, config)

    def workspace_elements(self, problem: ConvProblem, config: KernelConfig) -> int:
        return weight_partials_elements(problem, config)

    def before_launch(self, config: KernelConfig) -> None:
        """Every call, in the calling thread: the TMA walks write their descriptors to Triton's global scratch."""
        if config.num_stages > 1:
            ensure_scratch_allocator()

    def plan(self, problem, config, first, second, out, workspace) -> list[Launch]:
        geo = weight_walk_geometry(problem, config)
        sizes = (problem.batch, problem.in_channels, problem.out_channels, problem.c_per_group,
                 problem.k_per_group, geo["gc"], geo["gk"], *problem.input_size, *problem.output_size,
                 *problem.pad_begin)  # _TMA_SIZE_PARAMS
        if config.num_stages == 1:
            program = "main"
            sizes += (*problem.stride, *problem.dilation, geo["tile_w"], geo["images"])
        else:
            program = _tma_program(geo["tile_w"])

        def main(target) -> Launch:  # dW unsplit, the fp32 partials split
            return Launch(program, geo["grid"], (first, second, target, *sizes))

        return weight_split_plan(config, problem, main, out, workspace)


def _tma_program(width: int) -> str:
    return f"main_w{width}"
