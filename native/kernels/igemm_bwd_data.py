"""Backward-data convolution on tensor cores: implicit GEMM (igemm), group-merged (gmerge) and 1×1 (gemm1x1).

``dX[n, i, g, c] = Σ_tap Σ_k dY[n, o, g, k] · W[g, k, tap, c]`` over the (o, tap) with
``i = o·stride − pad_begin + tap·dilation``.

Stride > 1 is decomposed into stride-1 sub-problems (no zero-insertion). The input positions split
into ``prod(stride)`` residue classes ``r`` (per dim ``i = r + q·stride``, ``0 ≤ r < stride``); a
program handles rows of one class only, so whether a tap contributes is uniform over the program:
per dim, tap ``t`` contributes iff ``(r + pad_begin − t·dilation) ≡ 0 (mod stride)``, i.e. the taps
``first + j·step`` with ``step = stride / gcd(stride, dilation)`` (``step`` comes from the host,
``first`` from a short scalar loop), and then ``o = q + (r + pad_begin − t·dilation) / stride``
exactly: a scalar shift of the precomputed ``q``, so the inner loop does no division per element;
the (valid tap, channel block) counters advance like an odometer, so it does no scalar division either.
Programs of a class whose rows have no valid tap (stride > dilated filter) store zeros.

GEMM mapping, per residue class and per block of ``MERGE`` consecutive groups starting at ``g0``
(``MERGE`` = 1 except gmerge):

* rows ``m`` (GEMM M = N·prod(in), split over the classes): input positions ``(n, q_d, q_h, q_w)`` of
  the class, ``i = r + q·stride``; the grid is sized for the largest class (r = 0) and masked;
* columns ``j`` (GEMM N = MERGE·C/G): input channel ``g0·C/G + j``, of merged group ``j // (C/G)``;
* reduction (GEMM K = valid taps × MERGE·K/G): one flattened loop over (valid tap, channel block);
  channel ``r`` of the merged block is output channel ``g0·K/G + r`` of merged group ``r // (K/G)``.

``dX[m, j] = Σ_tap Σ_r dY[n, o(m, tap), g0·K/G + r] · B[r, j]`` with
``B[r, j] = W[g0 + r//(K/G), r % (K/G), tap, j % (C/G)]`` where ``r // (K/G) == j // (C/G)`` and 0
elsewhere (block-diagonal: merged groups never mix); with aligned merged runs (v8) it is packed
densely first (``gmerge_pack.py``) and read with 16-byte pipelined loads. gemm1x1 (1×1 filter, stride 1, no padding) is
the plain GEMM ``dX = dY · W`` over N·prod(in) rows. 2D problems run as 3D with depth 1.

split_k > 1 (``SPLIT_K``, grid axis 2), stride 1 or not: each program's flattened loop over (valid tap,
channel block) — ``valid taps of its class × cdiv(MERGE·K/G, BLOCK_K)`` steps — is cut into ``SPLIT_K``
contiguous ranges of ``cdiv(steps, SPLIT_K)`` steps; split ``s`` starts the odometer at step
``s·per_split`` (one scalar division per counter, before the loop) and stores its fp32 partial tile to
``workspace[s, position, channel]`` (a ``[SPLIT_K, N·prod(in)·C]`` copy of dX's layout). The count of
valid taps differs between residue classes, so the ranges do too; a split whose range is empty (more
splits than steps, or a class with no valid tap) stores zeros, so every workspace row covers every dX
element. The ``reduce`` program (``split_reduce.py``, shared by every split-K family) sums the rows in a
fixed order (deterministic, no atomics) and casts to dX's dtype; with split_k = 1 the main program
stores dX directly.

Each row's bounds test is one unsigned compare per dimension (``in_range``): 201 instead of 245
instructions per step in the SASS of the 128×128×64 8-warp tile (sm_90).

Grid: axis 0 = residue class × (m, n) tiles (GROUP_M-swizzled within a class), axis 1 = group block,
axis 2 = split.
"""

from __future__ import annotations

import math

import triton
import triton.language as tl

from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.kernels import gmerge_pack
from tiledispatch.native.kernels.base import (
    Launch,
    Program,
    cdiv,
)
from tiledispatch.native.kernels.igemm_fwd import (
    aligned_channels,
    in_range,
    spatial_args,
    tensor_core_launches,
    tensor_core_programs,
)
from tiledispatch.native.kernels.split_reduce import partials_elements
from tiledispatch.native.kernels.tiles import grouped_tile
from tiledispatch.native.problem import ConvProblem, Direction

_SIZE_PARAMS = ("BATCH", "GROUPS", "CG", "KG", "IN_D", "IN_H", "IN_W", "OUT_D", "OUT_H", "OUT_W",
                "F_D", "F_H", "F_W", "STR_D", "STR_H", "STR_W", "DIL_D", "DIL_H", "DIL_W",
                "PAD_D", "PAD_H", "PAD_W", "STEP_D", "STEP_H", "STEP_W")


@triton.jit
def _valid_taps(r, pad, dil, stride, step, f):
    """First contributing tap of residue ``r`` along one dim, and how many (spaced ``step``)."""
    first = f
    for t in tl.range(0, step):
        x = r + pad - t * dil
        hit = ((x % stride) + stride) % stride == 0  # C-style % on negatives
        first = tl.where(hit & (t < first), t, first)
    count = tl.maximum((f - first + step - 1) // step, 0)
    return first, count


@triton.jit
def _igemm_bwd_data_kernel(
    dy_ptr, w_ptr, dx_ptr,
    BATCH, GROUPS, CG, KG, IN_D, IN_H, IN_W, OUT_D, OUT_H, OUT_W,
    F_D, F_H, F_W, STR_D, STR_H, STR_W, DIL_D, DIL_H, DIL_W, PAD_D, PAD_H, PAD_W,
    STEP_D, STEP_H, STEP_W,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    MERGE: tl.constexpr, IS_1X1: tl.constexpr, VEC: tl.constexpr, INDEX64: tl.constexpr,
    DOT_PRECISION: tl.constexpr, SPLIT_K: tl.constexpr,
):
    C_TOTAL, K_TOTAL, CG, KG, GC, GK = aligned_channels(GROUPS, CG, KG, MERGE, VEC)
    # GC: merged output (dX) channels, GEMM N; GK: merged reduction (dY) channels
    taps = F_D * F_H * F_W

    # Rows of the largest residue class (r = 0) size the grid; axis 0 = class × tiles.
    if IS_1X1:
        m_max = BATCH * IN_D * IN_H * IN_W
    else:
        m_max = BATCH * tl.cdiv(IN_D, STR_D) * tl.cdiv(IN_H, STR_H) * tl.cdiv(IN_W, STR_W)
    num_pid_m = tl.cdiv(m_max, BLOCK_M)
    num_pid_n = tl.cdiv(GC, BLOCK_N)
    tiles = num_pid_m * num_pid_n
    pid0 = tl.program_id(0)
    cls = pid0 // tiles
    pid = pid0 % tiles
    group_block = tl.program_id(1)

    # Grouped (swizzled) ordering of the (m, n) tiles of one class, for L2 reuse.
    pid_m, pid_n = grouped_tile(pid, num_pid_m, num_pid_n, GROUP_M)
    c0 = group_block * GC  # first dX channel of the merged block (= g0·C/G)
    k0 = group_block * GK  # first dY channel of the merged block (= g0·K/G)

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if INDEX64:
        rows = rows.to(tl.int64)
    col_ok = (cols < GC) & (c0 + cols < C_TOTAL)
    if MERGE == 1:
        col_in_group = cols  # keeps the contiguity of the channel run visible to the compiler
    else:
        col_group = cols // CG
        col_in_group = cols - col_group * CG
    red = tl.arange(0, BLOCK_K)
    k_blocks = tl.cdiv(GK, BLOCK_K)

    # Reduction channel r = kb·BLOCK_K + red: W row (g0·K/G + r) starts at (g0·K/G + r)·taps·C/G.
    w_red = (k0 + red) * (taps * CG)
    if INDEX64:
        w_red = w_red.to(tl.int64)
    w_kb_stride = BLOCK_K * taps * CG

    if IS_1X1:
        row_ok = rows < m_max
        dy_row = rows * K_TOTAL + k0
        dx_row = rows * C_TOTAL
        n_iter = k_blocks
    else:
        # This program's residue class and its row decomposition (once, outside the loop).
        r_w = cls % STR_W
        r_h = (cls // STR_W) % STR_H
        r_d = cls // (STR_W * STR_H)
        q_dn = tl.cdiv(IN_D - r_d, STR_D)
        q_hn = tl.cdiv(IN_H - r_h, STR_H)
        q_wn = tl.cdiv(IN_W - r_w, STR_W)
        m_cls = BATCH * q_dn * q_hn * q_wn
        row_ok = rows < m_cls
        q_w = rows % q_wn
        t = rows // q_wn
        q_h = t % q_hn
        t = t // q_hn
        q_d = t % q_dn
        nb = t // q_dn
        dx_row = (((nb * IN_D + r_d + q_d * STR_D) * IN_H + r_h + q_h * STR_H) * IN_W
                  + r_w + q_w * STR_W) * C_TOTAL
        # dY row of the shift-0 output position o = q; each tap adds a scalar offset.
        dy_row = (((nb * OUT_D + q_d) * OUT_H + q_h) * OUT_W + q_w) * K_TOTAL + k0
        first_d, n_d = _valid_taps(r_d, PAD_D, DIL_D, STR_D, STEP_D, F_D)
        first_h, n_h = _valid_taps(r_h, PAD_H, DIL_H, STR_H, STEP_H, F_H)
        first_w, n_w = _valid_taps(r_w, PAD_W, DIL_W, STR_W, STEP_W, F_W)
        # Output shift o - q of the first valid tap (exact division), and its change per tap step:
        # step·dilation = lcm(stride, dilation) is a multiple of stride.
        off0_d = (r_d + PAD_D - first_d * DIL_D) // STR_D
        off0_h = (r_h + PAD_H - first_h * DIL_H) // STR_H
        off0_w = (r_w + PAD_W - first_w * DIL_W) // STR_W
        doff_d = STEP_D * DIL_D // STR_D
        doff_h = STEP_H * DIL_H // STR_H
        doff_w = STEP_W * DIL_W // STR_W
        # Programs past their class's rows run no iterations (their store is fully masked).
        n_iter = n_d * n_h * n_w * k_blocks * (pid_m * BLOCK_M < m_cls).to(tl.int32)
        # Loop-carried (valid tap, channel block) counters: no scalar division per iteration.
        jd = tl.zeros((), dtype=n_iter.dtype)
        jh = tl.zeros((), dtype=n_iter.dtype)
        jw = tl.zeros((), dtype=n_iter.dtype)
    kb = tl.zeros((), dtype=tl.int32)
    if SPLIT_K > 1:
        # This split's contiguous range of the program's steps (may be empty), and the odometer at its start.
        split = tl.program_id(2)
        per_split = tl.cdiv(n_iter, SPLIT_K)
        it_begin = tl.minimum(split * per_split, n_iter)
        it_end = tl.minimum(it_begin + per_split, n_iter)
        kb = (it_begin % k_blocks).to(tl.int32)
        if not IS_1X1:
            t = it_begin // k_blocks
            jw = (t % tl.maximum(n_w, 1)).to(jw.dtype)
            t = t // tl.maximum(n_w, 1)
            jh = (t % tl.maximum(n_h, 1)).to(jh.dtype)
            jd = (t // tl.maximum(n_h, 1)).to(jd.dtype)
        n_iter = it_end - it_begin

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in tl.range(0, n_iter):
        r = kb * BLOCK_K + red
        r_ok = (r < GK) & (k0 + r < K_TOTAL)
        if IS_1X1:
            a_ptrs = dy_ptr + (dy_row[:, None] + r[None, :])
            a_mask = row_ok[:, None] & r_ok[None, :]
            w_tap = 0
            tap_index = 0
        else:
            off_d = off0_d - jd * doff_d
            off_h = off0_h - jh * doff_h
            off_w = off0_w - jw * doff_w
            o_ok = (row_ok & in_range(q_d + off_d, OUT_D, INDEX64) & in_range(q_h + off_h, OUT_H, INDEX64)
                    & in_range(q_w + off_w, OUT_W, INDEX64))
            dy_shift = ((off_d * OUT_H + off_h) * OUT_W + off_w) * K_TOTAL
            a_ptrs = dy_ptr + (dy_row[:, None] + (dy_shift + r)[None, :])
            a_mask = o_ok[:, None] & r_ok[None, :]
            tap_index = ((first_d + jd * STEP_D) * F_H + first_h + jh * STEP_H) * F_W + first_w + jw * STEP_W
            w_tap = tap_index * CG
        a = tl.load(a_ptrs, mask=a_mask, other=0.0)
        b_ptrs = w_ptr + (w_red[:, None] + (kb * w_kb_stride + w_tap + col_in_group)[None, :])
        if MERGE == 1:
            b_mask = r_ok[:, None] & col_ok[None, :]
        elif VEC == 8:  # w_ptr is the packed block-diagonal operand (gmerge_pack.py): dense 8-aligned rows
            b_ptrs = w_ptr + (((group_block * taps + tap_index) * GK + r) * GC)[:, None] + cols[None, :]
            b_mask = (r < GK)[:, None] & (cols < GC)[None, :]
        else:
            red_group = r // KG
            b_mask = r_ok[:, None] & col_ok[None, :] & (red_group[:, None] == col_group[None, :])
        b = tl.load(b_ptrs, mask=b_mask, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
        # Advance (jd, jh, jw, kb) like an odometer.
        kb += 1
        wrap = kb == k_blocks
        kb = tl.where(wrap, 0, kb)
        if not IS_1X1:
            jw += wrap.to(jw.dtype)
            wrap = jw == n_w
            jw = tl.where(wrap, 0, jw)
            jh += wrap.to(jh.dtype)
            wrap = jh == n_h
            jh = tl.where(wrap, 0, jh)
            jd += wrap.to(jd.dtype)

    if SPLIT_K > 1:  # this split's row of the fp32 workspace [SPLIT_K, dX elements]
        dx_ptr += split.to(tl.int64) * BATCH * IN_D * IN_H * IN_W * C_TOTAL
    dx_ptrs = dx_ptr + dx_row[:, None] + (c0 + cols)[None, :]
    tl.store(dx_ptrs, acc.to(dx_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


def tap_steps(problem: ConvProblem) -> tuple[int, int, int]:
    """Per dim (3D view) the spacing of contributing taps within one residue class."""
    pad = 3 - problem.ndim
    strides = (1,) * pad + tuple(problem.stride)
    dilations = (1,) * pad + tuple(problem.dilation)
    return tuple(s // math.gcd(s, d) for s, d in zip(strides, dilations))


class IgemmBackwardData:
    direction = Direction.BACKWARD_DATA
    families = frozenset({Family.IGEMM, Family.GMERGE, Family.GEMM1X1})

    def programs(self, config: KernelConfig) -> dict[str, Program]:
        return tensor_core_programs(config, _igemm_bwd_data_kernel, ("dy_ptr", "w_ptr", "dx_ptr"), _SIZE_PARAMS,
                                    backward_data=True)

    def workspace_elements(self, problem: ConvProblem, config: KernelConfig) -> int:
        """fp32 elements: the split-K partials (``split_k`` copies of dX, rounded up to 16 bytes), then
        gmerge's packed weights (v8)."""
        return partials_elements(problem.input_elements, config) + gmerge_pack.workspace_elements(problem, config)

    def plan(self, problem, config, first, second, out, workspace) -> list[Launch]:
        if config.family is Family.GEMM1X1:
            m_max, classes = problem.batch * math.prod(problem.input_size), 1
        else:
            m_max = problem.batch * math.prod(cdiv(i, s) for i, s in zip(problem.input_size, problem.stride))
            classes = math.prod(problem.stride)
        tiles = cdiv(m_max, config.block_m) * cdiv(config.merge * problem.c_per_group, config.block_n)
        grid = (classes * tiles, cdiv(problem.groups, config.merge), config.split_k)
        sizes = (problem.batch, problem.groups, problem.c_per_group, problem.k_per_group, *spatial_args(problem),
                 *tap_steps(problem))
        return tensor_core_launches(problem, config, grid, sizes, first, second, out, workspace,
                                    problem.input_elements, self.workspace_elements(problem, config))
