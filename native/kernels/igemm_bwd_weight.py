"""Backward-weight convolution on tensor cores: implicit GEMM (igemm), group-merged (gmerge) and 1×1 (gemm1x1).

``dW[g, k, tap, c] = Σ_n Σ_o dY[n, o, g, k] · X[n, o·stride − pad_begin + tap·dilation, g, c]``.

GEMM mapping, per filter tap and per block of ``MERGE`` consecutive groups starting at ``g0``
(``MERGE`` = 1 except gmerge):

* rows ``m`` (GEMM M = MERGE·K/G): output channel ``g0·K/G + m``, of merged group ``m // (K/G)``;
* columns ``j`` (GEMM N = prod(filter)·MERGE·C/G): a CTA's N-tile stays inside one tap; column ``j``
  of the tap is input channel ``g0·C/G + j``, of merged group ``j // (C/G)``;
* reduction (GEMM K = N·prod(out)): output positions ``p = (n, od, oh, ow)`` in BLOCK_K steps.

``A = dY^T`` tile ``[BLOCK_M (k), BLOCK_K (p)]`` (contiguous along k), ``B = X`` tile at the
tap-shifted positions ``[BLOCK_K (p), BLOCK_N (c)]`` (contiguous along c). With gmerge the product
also forms cross-group terms (``m // (K/G) != j // (C/G)``); only the block-diagonal entries are
stored, so merged groups never mix. Because NHWGC/NHWGK keep the channels of consecutive groups
adjacent, the merged channel runs are contiguous.

The reduction loop does no division and no address product: each lane of a block carries its
position as tap-shifted input coordinates ``(i_w, i_h, i_d)`` and its X offset, moved on each step by
the digits of BLOCK_K in mixed radix ``(n, od, oh, ow)`` with one conditional carry per digit; dY's
tile is a loop-invariant offset from a base moved by BLOCK_K rows; full blocks load without a
position mask and the partial last block of all is one masked step after the loop. In the SASS of the
128×64×64 4-warp tile (sm_90) a step is 168 instructions instead of 361 (the per-lane values are
computed once per lane and passed to the load layout through shared memory, which measured faster on
an H200 than computing them in that layout at 241 instructions: session 15,
``bench/results/2026-11-26_h200_s15/``).

split_k > 1: the reduction is split into ``split_k`` contiguous ranges of BLOCK_K blocks (grid axis
2); each program writes fp32 partials to a workspace ``[split_k, weight elements]`` (GKYXC order),
and the ``reduce`` program sums the partials in a fixed order (deterministic, no atomics) and casts
to the output dtype. With split_k = 1 the main program stores dW directly.

Long reductions are summed in chunks of PROMOTE_POSITIONS positions: each chunk in its own
tensor-core accumulator, the chunks added in fp32 (tensor-core accumulation does not round to
nearest, so one accumulator over millions of positions drifts past the bf16 error limit). That costs a
second accumulator tile of registers: on tiles of 64 accumulator registers a thread or more (64×128 and
128×64 on 4 warps: 233 registers, 2 programs per SM) 16-bit kernels carry a second program, ``flat``, that
sums its split in one accumulator (155 registers, 3 per SM), and the launch runs it whenever a split covers
at most PROMOTE_POSITIONS positions — most split-K launches — and the chunked ``main`` otherwise. H200,
same binaries, same run (``bench/results/2026-11-27_h200_s18/``): ``flat`` 7–25 % faster on those tiles
(dense n32 c256 28×28 backward-weight 79.6 → 71.3 µs, G = 2 48.3 → 42.5), the same on 8-warp 128×128;
on smaller tiles, whose promotion costs no program per SM, 0–5 % slower (gmerge 64×64) — they keep ``main``.

gemm1x1 (1×1 filter, stride 1, no padding) is the plain GEMM ``dW = dY^T · X`` over N·prod(in)
positions. 2D problems run as 3D with depth 1.
Grid: axis 0 = (m, tap × n) tiles (GROUP_M-swizzled), axis 1 = group block, axis 2 = split.
"""

from __future__ import annotations

import math

import triton
import triton.language as tl

from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.kernels.base import (
    Launch,
    Program,
    cdiv,
    int_type,
    pointer_type,
    register_cap,
    tensor_core_constexprs,
)
from tiledispatch.native.kernels.igemm_fwd import aligned_channels, in_range, spatial_args
from tiledispatch.native.kernels.split_reduce import (
    weight_partials_elements,
    weight_split_plan,
    with_split_reduce,
)
from tiledispatch.native.kernels.tiles import grouped_tile
from tiledispatch.native.problem import ConvProblem, Direction, DType

_SIZE_PARAMS = ("BATCH", "GROUPS", "CG", "KG", "IN_D", "IN_H", "IN_W", "OUT_D", "OUT_H", "OUT_W",
                "F_D", "F_H", "F_W", "STR_D", "STR_H", "STR_W", "DIL_D", "DIL_H", "DIL_W",
                "PAD_D", "PAD_H", "PAD_W")

#: Positions summed in one tensor-core accumulator before it is added to the fp32 total (see the kernel).
PROMOTE_POSITIONS = 16384


@triton.jit
def _next_block(i_w, i_h, i_d, x_off, move, wrap_w, wrap_h, wrap_d):
    """Move every lane's tap-shifted input coordinates ``(i_w, i_h, i_d)`` and X offset ``x_off`` on by
    BLOCK_K output positions: add the digits of BLOCK_K (``move``: the w, h, d coordinate steps and the
    X offset step), then carry once per digit (a digit plus a step digit plus a carry stays below twice
    its radix). ``wrap_*`` per digit: (limit, radix, stride of the digit above, X delta): a coordinate
    at or past ``limit`` has wrapped, loses ``radix`` and adds one stride to the digit above."""
    step_w, step_h, step_d, step_x = move
    lim_w, span_w, up_w, x_w = wrap_w
    lim_h, span_h, up_h, x_h = wrap_h
    lim_d, span_d, x_d = wrap_d
    i_w += step_w
    i_h += step_h
    i_d += step_d
    x_off += step_x
    carry = i_w >= lim_w
    i_w = tl.where(carry, i_w - span_w, i_w)
    i_h = tl.where(carry, i_h + up_w, i_h)
    x_off = tl.where(carry, x_off + x_w, x_off)
    carry = i_h >= lim_h
    i_h = tl.where(carry, i_h - span_h, i_h)
    i_d = tl.where(carry, i_d + up_h, i_d)
    x_off = tl.where(carry, x_off + x_h, x_off)
    carry = i_d >= lim_d
    i_d = tl.where(carry, i_d - span_d, i_d)
    x_off = tl.where(carry, x_off + x_d, x_off)
    return i_w, i_h, i_d, x_off


@triton.jit
def _igemm_bwd_weight_kernel(
    x_ptr, dy_ptr, out_ptr,
    BATCH, GROUPS, CG, KG, IN_D, IN_H, IN_W, OUT_D, OUT_H, OUT_W,
    F_D, F_H, F_W, STR_D, STR_H, STR_W, DIL_D, DIL_H, DIL_W, PAD_D, PAD_H, PAD_W,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    MERGE: tl.constexpr, IS_1X1: tl.constexpr, SPLIT_K: tl.constexpr, VEC: tl.constexpr,
    INDEX64: tl.constexpr, DOT_PRECISION: tl.constexpr, PROMOTE: tl.constexpr, PROMOTE_BLOCKS: tl.constexpr,
):
    C_TOTAL, K_TOTAL, CG, KG, GC, GK = aligned_channels(GROUPS, CG, KG, MERGE, VEC)
    # GK: merged output channels, GEMM M; GC: merged input channels per tap
    taps = F_D * F_H * F_W
    P = BATCH * OUT_D * OUT_H * OUT_W  # reduction length

    # Grouped (swizzled) ordering of the (m, tap × n) tiles for L2 reuse of the operand tiles.
    pid = tl.program_id(0)
    group_block = tl.program_id(1)
    split = tl.program_id(2)
    num_pid_m = tl.cdiv(GK, BLOCK_M)
    c_tiles = tl.cdiv(GC, BLOCK_N)
    num_pid_n = taps * c_tiles
    pid_m, pid_n = grouped_tile(pid, num_pid_m, num_pid_n, GROUP_M)
    tap = pid_n // c_tiles
    pid_c = pid_n % c_tiles
    c0 = group_block * GC  # first input channel of the merged block (= g0·C/G)
    k0 = group_block * GK  # first output channel of the merged block (= g0·K/G)

    ks = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cs = pid_c * BLOCK_N + tl.arange(0, BLOCK_N)
    k_ok = (ks < GK) & (k0 + ks < K_TOTAL)
    c_ok = (cs < GC) & (c0 + cs < C_TOTAL)

    # This split's contiguous range of reduction blocks; only the last block of all can be partial,
    # so the loop runs the full ones without a position mask and a masked tail step follows.
    n_blocks = tl.cdiv(P, BLOCK_K)
    per_split = tl.cdiv(n_blocks, SPLIT_K)
    kb_begin = split * per_split
    kb_end = tl.minimum(kb_begin + per_split, n_blocks)
    n_full = P // BLOCK_K
    full_end = tl.minimum(kb_end, n_full)
    lane = tl.arange(0, BLOCK_K)
    p_begin = kb_begin * BLOCK_K
    if INDEX64:
        lane = lane.to(tl.int64)
        p_begin = p_begin.to(tl.int64)
    # A = dY^T: loop-invariant offsets from a base that moves BLOCK_K rows of dY a step.
    a_off = (k0 + ks)[:, None] + (lane * K_TOTAL)[None, :]
    a_mask = k_ok[:, None]
    a_step = BLOCK_K * K_TOTAL
    dy_base = dy_ptr + p_begin * K_TOTAL
    x_col = c0 + cs

    if IS_1X1:
        x_base = x_ptr + p_begin * C_TOTAL
        x_off = (lane * C_TOTAL)[:, None] + x_col[None, :]
        x_step = BLOCK_K * C_TOTAL
    else:
        tw = tap % F_W
        th = (tap // F_W) % F_H
        td = tap // (F_W * F_H)
        # Positions in mixed radix (n, od, oh, ow), kept as tap-shifted input coordinates and an X offset.
        # The first block's lanes are the block start's digits plus each lane's (divisions once); after
        # that every lane carries its own ([BLOCK_K, 1] loop-carried tensors), moved on by the digits of
        # BLOCK_K through ``_next_block``'s one carry per digit: no division or address product a step.
        ow = p_begin % OUT_W
        t = p_begin // OUT_W
        oh = t % OUT_H
        t = t // OUT_H
        od = t % OUT_D
        nb = t // OUT_D
        w0 = ow * STR_W + (tw * DIL_W - PAD_W)
        h0 = oh * STR_H + (th * DIL_H - PAD_H)
        d0 = od * STR_D + (td * DIL_D - PAD_D)
        x0 = (((nb * IN_D + d0) * IN_H + h0) * IN_W + w0) * C_TOTAL
        plane = IN_H * IN_W * C_TOTAL
        row = IN_W * C_TOTAL
        lw = lane % OUT_W
        t = lane // OUT_W
        lh = t % OUT_H
        t = t // OUT_H
        ld = t % OUT_D
        ln = t // OUT_D
        lane_move = (lw * STR_W, lh * STR_H, ld * STR_D,
                     ((ln * IN_D + ld * STR_D) * IN_H + lh * STR_H) * row + lw * STR_W * C_TOTAL)
        step_w = BLOCK_K % OUT_W
        s = BLOCK_K // OUT_W
        step_h = s % OUT_H
        s = s // OUT_H
        step_d = s % OUT_D
        step_n = s // OUT_D
        block_move = (step_w * STR_W, step_h * STR_H, step_d * STR_D,
                      ((step_n * IN_D + step_d * STR_D) * IN_H + step_h * STR_H) * row + step_w * STR_W * C_TOTAL)
        # A wrapped digit loses its radix (OUT·STR input units) and carries one stride into the digit above.
        wrap_w = (OUT_W * STR_W + (tw * DIL_W - PAD_W), OUT_W * STR_W, STR_H, STR_H * row - OUT_W * STR_W * C_TOTAL)
        wrap_h = (OUT_H * STR_H + (th * DIL_H - PAD_H), OUT_H * STR_H, STR_D, STR_D * plane - OUT_H * STR_H * row)
        wrap_d = (OUT_D * STR_D + (td * DIL_D - PAD_D), OUT_D * STR_D, (IN_D - OUT_D * STR_D) * plane)
        q_w, q_h, q_d, q_x = _next_block(w0, h0, d0, x0, lane_move, wrap_w, wrap_h, wrap_d)
        q_w = q_w[:, None]
        q_h = q_h[:, None]
        q_d = q_d[:, None]
        q_x = q_x[:, None]

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # Tensor-core accumulation is not round-to-nearest, so its error grows with the number of
    # blocks summed in one accumulator (measured on an H200, bf16, 23M positions in one split:
    # relative error 0.026). With PROMOTE each chunk of PROMOTE_BLOCKS blocks is summed in ``part``
    # and then added to ``acc`` with ordinary fp32 adds, which round to nearest. Without it the
    # split is one chunk in one tile: exact fp32 dots (FMAs, which do round to nearest; a second
    # accumulator would make them spill), or 16-bit splits short enough not to drift (``flat``).
    promote: tl.constexpr = PROMOTE
    chunk_blocks = PROMOTE_BLOCKS if promote else tl.maximum(full_end - kb_begin, 1)
    for chunk in tl.range(kb_begin, full_end, chunk_blocks, num_stages=1):
        if promote:
            part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        else:
            part = acc
        for _ in tl.range(chunk, tl.minimum(chunk + chunk_blocks, full_end)):
            a = tl.load(dy_base + a_off, mask=a_mask, other=0.0)
            if IS_1X1:
                b = tl.load(x_base + x_off, mask=c_ok[None, :], other=0.0)
                x_base += x_step
            else:
                x_ok = in_range(q_w, IN_W, INDEX64) & in_range(q_h, IN_H, INDEX64) & in_range(q_d, IN_D, INDEX64)
                b = tl.load(x_ptr + (q_x + x_col[None, :]), mask=x_ok & c_ok[None, :], other=0.0)
                q_w, q_h, q_d, q_x = _next_block(q_w, q_h, q_d, q_x, block_move, wrap_w, wrap_h, wrap_d)
            part = tl.dot(a, b, part, input_precision=DOT_PRECISION)
            dy_base += a_step
        if promote:
            acc += part
        else:
            acc = part
    if (kb_begin <= n_full) & (n_full < kb_end):  # the partial last block: mask the positions past P
        p_ok = lane < P - full_end * BLOCK_K
        a = tl.load(dy_base + a_off, mask=a_mask & p_ok[None, :], other=0.0)
        if IS_1X1:
            b = tl.load(x_base + x_off, mask=p_ok[:, None] & c_ok[None, :], other=0.0)
        else:
            x_ok = (p_ok[:, None] & in_range(q_w, IN_W, INDEX64) & in_range(q_h, IN_H, INDEX64)
                    & in_range(q_d, IN_D, INDEX64))
            b = tl.load(x_ptr + (q_x + x_col[None, :]), mask=x_ok & c_ok[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)

    # dW[g0 + m // (K/G), m % (K/G), tap, j % (C/G)] sits at ((g0·K/G + m)·taps + tap)·C/G + j % (C/G). On the
    # stored (block-diagonal) entries j // (C/G) = m // (K/G), so that is a row term less (m // (K/G))·C/G, plus j:
    # offsets contiguous along j, which Triton's coalescing sees (threads along the channels, whole sectors).
    # Written with ``j % (C/G)`` in the column term, the stores ran down the rows, one 4-byte store a sector
    # (Nsight Compute, H200), and the merged kernels were up to 1.38x slower (the dilation-2 layer's best
    # 50.5 -> 36.6 us, the 3D grouped one's 78.8 -> 71.3; bench/results/2026-11-28_h200_s30/store_probe).
    out_mask = k_ok[:, None] & c_ok[None, :]
    w_row = ((k0 + ks) * taps + tap) * CG
    if MERGE > 1:
        out_mask = out_mask & ((ks // KG)[:, None] == (cs // CG)[None, :])
        w_row -= (ks // KG) * CG
    if INDEX64:
        w_row = w_row.to(tl.int64)
    if SPLIT_K > 1:  # this split's slice of the fp32 workspace [SPLIT_K, weight elements]
        out_ptr += split.to(tl.int64) * (K_TOTAL * taps * CG)
    out_ptrs = out_ptr + (w_row[:, None] + cs[None, :])
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=out_mask)


def split_positions(problem: ConvProblem, config: KernelConfig) -> int:
    """Output positions the longest split sums: whole BLOCK_K blocks, as the kernel divides them."""
    positions = problem.batch * math.prod(problem.output_size)
    return cdiv(cdiv(positions, config.block_k), config.split_k) * config.block_k


#: Accumulator registers a thread (``KernelConfig.accumulator_registers``) from which a kernel carries ``flat``.
FLAT_MIN_ACCUMULATOR_REGISTERS = 64


def has_flat_program(config: KernelConfig) -> bool:
    """16-bit kernels whose chunk promotion holds a second accumulator tile of 64 registers a thread or more:
    the tiles where that tile costs programs per SM (see the module docstring)."""
    return config.dtype is not DType.FP32 and config.accumulator_registers >= FLAT_MIN_ACCUMULATOR_REGISTERS


def uses_flat_program(problem: ConvProblem, config: KernelConfig) -> bool:
    """Whether the launch runs ``flat`` (one accumulator per split): the kernel has it, and every split sums
    at most PROMOTE_POSITIONS positions, the length one tensor-core accumulator holds within the error limit."""
    return has_flat_program(config) and split_positions(problem, config) <= PROMOTE_POSITIONS


class IgemmBackwardWeight:
    direction = Direction.BACKWARD_WEIGHT
    families = frozenset({Family.IGEMM, Family.GMERGE, Family.GEMM1X1})

    def programs(self, config: KernelConfig) -> dict[str, Program]:
        ptr = pointer_type(config.dtype)
        ints = int_type(config)
        out = "*fp32" if config.split_k > 1 else ptr
        types = {"x_ptr": ptr, "dy_ptr": ptr, "out_ptr": out, **{name: ints for name in _SIZE_PARAMS}}
        constexprs = {**tensor_core_constexprs(config), "SPLIT_K": config.split_k,
                      "PROMOTE_BLOCKS": max(1, PROMOTE_POSITIONS // config.block_k)}
        exact = config.dtype is DType.FP32  # exact fp32 dots round to nearest: never chunked
        budget = register_cap(config)  # the 64×32×64 3-stage tiles: more CTAs an SM
        programs = {"main": Program(_igemm_bwd_weight_kernel, {**constexprs, "PROMOTE": not exact}, types,
                                    config.num_warps, config.num_stages, max_registers=budget)}
        if has_flat_program(config):
            programs["flat"] = Program(_igemm_bwd_weight_kernel, {**constexprs, "PROMOTE": False}, types,
                                       config.num_warps, config.num_stages, max_registers=budget)
        return with_split_reduce(programs, config)

    def workspace_elements(self, problem: ConvProblem, config: KernelConfig) -> int:
        return weight_partials_elements(problem, config)

    def plan(self, problem, config, first, second, out, workspace) -> list[Launch]:
        tiles = (cdiv(config.merge * problem.k_per_group, config.block_m) * math.prod(problem.filter_size)
                 * cdiv(config.merge * problem.c_per_group, config.block_n))
        grid = (tiles, cdiv(problem.groups, config.merge), config.split_k)
        sizes = (problem.batch, problem.groups, problem.c_per_group, problem.k_per_group, *spatial_args(problem))
        program = "flat" if uses_flat_program(problem, config) else "main"

        def main(target) -> Launch:  # dW unsplit, the fp32 partials split
            return Launch(program, grid, (first, second, target, *sizes))

        return weight_split_plan(config, problem, main, out, workspace)
