"""Direct (CUDA-core) grouped convolution for depthwise and small C/G: forward, backward_data and
backward_weight, 2D and 3D (2D runs as 3D with depth 1).

Notation: ``C_T = G·C/G`` and ``K_T = G·K/G`` are the total channel counts, ``k = g·K/G + kk`` a total
output channel and ``j = g·C/G + c`` a total input channel (both contiguous in memory: NHWGC/NHWGK);
``i(o, t) = o·stride − pad_begin + t·dilation`` per spatial dimension.

* forward: ``Y[n,o,k] = Σ_t Σ_{c<C/G} X[n, i(o,t), g(k)·C/G + c] · W[k, t, c]``.
  A program owns ``BLOCK_M`` flattened output positions ``(n, od, oh, ow)`` × ``BLOCK_N`` output
  channels ``k``; it loops over the taps (three nested loops, so bounds checks and row offsets are
  hoisted per dimension) and over ``c``, accumulating in fp32. Consecutive rows are consecutive
  ``ow``, so the rows read by neighbouring taps are the same cache lines (L1 reuse).
* backward_data: ``dX[n,i,j] = Σ_t Σ_{kk<K/G} dY[n, o, g(j)·K/G + kk] · W[g(j)·K/G + kk, t, c(j)]`` over
  the taps with ``o = (i + pad_begin − t·dilation) / stride`` integral and in range. Input positions
  are split into residue classes ``r = (i + pad_begin) mod stride`` (grid axis 1); inside a class
  exactly the taps with ``t·dilation ≡ r (mod stride)`` contribute, to every row alike, so the tap
  test is a scalar branch and ``o = q0 + j − (t·dilation) // stride`` needs no per-element division.
  With stride 1 there is one class and nothing is skipped. A program owns ``BLOCK_M`` positions of
  one class × ``BLOCK_N`` input channels ``j``.
* backward_weight: ``dW[k,t,c] = Σ_{n,o} dY[n,o,k] · X[n, i(o,t), g(k)·C/G + c]``.
  A program owns ``BLOCK_N`` output channels, one ``c``, a block of ``TAP_BLOCK`` consecutive taps and
  one of ``split_k`` contiguous chunks of output lines ``(n, od, oh)``; grid = (channel blocks × C/G ×
  tap blocks, split_k). Its ``BLOCK_M`` tile rows are ``(tap, line, ow)`` triples: ``TAP_BLOCK`` taps ×
  ``LINE_BLOCK`` lines × ``ROW_WIDTH`` columns, so one step reads one window of dY and X and serves all
  taps of the block from it through L1, instead of one program per tap streaming the whole chunk
  from L2 again for every tap. The fp32 tile is summed per tap once, at the end.
  :func:`bwd_weight_tiling` picks ``TAP_BLOCK`` by a small cost model (L2 re-reads vs. idle tile
  rows vs. programs to fill the GPU). With ``split_k > 1``
  each chunk writes fp32 partials to ``workspace[split]`` and the ``reduce`` program sums them in a
  fixed order (deterministic, no atomics); with ``split_k = 1`` the program writes dW itself.

Depthwise problems (C/G = K/G = 1) run a separate binary of each kernel (``DEPTHWISE``) whose input
channel is the output channel itself, so every X, Y, dX and dY access is a contiguous run of
channels the compiler can vectorise (16-byte loads with ``vec`` = 8). The general binary gathers the
group's channels instead (scalar loads); both are compiled from the config alone, and ``plan``
picks one per problem. Forward configs with ``group_m`` 2 or 4 are the depthwise-multiplier binary
(C/G = 1, K/G > 1; :mod:`~tiledispatch.native.kernels.direct_multiplier`), which tiles the groups instead
of the output channels, so its input runs are contiguous and each loaded value feeds ``group_m`` outputs.

Depthwise tap rows (configs with ``block_k`` = ``TAPS_W`` = 4 or 8; depthwise problems with a filter
at most ``TAPS_W`` wide, see support.py) unroll the columns ``tw < F_W`` of each filter row, so the
loads of a row's taps are independent and issue back to back, and each column is a uniform branch:

* forward / backward_data: the tiling above, with the weights read from a tap-major fp32 copy
  ``wt[tap, k]`` that a small first launch writes into the workspace. ``W[k, tap]`` has stride
  ``taps`` between channels, so the binaries above gather it with one scalar load, 64-bit address
  and conversion per channel and tap (≈ 2 of the 5–7 instructions per FMA in their SASS); from
  ``wt`` a thread's 8 channels are two 16-byte loads, already fp32.
* backward_weight: a program owns ``BLOCK_N`` channels, one filter row ``(td, th)`` and one split's
  chunk of output lines; its tile rows are ``(line, column)`` positions. Each step loads one dY tile
  and serves every column ``tw`` of the row from it, into ``TAPS_W`` separate fp32 accumulators
  (X shifted by ``tw·dilation`` columns, the same cache lines in L1), so an FMA costs one X load
  and conversion instead of a dY and an X load and two conversions; the per-tap sums are
  ``TAPS_W`` plain column sums at the end. Grid = (channel blocks × filter rows, split_k).

``INDEX64`` kernels take 64-bit arguments and form element offsets in 64 bits, but assume that
every single size (batch, each spatial extent, channel totals) is below 2^31, as any tensor that
fits in memory has: per-row coordinates are then computed in 32 bits from a 64-bit scalar base,
which halves the registers the row state needs.
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.kernels.base import Launch, Program, cdiv, int_type, pointer_type
from tiledispatch.native.kernels.direct_common import (  # noqa: F401  (_f32 re-exported for the other CUDA-core kernels)
    _block_origin,
    _f32,
    _line_rows,
    _next_lines,
    _row_positions,
    rows_per_pass,
)
from tiledispatch.native.kernels.direct_multiplier import _direct_fwd_multiplier_kernel, multiplier_pass_rows
from tiledispatch.native.kernels.direct_tiling import (  # noqa: F401  (re-exported: the tiling model's home)
    FILL_PROGRAMS,
    INSTRUCTIONS_PER_FMA,
    ISSUE_RATE,
    L2_BANDWIDTH,
    _row_tiling,
    bwd_weight_tiling,
)
from tiledispatch.native.kernels.igemm_fwd import spatial_args
from tiledispatch.native.kernels.split_reduce import (
    split_reduce_launch,
    weight_partials_elements,
    with_split_reduce,
)
from tiledispatch.native.problem import ConvProblem, Direction

_SIZE_PARAMS = ("BATCH", "GROUPS", "CG", "KG", "IN_D", "IN_H", "IN_W", "OUT_D", "OUT_H", "OUT_W",
                "F_D", "F_H", "F_W", "STR_D", "STR_H", "STR_W", "DIL_D", "DIL_H", "DIL_W",
                "PAD_D", "PAD_H", "PAD_W")
_BWD_WEIGHT_PARAMS = ("TAP_BLOCK", "LINE_BLOCK", "ROW_WIDTH", "LINES_PER_SPLIT")

#: Elements per program of the tap-major weight copy (forward / backward-data tap rows).
TAP_MAJOR_BLOCK = 1024


# Gather layout note. The general (non-depthwise) kernels gather each column's group channels and
# mark the channel indices ``max_contiguous(multiple_of(i, 1))``. Triton picks a load's register
# layout from the contiguity of its addresses: a gather would get one element per thread with the
# warp spread over rows, so every element would carry its own row indices, masks and weight.
# Declaring the indices contiguous gives the gather the layout of the tile's contiguous accesses
# (8 channels × a few rows per thread); divisibility 1 keeps every load scalar, so the claim can
# never become a vector load of the wrong addresses. The hint must sit in the kernel body: put on
# a helper's argument, Triton drops it.


@triton.jit
def _direct_fwd_kernel(
    x_ptr, w_ptr, y_ptr,
    BATCH, GROUPS, CG, KG, IN_D, IN_H, IN_W, OUT_D, OUT_H, OUT_W,
    F_D, F_H, F_W, STR_D, STR_H, STR_W, DIL_D, DIL_H, DIL_W, PAD_D, PAD_H, PAD_W,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PASS_M: tl.constexpr, DEPTHWISE: tl.constexpr,
    VEC: tl.constexpr, INDEX64: tl.constexpr,
):
    # Products first, in the width of the arguments (64-bit when INDEX64).
    C_TOTAL = GROUPS * CG
    K_TOTAL = GROUPS * KG
    if VEC == 8:  # lets the compiler prove 16-byte alignment of every position's channel run
        C_TOTAL = (C_TOTAL // 8) * 8
        K_TOTAL = (K_TOTAL // 8) * 8
    M = BATCH * OUT_D * OUT_H * OUT_W
    taps = F_D * F_H * F_W
    step_w = DIL_W * C_TOTAL  # element distance between neighbouring taps, per dimension
    step_h = DIL_H * IN_W * C_TOTAL
    step_d = DIL_D * IN_H * IN_W * C_TOTAL

    pid_n, row0, s_nb, s_od, s_oh, s_ow, rows_left = _block_origin(M, OUT_D, OUT_H, OUT_W, K_TOTAL, BLOCK_M, BLOCK_N,
                                                                     INDEX64)
    if INDEX64:  # every single size is < 2^31: per-row arithmetic stays 32-bit, offsets widen
        IN_D, IN_H, IN_W = tl.cast(IN_D, tl.int32), tl.cast(IN_H, tl.int32), tl.cast(IN_W, tl.int32)
        OUT_D, OUT_H, OUT_W = tl.cast(OUT_D, tl.int32), tl.cast(OUT_H, tl.int32), tl.cast(OUT_W, tl.int32)
        F_D, F_H, F_W = tl.cast(F_D, tl.int32), tl.cast(F_H, tl.int32), tl.cast(F_W, tl.int32)
        STR_D, STR_H, STR_W = tl.cast(STR_D, tl.int32), tl.cast(STR_H, tl.int32), tl.cast(STR_W, tl.int32)
        DIL_D, DIL_H, DIL_W = tl.cast(DIL_D, tl.int32), tl.cast(DIL_H, tl.int32), tl.cast(DIL_W, tl.int32)
        PAD_D, PAD_H, PAD_W = tl.cast(PAD_D, tl.int32), tl.cast(PAD_H, tl.int32), tl.cast(PAD_W, tl.int32)
        CG, KG = tl.cast(CG, tl.int32), tl.cast(KG, tl.int32)

    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < K_TOTAL
    # Weight columns past the last channel read the last channel's weights instead of being
    # masked: their results are never stored, and unmasked loads need no zero fill.
    w_col = tl.minimum(cols, K_TOTAL - 1)
    if DEPTHWISE:
        w_off = w_col * taps  # W[k, tap] (C/G = 1)
    else:
        x_ch = (cols // KG) * CG  # first input channel of each column's group
        x_ch = tl.max_contiguous(tl.multiple_of(x_ch, [1]), [BLOCK_N])  # see the gather layout note
        w_off = w_col * (taps * CG)

    # The block's rows in passes of PASS_M (see _pass_rows): a pass's per-row state must fit
    # in registers next to its accumulator.
    for sub in tl.static_range(BLOCK_M // PASS_M):
        r = sub * PASS_M + tl.arange(0, PASS_M)
        row_ok = r < rows_left
        # Decomposed once per pass; the tap loops below only add and compare.
        nb, od, oh, ow = _row_positions(r, s_nb, s_od, s_oh, s_ow, OUT_D, OUT_H, OUT_W)
        base_w = ow * STR_W - PAD_W
        base_h = oh * STR_H - PAD_H
        base_d = tl.where(row_ok, od * STR_D - PAD_D, IN_D)  # rows past M fail the depth test
        if INDEX64:
            nb = nb.to(tl.int64)
        # Offsets of tap (0, 0, 0); a tap adds a scalar, so every row keeps one offset for all
        # taps. The general binary's gathers load ``ptr + (offsets + scalar)``: with the integer
        # sum inside, the compiler cannot hoist a 64-bit address per element out of the loops
        # (twice the registers). Depthwise loads are ``(ptr + scalar) + offsets``: one hoisted
        # address per row (per 8 channels with vec 8) is cheap and saves an add per load.
        x_base = (((nb * IN_D + base_d) * IN_H + base_h) * IN_W + base_w) * C_TOTAL
        if DEPTHWISE:
            x_off = x_base[:, None] + cols[None, :]  # input channel == output channel: contiguous
        else:
            x_off = x_base[:, None] + x_ch[None, :]

        acc = tl.zeros((PASS_M, BLOCK_N), dtype=tl.float32)
        for td in tl.range(0, F_D):
            i_d = base_d + td * DIL_D
            ok_d = (i_d >= 0) & (i_d < IN_D)
            for th in tl.range(0, F_H):
                i_h = base_h + th * DIL_H
                ok_dh = ok_d & (i_h >= 0) & (i_h < IN_H)
                x_dh = td * step_d + th * step_h
                for tw in tl.range(0, F_W):
                    i_w = base_w + tw * DIL_W
                    ok = ok_dh & (i_w >= 0) & (i_w < IN_W)
                    mask = ok[:, None] & col_ok[None, :]
                    tap = (td * F_H + th) * F_W + tw
                    x_tap = x_dh + tw * step_w
                    if DEPTHWISE:
                        xv = tl.load(x_ptr + x_tap + x_off, mask=mask, other=0.0)
                        wv = tl.load(w_ptr + tap + w_off)
                        acc += _f32(xv) * _f32(wv)[None, :]
                    else:
                        w_tap = tap * CG
                        for c in tl.range(0, CG):
                            xv = tl.load(x_ptr + (x_off + (x_tap + c)), mask=mask, other=0.0)
                            wv = tl.load(w_ptr + (w_off + (w_tap + c)))
                            acc += _f32(xv) * _f32(wv)[None, :]

        # Rows recomputed rather than reusing row_ok: nothing per row stays live across the loops.
        rows = row0 + r
        y_off = (rows * K_TOTAL)[:, None] + cols[None, :]
        tl.store(y_ptr + y_off, acc.to(y_ptr.dtype.element_ty), mask=(rows < M)[:, None] & col_ok[None, :])


@triton.jit
def _weights_tap_major_kernel(w_ptr, wt_ptr, K_TOTAL, TAPS, BLOCK: tl.constexpr, FLIP: tl.constexpr):
    """``wt[tap, k] = fp32(W[k, tap])`` for depthwise W (C/G = 1): one channel vector per tap becomes
    one contiguous run (16-byte loads instead of a gather with stride ``taps``), already widened.
    With ``FLIP`` the taps are reversed, ``wt[taps − 1 − tap, k]``: reversing the linear tap index
    flips every spatial dimension of the filter (backward-data as a forward pass, see dwroll.py)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < K_TOTAL * TAPS
    k = offs // TAPS
    tap = offs - k * TAPS
    if FLIP:
        tap = TAPS - 1 - tap
    value = tl.load(w_ptr + offs, mask=ok, other=0.0)
    tl.store(wt_ptr + (tap * K_TOTAL + k), _f32(value), mask=ok)


@triton.jit
def _fwd_rows_tap(acc, x_ptr, x_dh, x_off, base_w, ok_dh, wt_ptr, w_tap, cols,
                  tw: tl.constexpr, F_W, DIL_W, IN_W, C_TOTAL):
    """acc += X shifted by filter column tw · wt[tap]; a uniform branch skips columns past F_W."""
    if tw < F_W:
        i_w = base_w + tw * DIL_W
        # 0 ≤ i_w < IN_W as one unsigned compare (a negative i_w wraps past any size < 2^31).
        ok = ok_dh & (i_w.to(tl.uint32, bitcast=True) < IN_W.to(tl.uint32))
        xv = tl.load(x_ptr + (x_dh + tw * DIL_W * C_TOTAL) + x_off, mask=ok, other=0.0)
        wv = tl.load(wt_ptr + (w_tap + tw) * C_TOTAL + cols)  # unmasked: see _rows_programs
        acc += _f32(xv) * wv[None, :]
    return acc


@triton.jit
def _direct_fwd_rows_kernel(
    x_ptr, wt_ptr, y_ptr,
    BATCH, GROUPS, CG, KG, IN_D, IN_H, IN_W, OUT_D, OUT_H, OUT_W,
    F_D, F_H, F_W, STR_D, STR_H, STR_W, DIL_D, DIL_H, DIL_W, PAD_D, PAD_H, PAD_W,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PASS_M: tl.constexpr, TAPS_W: tl.constexpr,
    VEC: tl.constexpr, INDEX64: tl.constexpr,
):
    """Depthwise forward by filter rows: ``Y[n,o,k] = Σ_{td,th} Σ_{tw<F_W} X[n, i(o,t), k] · wt[t, k]``.

    As the depthwise binary of the forward kernel (same tiling and row passes), but the filter
    columns of a row are unrolled (``F_W ≤ TAPS_W``), so the loads of a row's taps are
    independent and issue together, and the weights come from the tap-major fp32 copy ``wt``
    (one 16-byte run per 4 channels instead of one scalar load, address and conversion per
    channel and tap). C/G = K/G = 1, so C_TOTAL = K_TOTAL.
    """
    K_TOTAL = GROUPS * KG
    if VEC == 8:  # lets the compiler prove 16-byte alignment of every position's channel run
        K_TOTAL = (K_TOTAL // 8) * 8
    C_TOTAL = K_TOTAL
    M = BATCH * OUT_D * OUT_H * OUT_W
    step_h = DIL_H * IN_W * C_TOTAL
    step_d = DIL_D * IN_H * IN_W * C_TOTAL

    pid_n, row0, s_nb, s_od, s_oh, s_ow, rows_left = _block_origin(M, OUT_D, OUT_H, OUT_W, K_TOTAL, BLOCK_M, BLOCK_N,
                                                                     INDEX64)
    if INDEX64:  # every single size is < 2^31: per-row arithmetic stays 32-bit, offsets widen
        IN_D, IN_H, IN_W = tl.cast(IN_D, tl.int32), tl.cast(IN_H, tl.int32), tl.cast(IN_W, tl.int32)
        OUT_D, OUT_H, OUT_W = tl.cast(OUT_D, tl.int32), tl.cast(OUT_H, tl.int32), tl.cast(OUT_W, tl.int32)
        F_D, F_H, F_W = tl.cast(F_D, tl.int32), tl.cast(F_H, tl.int32), tl.cast(F_W, tl.int32)
        STR_D, STR_H, STR_W = tl.cast(STR_D, tl.int32), tl.cast(STR_H, tl.int32), tl.cast(STR_W, tl.int32)
        DIL_D, DIL_H, DIL_W = tl.cast(DIL_D, tl.int32), tl.cast(DIL_H, tl.int32), tl.cast(DIL_W, tl.int32)
        PAD_D, PAD_H, PAD_W = tl.cast(PAD_D, tl.int32), tl.cast(PAD_H, tl.int32), tl.cast(PAD_W, tl.int32)

    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < K_TOTAL

    for sub in tl.static_range(BLOCK_M // PASS_M):  # passes as in the forward kernel
        r = sub * PASS_M + tl.arange(0, PASS_M)
        row_ok = r < rows_left
        nb, od, oh, ow = _row_positions(r, s_nb, s_od, s_oh, s_ow, OUT_D, OUT_H, OUT_W)
        base_w = ow * STR_W - PAD_W
        base_h = oh * STR_H - PAD_H
        base_d = tl.where(row_ok, od * STR_D - PAD_D, IN_D)  # rows past M fail the depth test
        if INDEX64:
            nb = nb.to(tl.int64)
        x_base = (((nb * IN_D + base_d) * IN_H + base_h) * IN_W + base_w) * C_TOTAL
        x_off = x_base[:, None] + cols[None, :]
        col_mask = col_ok[None, :]

        acc = tl.zeros((PASS_M, BLOCK_N), dtype=tl.float32)
        for td in tl.range(0, F_D):
            i_d = base_d + td * DIL_D
            ok_d = (i_d >= 0) & (i_d < IN_D)
            for th in tl.range(0, F_H):
                i_h = base_h + th * DIL_H
                ok_dh = (ok_d & (i_h >= 0) & (i_h < IN_H))[:, None] & col_mask
                x_dh = td * step_d + th * step_h
                w_tap = (td * F_H + th) * F_W
                bw = base_w[:, None]
                acc = _fwd_rows_tap(acc, x_ptr, x_dh, x_off, bw, ok_dh, wt_ptr, w_tap, cols, 0,
                                    F_W, DIL_W, IN_W, C_TOTAL)
                acc = _fwd_rows_tap(acc, x_ptr, x_dh, x_off, bw, ok_dh, wt_ptr, w_tap, cols, 1,
                                    F_W, DIL_W, IN_W, C_TOTAL)
                acc = _fwd_rows_tap(acc, x_ptr, x_dh, x_off, bw, ok_dh, wt_ptr, w_tap, cols, 2,
                                    F_W, DIL_W, IN_W, C_TOTAL)
                acc = _fwd_rows_tap(acc, x_ptr, x_dh, x_off, bw, ok_dh, wt_ptr, w_tap, cols, 3,
                                    F_W, DIL_W, IN_W, C_TOTAL)
                if TAPS_W > 4:
                    acc = _fwd_rows_tap(acc, x_ptr, x_dh, x_off, bw, ok_dh, wt_ptr, w_tap, cols, 4,
                                        F_W, DIL_W, IN_W, C_TOTAL)
                    acc = _fwd_rows_tap(acc, x_ptr, x_dh, x_off, bw, ok_dh, wt_ptr, w_tap, cols, 5,
                                        F_W, DIL_W, IN_W, C_TOTAL)
                    acc = _fwd_rows_tap(acc, x_ptr, x_dh, x_off, bw, ok_dh, wt_ptr, w_tap, cols, 6,
                                        F_W, DIL_W, IN_W, C_TOTAL)
                    acc = _fwd_rows_tap(acc, x_ptr, x_dh, x_off, bw, ok_dh, wt_ptr, w_tap, cols, 7,
                                        F_W, DIL_W, IN_W, C_TOTAL)

        rows = row0 + r
        y_off = (rows * K_TOTAL)[:, None] + cols[None, :]
        tl.store(y_ptr + y_off, acc.to(y_ptr.dtype.element_ty), mask=(rows < M)[:, None] & col_ok[None, :])


@triton.jit
def _direct_bwd_data_kernel(
    dy_ptr, w_ptr, dx_ptr,
    BATCH, GROUPS, CG, KG, IN_D, IN_H, IN_W, OUT_D, OUT_H, OUT_W,
    F_D, F_H, F_W, STR_D, STR_H, STR_W, DIL_D, DIL_H, DIL_W, PAD_D, PAD_H, PAD_W,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PASS_M: tl.constexpr, DEPTHWISE: tl.constexpr,
    VEC: tl.constexpr, INDEX64: tl.constexpr,
):
    C_TOTAL = GROUPS * CG
    K_TOTAL = GROUPS * KG
    if VEC == 8:
        C_TOTAL = (C_TOTAL // 8) * 8
        K_TOTAL = (K_TOTAL // 8) * 8
    taps = F_D * F_H * F_W
    # Every class is tiled as if it had the largest class's extent; the excess rows are masked.
    cnt_w = tl.cdiv(IN_W, STR_W)
    cnt_h = tl.cdiv(IN_H, STR_H)
    cnt_d = tl.cdiv(IN_D, STR_D)
    M = BATCH * cnt_d * cnt_h * cnt_w

    pid_n, row0, s_nb, s_jd, s_jh, s_jw, rows_left = _block_origin(M, cnt_d, cnt_h, cnt_w, C_TOTAL, BLOCK_M, BLOCK_N,
                                                                     INDEX64)
    if INDEX64:  # every single size is < 2^31: per-row arithmetic stays 32-bit, offsets widen
        cnt_w, cnt_h, cnt_d = cnt_w.to(tl.int32), cnt_h.to(tl.int32), cnt_d.to(tl.int32)
        IN_D, IN_H, IN_W = tl.cast(IN_D, tl.int32), tl.cast(IN_H, tl.int32), tl.cast(IN_W, tl.int32)
        OUT_D, OUT_H, OUT_W = tl.cast(OUT_D, tl.int32), tl.cast(OUT_H, tl.int32), tl.cast(OUT_W, tl.int32)
        F_D, F_H, F_W = tl.cast(F_D, tl.int32), tl.cast(F_H, tl.int32), tl.cast(F_W, tl.int32)
        STR_D, STR_H, STR_W = tl.cast(STR_D, tl.int32), tl.cast(STR_H, tl.int32), tl.cast(STR_W, tl.int32)
        DIL_D, DIL_H, DIL_W = tl.cast(DIL_D, tl.int32), tl.cast(DIL_H, tl.int32), tl.cast(DIL_W, tl.int32)
        PAD_D, PAD_H, PAD_W = tl.cast(PAD_D, tl.int32), tl.cast(PAD_H, tl.int32), tl.cast(PAD_W, tl.int32)
        CG, KG = tl.cast(CG, tl.int32), tl.cast(KG, tl.int32)

    # Residue class of this program: (i + pad) ≡ r (mod stride) per dimension. first = the
    # smallest input index of the class, q0 = (first + pad − r) / stride ≥ 0; all non-negative,
    # so truncating division is exact.
    cls = tl.program_id(1)
    r_w = cls % STR_W
    r_h = (cls // STR_W) % STR_H
    r_d = cls // (STR_W * STR_H)
    first_w = (r_w + STR_W - PAD_W % STR_W) % STR_W
    first_h = (r_h + STR_H - PAD_H % STR_H) % STR_H
    first_d = (r_d + STR_D - PAD_D % STR_D) % STR_D

    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < C_TOTAL
    # Weight columns past the last channel read the last channel's weights instead of being
    # masked: their results are never stored, and unmasked loads need no zero fill.
    w_col = tl.minimum(cols, C_TOTAL - 1)
    if DEPTHWISE:
        w_off = w_col * taps  # W[j, tap] (K/G = C/G = 1)
    else:
        grp = cols // CG
        dy_ch = grp * KG  # first dY channel of each column's group
        dy_ch = tl.max_contiguous(tl.multiple_of(dy_ch, [1]), [BLOCK_N])  # see the gather layout note
        w_grp = w_col // CG
        w_off = (w_grp * KG * taps) * CG + (w_col - w_grp * CG)  # W[g·K/G, 0, tap 0, c]
    kk_step = taps * CG  # element distance between W[g, kk] and W[g, kk + 1]

    for sub in tl.static_range(BLOCK_M // PASS_M):  # passes as in the forward kernel
        r = sub * PASS_M + tl.arange(0, PASS_M)
        nb, jd, jh, jw = _row_positions(r, s_nb, s_jd, s_jh, s_jw, cnt_d, cnt_h, cnt_w)
        i_w = first_w + jw * STR_W
        i_h = first_h + jh * STR_H
        i_d = first_d + jd * STR_D
        row_ok = (r < rows_left) & (i_w < IN_W) & (i_h < IN_H) & (i_d < IN_D)
        # o = q − a(tap) with q = q0 + j and a = tap·dilation // stride for the taps of this class.
        q_w = (first_w + PAD_W - r_w) // STR_W + jw
        q_h = (first_h + PAD_H - r_h) // STR_H + jh
        q_d = tl.where(row_ok, (first_d + PAD_D - r_d) // STR_D + jd, -1)  # masked rows fail o_d >= 0
        if INDEX64:
            nb = nb.to(tl.int64)
        # Computed now so that the input coordinates are dead during the tap loops.
        dx_off = ((((nb * IN_D + i_d) * IN_H + i_h) * IN_W + i_w) * C_TOTAL)[:, None] + cols[None, :]
        # dY offsets of a = (0, 0, 0); each tap subtracts a scalar (address forms as in the forward kernel).
        y_base = (((nb * OUT_D + q_d) * OUT_H + q_h) * OUT_W + q_w) * K_TOTAL
        if DEPTHWISE:
            dy_off = y_base[:, None] + cols[None, :]
        else:
            dy_off = y_base[:, None] + dy_ch[None, :]

        acc = tl.zeros((PASS_M, BLOCK_N), dtype=tl.float32)
        for td in tl.range(0, F_D):
            if (td * DIL_D) % STR_D == r_d:  # scalar: the same for every row of the class
                a_d = (td * DIL_D) // STR_D
                o_d = q_d - a_d
                ok_d = (o_d >= 0) & (o_d < OUT_D)
                for th in tl.range(0, F_H):
                    if (th * DIL_H) % STR_H == r_h:
                        a_h = (th * DIL_H) // STR_H
                        o_h = q_h - a_h
                        ok_dh = ok_d & (o_h >= 0) & (o_h < OUT_H)
                        for tw in tl.range(0, F_W):
                            if (tw * DIL_W) % STR_W == r_w:
                                a_w = (tw * DIL_W) // STR_W
                                o_w = q_w - a_w
                                ok = ok_dh & (o_w >= 0) & (o_w < OUT_W)
                                mask = ok[:, None] & col_ok[None, :]
                                tap = (td * F_H + th) * F_W + tw
                                dy_tap = -((a_d * OUT_H + a_h) * OUT_W + a_w) * K_TOTAL
                                if DEPTHWISE:
                                    dyv = tl.load(dy_ptr + dy_tap + dy_off, mask=mask, other=0.0)
                                    wv = tl.load(w_ptr + tap + w_off)
                                    acc += _f32(dyv) * _f32(wv)[None, :]
                                else:
                                    w_tap = tap * CG
                                    for kk in tl.range(0, KG):
                                        dyv = tl.load(dy_ptr + (dy_off + (dy_tap + kk)), mask=mask, other=0.0)
                                        wv = tl.load(w_ptr + (w_off + (w_tap + kk * kk_step)))
                                        acc += _f32(dyv) * _f32(wv)[None, :]

        tl.store(dx_ptr + dx_off, acc.to(dx_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


@triton.jit
def _bwd_data_rows_tap(acc, a_w, dy_ptr, dy_dh, dy_off, q_w, ok_dh, wt_ptr, w_tap, cols, use_bits, a_step,
                       tw: tl.constexpr, OUT_W, C_TOTAL):
    """For filter column tw, if it is in the filter and in this residue class (bit tw of
    ``use_bits``): acc += dY at o_w = q_w − a_w · wt[tap], then a_w moves on to the class's next
    column. The class's columns are evenly spaced, so a_w = tw·dilation // stride grows by a fixed
    ``a_step``: no division per tap (a per-column table of shifts would spill)."""
    if ((use_bits >> tw) & 1) != 0:
        o_w = q_w - a_w
        # 0 ≤ o_w < OUT_W as one unsigned compare (a negative o_w wraps past any size < 2^31).
        ok = ok_dh & (o_w.to(tl.uint32, bitcast=True) < OUT_W.to(tl.uint32))
        dyv = tl.load(dy_ptr + (dy_dh - a_w * C_TOTAL) + dy_off, mask=ok, other=0.0)
        wv = tl.load(wt_ptr + (w_tap + tw) * C_TOTAL + cols)  # unmasked: see _tap_major_elements
        acc += _f32(dyv) * wv[None, :]
        a_w += a_step
    return acc, a_w


@triton.jit
def _direct_bwd_data_rows_kernel(
    dy_ptr, wt_ptr, dx_ptr,
    BATCH, GROUPS, CG, KG, IN_D, IN_H, IN_W, OUT_D, OUT_H, OUT_W,
    F_D, F_H, F_W, STR_D, STR_H, STR_W, DIL_D, DIL_H, DIL_W, PAD_D, PAD_H, PAD_W,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PASS_M: tl.constexpr, TAPS_W: tl.constexpr,
    VEC: tl.constexpr, INDEX64: tl.constexpr,
):
    """Depthwise backward-data by filter rows: ``dX[n,i,j] = Σ_t dY[n, o(i,t), j] · wt[t, j]`` over
    the taps with ``o = (i + pad_begin − t·dilation) / stride`` integral and in range.

    As the depthwise binary of the backward-data kernel (residue classes on grid axis 1, same
    tiling and row passes), with the filter columns of a row unrolled (``F_W ≤ TAPS_W``) and the
    weights read from the tap-major fp32 copy ``wt`` (see :func:`_direct_fwd_rows_kernel`).
    """
    C_TOTAL = GROUPS * CG
    if VEC == 8:
        C_TOTAL = (C_TOTAL // 8) * 8
    cnt_w = tl.cdiv(IN_W, STR_W)
    cnt_h = tl.cdiv(IN_H, STR_H)
    cnt_d = tl.cdiv(IN_D, STR_D)
    M = BATCH * cnt_d * cnt_h * cnt_w

    pid_n, row0, s_nb, s_jd, s_jh, s_jw, rows_left = _block_origin(M, cnt_d, cnt_h, cnt_w, C_TOTAL, BLOCK_M, BLOCK_N,
                                                                     INDEX64)
    if INDEX64:  # every single size is < 2^31: per-row arithmetic stays 32-bit, offsets widen
        cnt_w, cnt_h, cnt_d = cnt_w.to(tl.int32), cnt_h.to(tl.int32), cnt_d.to(tl.int32)
        IN_D, IN_H, IN_W = tl.cast(IN_D, tl.int32), tl.cast(IN_H, tl.int32), tl.cast(IN_W, tl.int32)
        OUT_D, OUT_H, OUT_W = tl.cast(OUT_D, tl.int32), tl.cast(OUT_H, tl.int32), tl.cast(OUT_W, tl.int32)
        F_D, F_H, F_W = tl.cast(F_D, tl.int32), tl.cast(F_H, tl.int32), tl.cast(F_W, tl.int32)
        STR_D, STR_H, STR_W = tl.cast(STR_D, tl.int32), tl.cast(STR_H, tl.int32), tl.cast(STR_W, tl.int32)
        DIL_D, DIL_H, DIL_W = tl.cast(DIL_D, tl.int32), tl.cast(DIL_H, tl.int32), tl.cast(DIL_W, tl.int32)
        PAD_D, PAD_H, PAD_W = tl.cast(PAD_D, tl.int32), tl.cast(PAD_H, tl.int32), tl.cast(PAD_W, tl.int32)

    cls = tl.program_id(1)
    r_w = cls % STR_W
    r_h = (cls // STR_W) % STR_H
    r_d = cls // (STR_W * STR_H)
    first_w = (r_w + STR_W - PAD_W % STR_W) % STR_W
    first_h = (r_h + STR_H - PAD_H % STR_H) % STR_H
    first_d = (r_d + STR_D - PAD_D % STR_D) % STR_D

    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < C_TOTAL
    # Filter columns of this residue class (bit mask), the dY column shift a_w = tw·dilation //
    # stride of the first and its step to the next, once per program.
    use_bits = r_w * 0
    a_first = r_w * 0
    a_second = r_w * 0
    found = r_w * 0
    for tw in tl.static_range(TAPS_W):
        valid = (tw < F_W) & ((tw * DIL_W) % STR_W == r_w)
        shift = (tw * DIL_W) // STR_W
        a_second = tl.where(valid & (found == 1), shift, a_second)
        a_first = tl.where(valid & (found == 0), shift, a_first)
        found += valid.to(found.dtype)
        use_bits = use_bits | (valid.to(found.dtype) << tw)
    a_step = a_second - a_first

    for sub in tl.static_range(BLOCK_M // PASS_M):  # passes as in the forward kernel
        r = sub * PASS_M + tl.arange(0, PASS_M)
        nb, jd, jh, jw = _row_positions(r, s_nb, s_jd, s_jh, s_jw, cnt_d, cnt_h, cnt_w)
        i_w = first_w + jw * STR_W
        i_h = first_h + jh * STR_H
        i_d = first_d + jd * STR_D
        row_ok = (r < rows_left) & (i_w < IN_W) & (i_h < IN_H) & (i_d < IN_D)
        # Shifted by the class's first column shift, so the tap chain's a_w starts at 0 (one
        # register less across the loops: the 8-column binaries spilled one without it).
        q_w = (first_w + PAD_W - r_w) // STR_W + jw - a_first
        q_h = (first_h + PAD_H - r_h) // STR_H + jh
        q_d = tl.where(row_ok, (first_d + PAD_D - r_d) // STR_D + jd, -1)  # masked rows fail o_d >= 0
        if INDEX64:
            nb = nb.to(tl.int64)
        dx_off = ((((nb * IN_D + i_d) * IN_H + i_h) * IN_W + i_w) * C_TOTAL)[:, None] + cols[None, :]
        y_base = (((nb * OUT_D + q_d) * OUT_H + q_h) * OUT_W + q_w) * C_TOTAL
        dy_off = y_base[:, None] + cols[None, :]
        col_mask = col_ok[None, :]
        qw = q_w[:, None]

        acc = tl.zeros((PASS_M, BLOCK_N), dtype=tl.float32)
        for td in tl.range(0, F_D):
            if (td * DIL_D) % STR_D == r_d:
                a_d = (td * DIL_D) // STR_D
                o_d = q_d - a_d
                ok_d = (o_d >= 0) & (o_d < OUT_D)
                for th in tl.range(0, F_H):
                    if (th * DIL_H) % STR_H == r_h:
                        a_h = (th * DIL_H) // STR_H
                        o_h = q_h - a_h
                        ok_dh = (ok_d & (o_h >= 0) & (o_h < OUT_H))[:, None] & col_mask
                        dy_dh = -((a_d * OUT_H + a_h) * OUT_W) * C_TOTAL
                        w_tap = (td * F_H + th) * F_W
                        a_w = a_step * 0
                        acc, a_w = _bwd_data_rows_tap(acc, a_w, dy_ptr, dy_dh, dy_off, qw, ok_dh, wt_ptr, w_tap,
                                                      cols, use_bits, a_step, 0, OUT_W, C_TOTAL)
                        acc, a_w = _bwd_data_rows_tap(acc, a_w, dy_ptr, dy_dh, dy_off, qw, ok_dh, wt_ptr, w_tap,
                                                      cols, use_bits, a_step, 1, OUT_W, C_TOTAL)
                        acc, a_w = _bwd_data_rows_tap(acc, a_w, dy_ptr, dy_dh, dy_off, qw, ok_dh, wt_ptr, w_tap,
                                                      cols, use_bits, a_step, 2, OUT_W, C_TOTAL)
                        acc, a_w = _bwd_data_rows_tap(acc, a_w, dy_ptr, dy_dh, dy_off, qw, ok_dh, wt_ptr, w_tap,
                                                      cols, use_bits, a_step, 3, OUT_W, C_TOTAL)
                        if TAPS_W > 4:
                            acc, a_w = _bwd_data_rows_tap(acc, a_w, dy_ptr, dy_dh, dy_off, qw, ok_dh, wt_ptr, w_tap,
                                                          cols, use_bits, a_step, 4, OUT_W, C_TOTAL)
                            acc, a_w = _bwd_data_rows_tap(acc, a_w, dy_ptr, dy_dh, dy_off, qw, ok_dh, wt_ptr, w_tap,
                                                          cols, use_bits, a_step, 5, OUT_W, C_TOTAL)
                            acc, a_w = _bwd_data_rows_tap(acc, a_w, dy_ptr, dy_dh, dy_off, qw, ok_dh, wt_ptr, w_tap,
                                                          cols, use_bits, a_step, 6, OUT_W, C_TOTAL)
                            acc, a_w = _bwd_data_rows_tap(acc, a_w, dy_ptr, dy_dh, dy_off, qw, ok_dh, wt_ptr, w_tap,
                                                          cols, use_bits, a_step, 7, OUT_W, C_TOTAL)

        tl.store(dx_ptr + dx_off, acc.to(dx_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


@triton.jit
def _direct_bwd_weight_kernel(
    x_ptr, dy_ptr, out_ptr,
    BATCH, GROUPS, CG, KG, IN_D, IN_H, IN_W, OUT_D, OUT_H, OUT_W,
    F_D, F_H, F_W, STR_D, STR_H, STR_W, DIL_D, DIL_H, DIL_W, PAD_D, PAD_H, PAD_W,
    TAP_BLOCK, LINE_BLOCK, ROW_WIDTH, LINES_PER_SPLIT,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr, DEPTHWISE: tl.constexpr,
    VEC: tl.constexpr, INDEX64: tl.constexpr,
):
    C_TOTAL = GROUPS * CG
    K_TOTAL = GROUPS * KG
    if VEC == 8:
        C_TOTAL = (C_TOTAL // 8) * 8
        K_TOTAL = (K_TOTAL // 8) * 8
    taps = F_D * F_H * F_W
    weight_elements = K_TOTAL * taps * CG
    lines = BATCH * OUT_D * OUT_H
    split = tl.program_id(1)
    line_begin = split * LINES_PER_SPLIT
    line_end = tl.minimum(line_begin + LINES_PER_SPLIT, lines)
    # The step's first line (n0, od0, oh0) is tracked in scalars; a row's line lies lb lines on.
    oh0 = line_begin % OUT_H
    od0 = (line_begin // OUT_H) % OUT_D
    nb0 = line_begin // (OUT_H * OUT_D)
    if INDEX64:  # every single size is < 2^31: per-row arithmetic stays 32-bit, offsets widen
        oh0, od0, nb0 = oh0.to(tl.int32), od0.to(tl.int32), nb0.to(tl.int32)
        TAP_BLOCK, LINE_BLOCK = tl.cast(TAP_BLOCK, tl.int32), tl.cast(LINE_BLOCK, tl.int32)
        ROW_WIDTH = tl.cast(ROW_WIDTH, tl.int32)
        IN_D, IN_H, IN_W = tl.cast(IN_D, tl.int32), tl.cast(IN_H, tl.int32), tl.cast(IN_W, tl.int32)
        OUT_D, OUT_H, OUT_W = tl.cast(OUT_D, tl.int32), tl.cast(OUT_H, tl.int32), tl.cast(OUT_W, tl.int32)
        F_D, F_H, F_W = tl.cast(F_D, tl.int32), tl.cast(F_H, tl.int32), tl.cast(F_W, tl.int32)
        STR_D, STR_H, STR_W = tl.cast(STR_D, tl.int32), tl.cast(STR_H, tl.int32), tl.cast(STR_W, tl.int32)
        DIL_D, DIL_H, DIL_W = tl.cast(DIL_D, tl.int32), tl.cast(DIL_H, tl.int32), tl.cast(DIL_W, tl.int32)
        PAD_D, PAD_H, PAD_W = tl.cast(PAD_D, tl.int32), tl.cast(PAD_H, tl.int32), tl.cast(PAD_W, tl.int32)
        CG, KG = tl.cast(CG, tl.int32), tl.cast(KG, tl.int32)

    # Axis 0: (channel block, c, tap block) with the tap block fastest, so the programs that read
    # the same dY window run together; axis 1: the split, i.e. the chunk of output lines.
    pid = tl.program_id(0)
    num_tb = tl.cdiv(F_D * F_H * F_W, TAP_BLOCK)
    pid_tb = pid % num_tb
    rest = pid // num_tb
    c = rest % CG
    pid_n = rest // CG
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < K_TOTAL
    if DEPTHWISE:
        x_cols = cols
    else:
        x_cols = (cols // KG) * CG + c
        x_cols = tl.max_contiguous(tl.multiple_of(x_cols, [1]), [BLOCK_N])  # see the gather layout note

    # Tile row r = (tap_local, line_local, column), decomposed once per program.
    r = tl.arange(0, BLOCK_M)
    step = LINE_BLOCK * ROW_WIDTH
    tap_local = r // step
    p = r - tap_local * step
    lb = p // ROW_WIDTH
    wb = p - lb * ROW_WIDTH
    tap = pid_tb * TAP_BLOCK + tap_local
    tap_ok = (tap_local < TAP_BLOCK) & (tap < F_D * F_H * F_W)
    tw = tap % F_W
    t = tap // F_W
    th = t % F_H
    td = t // F_H
    off_h = th * DIL_H - PAD_H
    off_d = tl.where(tap_ok, td * DIL_D - PAD_D, IN_D)  # rows past the tap block fail the depth test
    w_first = wb * STR_W + tw * DIL_W - PAD_W  # input column of a line's first step
    ow_step = ROW_WIDTH * STR_W

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for line0 in tl.range(line_begin, line_end, LINE_BLOCK):
        nb, i_d, i_h, ok_line = _line_rows(line0, line_end, oh0, od0, nb0, lb, LINE_BLOCK, OUT_D, OUT_H, STR_D, STR_H,
                                           off_d, off_h, IN_D, IN_H, INDEX64)
        # Offsets of the line's first step; each step adds a scalar.
        x_off = ((((nb * IN_D + i_d) * IN_H + i_h) * IN_W + w_first) * C_TOTAL)[:, None] + x_cols[None, :]
        dy_off = ((line0 * OUT_W + (lb * OUT_W + wb)) * K_TOTAL)[:, None] + cols[None, :]
        ow = wb
        i_w = w_first
        x_step = 0 * C_TOTAL  # in the offsets' integer width
        dy_step = 0 * K_TOTAL
        for _ow0 in tl.range(0, OUT_W, ROW_WIDTH):
            ok = ok_line & (ow < OUT_W) & (i_w >= 0) & (i_w < IN_W)
            mask = ok[:, None] & col_ok[None, :]  # dY too: a zero X term contributes nothing
            if DEPTHWISE:  # address forms as in the forward kernel
                dyv = tl.load(dy_ptr + dy_step + dy_off, mask=mask, other=0.0)
                xv = tl.load(x_ptr + x_step + x_off, mask=mask, other=0.0)
            else:
                dyv = tl.load(dy_ptr + (dy_off + dy_step), mask=mask, other=0.0)
                xv = tl.load(x_ptr + (x_off + x_step), mask=mask, other=0.0)
            acc += _f32(dyv) * _f32(xv)
            ow += ROW_WIDTH
            i_w += ow_step
            dy_step += ROW_WIDTH * K_TOTAL
            x_step += ow_step * C_TOTAL
        oh0, od0, nb0 = _next_lines(oh0, od0, nb0, LINE_BLOCK, OUT_D, OUT_H)

    # dW[k, tap, c] at (k·taps + tap)·C/G + c; split-K partials go to workspace[split] in the
    # same layout (64-bit split offset: split_k × weight elements may pass 2^31).
    out_ptrs = out_ptr + split.to(tl.int64) * weight_elements + (cols * (taps * CG) + c)
    # A tap's rows are spread over the tile, so its sum is a masked reduction; it runs once per
    # program, after the whole chunk.
    for tb in tl.range(0, TAP_BLOCK):
        tap_out = pid_tb * TAP_BLOCK + tb
        value = tl.sum(tl.where((tap_local == tb)[:, None], acc, 0.0), axis=0)
        tl.store(out_ptrs + tap_out * CG, value.to(out_ptr.dtype.element_ty), mask=col_ok & (tap_out < taps))


@triton.jit
def _rows_tap(acc, dyv, x_ptr, x_at, x_off, i_w0, ok, tw: tl.constexpr, F_W, DIL_W, IN_W, C_TOTAL):
    """acc += dY · X shifted by filter column tw (skipped, a uniform branch, past the filter)."""
    if tw < F_W:
        i_w = i_w0 + tw * DIL_W
        # 0 ≤ i_w < IN_W as one unsigned compare (a negative i_w wraps past any size < 2^31).
        x_ok = ok & (i_w.to(tl.uint32, bitcast=True) < IN_W.to(tl.uint32))
        xv = tl.load(x_ptr + (x_at + tw * DIL_W * C_TOTAL) + x_off, mask=x_ok, other=0.0)
        acc += dyv * _f32(xv)
    return acc


@triton.jit
def _direct_bwd_weight_rows_kernel(
    x_ptr, dy_ptr, out_ptr,
    BATCH, GROUPS, CG, KG, IN_D, IN_H, IN_W, OUT_D, OUT_H, OUT_W,
    F_D, F_H, F_W, STR_D, STR_H, STR_W, DIL_D, DIL_H, DIL_W, PAD_D, PAD_H, PAD_W,
    TAP_BLOCK, LINE_BLOCK, ROW_WIDTH, LINES_PER_SPLIT,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TAPS_W: tl.constexpr, SPLIT_K: tl.constexpr,
    VEC: tl.constexpr, INDEX64: tl.constexpr,
):
    """Depthwise backward-weight by filter rows: ``dW[k, (td, th, tw)] = Σ_{n,o} dY[n,o,k] · X[n, i(o,t), k]``.

    A program owns ``BLOCK_N`` channels, one filter row ``(td, th)`` and one split's chunk of output
    lines; its ``BLOCK_M`` tile rows are ``(line, column)`` pairs (``LINE_BLOCK`` × ``ROW_WIDTH``).
    Each step loads a dY tile once and serves all ``F_W ≤ TAPS_W`` taps of the row from it: tap
    ``tw`` reads the X tile shifted by ``tw·dilation`` columns (the same cache lines, L1) into its
    own fp32 accumulator. Per FMA that is one X load/convert (the tap-block program loads and
    converts dY and X for every FMA), and the per-tap sums run once per program over plain tiles.
    ``TAP_BLOCK`` is unused (kept so the parameters match the tap-block program).
    """
    C_TOTAL = GROUPS * CG
    K_TOTAL = GROUPS * KG
    if VEC == 8:
        C_TOTAL = (C_TOTAL // 8) * 8
        K_TOTAL = (K_TOTAL // 8) * 8
    taps = F_D * F_H * F_W
    weight_elements = K_TOTAL * taps
    lines = BATCH * OUT_D * OUT_H
    split = tl.program_id(1)
    line_begin = split * LINES_PER_SPLIT
    line_end = tl.minimum(line_begin + LINES_PER_SPLIT, lines)
    oh0 = line_begin % OUT_H
    od0 = (line_begin // OUT_H) % OUT_D
    nb0 = line_begin // (OUT_H * OUT_D)
    if INDEX64:  # every single size is < 2^31: per-row arithmetic stays 32-bit, offsets widen
        oh0, od0, nb0 = oh0.to(tl.int32), od0.to(tl.int32), nb0.to(tl.int32)
        LINE_BLOCK, ROW_WIDTH = tl.cast(LINE_BLOCK, tl.int32), tl.cast(ROW_WIDTH, tl.int32)
        IN_D, IN_H, IN_W = tl.cast(IN_D, tl.int32), tl.cast(IN_H, tl.int32), tl.cast(IN_W, tl.int32)
        OUT_D, OUT_H, OUT_W = tl.cast(OUT_D, tl.int32), tl.cast(OUT_H, tl.int32), tl.cast(OUT_W, tl.int32)
        F_D, F_H, F_W = tl.cast(F_D, tl.int32), tl.cast(F_H, tl.int32), tl.cast(F_W, tl.int32)
        STR_D, STR_H, STR_W = tl.cast(STR_D, tl.int32), tl.cast(STR_H, tl.int32), tl.cast(STR_W, tl.int32)
        DIL_D, DIL_H, DIL_W = tl.cast(DIL_D, tl.int32), tl.cast(DIL_H, tl.int32), tl.cast(DIL_W, tl.int32)
        PAD_D, PAD_H, PAD_W = tl.cast(PAD_D, tl.int32), tl.cast(PAD_H, tl.int32), tl.cast(PAD_W, tl.int32)

    # Axis 0: (channel block, filter row) with the row fastest, so the programs that read the
    # same dY lines run together; axis 1: the split.
    pid = tl.program_id(0)
    frows = F_D * F_H
    frow = pid % frows
    pid_n = pid // frows
    th = frow % F_H
    td = frow // F_H
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < K_TOTAL

    r = tl.arange(0, BLOCK_M)
    lb = r // ROW_WIDTH
    wb = r - lb * ROW_WIDTH
    off_h = th * DIL_H - PAD_H
    off_d = td * DIL_D - PAD_D
    w_first = wb * STR_W - PAD_W  # input column of tap 0 at a line's first step
    ow_step = ROW_WIDTH * STR_W

    acc0 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc1 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc3 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if TAPS_W > 4:
        acc4 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc5 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc6 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc7 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for line0 in tl.range(line_begin, line_end, LINE_BLOCK):
        nb, i_d, i_h, ok_line = _line_rows(line0, line_end, oh0, od0, nb0, lb, LINE_BLOCK, OUT_D, OUT_H, STR_D, STR_H,
                                           off_d, off_h, IN_D, IN_H, INDEX64)
        x_off = ((((nb * IN_D + i_d) * IN_H + i_h) * IN_W + w_first) * C_TOTAL)[:, None] + cols[None, :]
        dy_off = ((line0 * OUT_W + (lb * OUT_W + wb)) * K_TOTAL)[:, None] + cols[None, :]
        ow = wb
        i_w0 = w_first
        x_at = 0 * C_TOTAL  # in the offsets' integer width
        dy_at = 0 * K_TOTAL
        for _ow0 in tl.range(0, OUT_W, ROW_WIDTH):
            ok = (ok_line & (ow < OUT_W))[:, None] & col_ok[None, :]
            # dY zero where masked, so the taps need only X's own bounds in their masks.
            dyv = _f32(tl.load(dy_ptr + dy_at + dy_off, mask=ok, other=0.0))
            acc0 = _rows_tap(acc0, dyv, x_ptr, x_at, x_off, i_w0[:, None], ok, 0, F_W, DIL_W, IN_W, C_TOTAL)
            acc1 = _rows_tap(acc1, dyv, x_ptr, x_at, x_off, i_w0[:, None], ok, 1, F_W, DIL_W, IN_W, C_TOTAL)
            acc2 = _rows_tap(acc2, dyv, x_ptr, x_at, x_off, i_w0[:, None], ok, 2, F_W, DIL_W, IN_W, C_TOTAL)
            acc3 = _rows_tap(acc3, dyv, x_ptr, x_at, x_off, i_w0[:, None], ok, 3, F_W, DIL_W, IN_W, C_TOTAL)
            if TAPS_W > 4:
                acc4 = _rows_tap(acc4, dyv, x_ptr, x_at, x_off, i_w0[:, None], ok, 4, F_W, DIL_W, IN_W, C_TOTAL)
                acc5 = _rows_tap(acc5, dyv, x_ptr, x_at, x_off, i_w0[:, None], ok, 5, F_W, DIL_W, IN_W, C_TOTAL)
                acc6 = _rows_tap(acc6, dyv, x_ptr, x_at, x_off, i_w0[:, None], ok, 6, F_W, DIL_W, IN_W, C_TOTAL)
                acc7 = _rows_tap(acc7, dyv, x_ptr, x_at, x_off, i_w0[:, None], ok, 7, F_W, DIL_W, IN_W, C_TOTAL)
            ow += ROW_WIDTH
            i_w0 += ow_step
            dy_at += ROW_WIDTH * K_TOTAL
            x_at += ow_step * C_TOTAL
        oh0, od0, nb0 = _next_lines(oh0, od0, nb0, LINE_BLOCK, OUT_D, OUT_H)

    # dW[k, tap] at k·taps + tap (C/G = 1); split-K partials go to workspace[split].
    out_ptrs = out_ptr + split.to(tl.int64) * weight_elements + (cols * taps + frow * F_W)
    out_ty = out_ptr.dtype.element_ty
    tl.store(out_ptrs, tl.sum(acc0, axis=0).to(out_ty), mask=col_ok)
    tl.store(out_ptrs + 1, tl.sum(acc1, axis=0).to(out_ty), mask=col_ok & (F_W > 1))
    tl.store(out_ptrs + 2, tl.sum(acc2, axis=0).to(out_ty), mask=col_ok & (F_W > 2))
    tl.store(out_ptrs + 3, tl.sum(acc3, axis=0).to(out_ty), mask=col_ok & (F_W > 3))
    if TAPS_W > 4:
        tl.store(out_ptrs + 4, tl.sum(acc4, axis=0).to(out_ty), mask=col_ok & (F_W > 4))
        tl.store(out_ptrs + 5, tl.sum(acc5, axis=0).to(out_ty), mask=col_ok & (F_W > 5))
        tl.store(out_ptrs + 6, tl.sum(acc6, axis=0).to(out_ty), mask=col_ok & (F_W > 6))
        tl.store(out_ptrs + 7, tl.sum(acc7, axis=0).to(out_ty), mask=col_ok & (F_W > 7))


def _is_depthwise(problem: ConvProblem) -> bool:
    return problem.c_per_group == 1 and problem.k_per_group == 1


def _size_args(problem: ConvProblem) -> tuple[int, ...]:
    return (problem.batch, problem.groups, problem.c_per_group, problem.k_per_group, *spatial_args(problem))


def _prod(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def _pass_rows(config: KernelConfig, depthwise: bool) -> int:
    """Rows per pass of the forward and backward-data kernels: at most 32 accumulator elements per
    thread for the vectorised depthwise binary and 16 otherwise (gathers and vec 1 keep state per
    element rather than per 8-channel vector), half that with 64-bit offsets. Larger tiles run
    several passes rather than spilling."""
    return rows_per_pass(config, 32 if depthwise and config.vec == 8 else 16)


def _two_programs(fn, config: KernelConfig, types: dict[str, str], constexprs: dict,
                  passes: bool = True) -> dict[str, Program]:
    """The general binary ("main") and the depthwise one, same config, same parameters."""
    out = {}
    for name, depthwise in (("main", False), ("depthwise", True)):
        values = {**constexprs, "DEPTHWISE": depthwise}
        if passes:
            values["PASS_M"] = _pass_rows(config, depthwise)
        out[name] = Program(fn, values, types, config.num_warps, config.num_stages)
    return out


def _rows_programs(fn, config: KernelConfig, types: dict[str, str], constexprs: dict) -> dict[str, Program]:
    """The tap-row program of the forward / backward-data kernel and the weight transposition
    that feeds it (its ``w_ptr`` is the fp32 workspace)."""
    values = {**constexprs, "PASS_M": _pass_rows(config, True), "TAPS_W": config.block_k}
    rows_types = {("wt_ptr" if name == "w_ptr" else name): kind for name, kind in types.items()}
    rows_types["wt_ptr"] = "*fp32"
    return {"rows": Program(fn, values, rows_types, config.num_warps, config.num_stages),
            "tap_major": tap_major_program(config, flip=False)}


def tap_major_program(config: KernelConfig, *, flip: bool) -> Program:
    """The depthwise weight transposition ``W[k, tap] → wt[tap, k]`` (fp32, taps reversed with ``flip``)
    that feeds the tap-row and dwroll programs."""
    ints = int_type(config)
    types = {"w_ptr": pointer_type(config.dtype), "wt_ptr": "*fp32", "K_TOTAL": ints, "TAPS": ints}
    return Program(_weights_tap_major_kernel, {"BLOCK": TAP_MAJOR_BLOCK, "FLIP": flip}, types, 4, 1)


def _tap_major_elements(problem: ConvProblem, config: KernelConfig) -> int:
    """Workspace of the tap-row programs: the tap-major fp32 weights ``wt[tap, k]`` plus BLOCK_N
    elements of slack, so that a channel block's weights load unmasked (16-byte vectors; with the
    clamped or masked column index of the other kernels the compiler proves no contiguity). Columns
    past the last channel read the next tap's weights or the slack: finite or not, they only reach
    accumulator columns that are never stored."""
    return problem.weight_elements + config.block_n if config.block_k > 1 else 0


def tap_major_launch(problem: ConvProblem, weight, workspace) -> Launch:
    elements = problem.weight_elements
    return Launch("tap_major", (cdiv(elements, TAP_MAJOR_BLOCK), 1, 1),
                  (weight, workspace, problem.out_channels, problem.filter_taps))


class _DirectDataTemplate:
    """Forward and backward-data: one general binary pair (``main``/``depthwise``) or, with
    ``block_k > 1``, the depthwise tap rows after a tap-major copy of the weights."""

    families = frozenset({Family.DIRECT})
    pointers: tuple[str, str, str]
    general: Any
    rows: Any

    def programs(self, config: KernelConfig) -> dict[str, Program]:
        ptr = pointer_type(config.dtype)
        ints = int_type(config)
        types = {**{name: ptr for name in self.pointers}, **{name: ints for name in _SIZE_PARAMS}}
        constexprs = {"BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "VEC": config.vec,
                      "INDEX64": config.index64}
        if config.block_k > 1:  # depthwise tap rows (support.py keeps them to depthwise problems)
            return _rows_programs(self.rows, config, types, constexprs)
        if config.group_m > 1:  # the forward multiplier binary (support.py: C/G = 1, K/G > 1)
            values = {**constexprs, "J_BLOCK": config.group_m, "PASS_M": multiplier_pass_rows(config)}
            return {"multiplier": Program(_direct_fwd_multiplier_kernel, values, types, config.num_warps,
                                          config.num_stages)}
        return _two_programs(self.general, config, types, constexprs)

    def workspace_elements(self, problem: ConvProblem, config: KernelConfig) -> int:
        return _tap_major_elements(problem, config)

    def grid(self, problem: ConvProblem, config: KernelConfig) -> tuple[int, int, int]:
        raise NotImplementedError

    def plan(self, problem, config, first, second, out, workspace) -> list[Launch]:
        grid = self.grid(problem, config)
        if config.block_k > 1:
            return [tap_major_launch(problem, second, workspace),
                    Launch("rows", grid, (first, workspace, out, *_size_args(problem)))]
        if config.group_m > 1:
            program = "multiplier"
        else:
            program = "depthwise" if _is_depthwise(problem) else "main"
        return [Launch(program, grid, (first, second, out, *_size_args(problem)))]


class DirectForward(_DirectDataTemplate):
    direction = Direction.FORWARD
    pointers = ("x_ptr", "w_ptr", "y_ptr")
    general = _direct_fwd_kernel
    rows = _direct_fwd_rows_kernel

    def grid(self, problem: ConvProblem, config: KernelConfig) -> tuple[int, int, int]:
        m = problem.batch * _prod(problem.output_size)
        if config.group_m > 1:  # the multiplier binary: (group block, j chunk) pairs
            channel_blocks = cdiv(problem.groups, config.block_n) * cdiv(problem.k_per_group, config.group_m)
        else:
            channel_blocks = cdiv(problem.out_channels, config.block_n)
        return (cdiv(m, config.block_m) * channel_blocks, 1, 1)


class DirectBackwardData(_DirectDataTemplate):
    direction = Direction.BACKWARD_DATA
    pointers = ("dy_ptr", "w_ptr", "dx_ptr")
    general = _direct_bwd_data_kernel
    rows = _direct_bwd_data_rows_kernel

    def grid(self, problem: ConvProblem, config: KernelConfig) -> tuple[int, int, int]:
        # Positions per residue class (the largest class; smaller ones are masked).
        per_class = problem.batch * _prod(cdiv(i, s) for i, s in zip(problem.input_size, problem.stride))
        return (cdiv(per_class, config.block_m) * cdiv(problem.in_channels, config.block_n), _prod(problem.stride), 1)


class DirectBackwardWeight:
    direction = Direction.BACKWARD_WEIGHT
    families = frozenset({Family.DIRECT})

    def programs(self, config: KernelConfig) -> dict[str, Program]:
        ptr = pointer_type(config.dtype)
        ints = int_type(config)
        out_type = "*fp32" if config.split_k > 1 else ptr
        types = {"x_ptr": ptr, "dy_ptr": ptr, "out_ptr": out_type,
                 **{name: ints for name in _SIZE_PARAMS + _BWD_WEIGHT_PARAMS}}
        constexprs = {"BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "SPLIT_K": config.split_k,
                      "VEC": config.vec, "INDEX64": config.index64}
        if config.block_k > 1:  # depthwise tap rows: one binary (support.py keeps it to depthwise)
            programs = {"rows": Program(_direct_bwd_weight_rows_kernel, {**constexprs, "TAPS_W": config.block_k},
                                        types, config.num_warps, config.num_stages)}
        else:
            programs = _two_programs(_direct_bwd_weight_kernel, config, types, constexprs, passes=False)
        return with_split_reduce(programs, config)

    def workspace_elements(self, problem: ConvProblem, config: KernelConfig) -> int:
        return weight_partials_elements(problem, config)

    @staticmethod
    def tiling(problem: ConvProblem, config: KernelConfig) -> tuple[int, int, int, int]:
        """(TAP_BLOCK, LINE_BLOCK, ROW_WIDTH, LINES_PER_SPLIT) for a problem; see :func:`bwd_weight_tiling`."""
        return bwd_weight_tiling(problem, config)

    def plan(self, problem, config, first, second, out, workspace) -> list[Launch]:
        tap_block, line_block, row_width, lines_per_split = self.tiling(problem, config)
        taps = problem.filter_taps
        if config.block_k > 1:  # one program per (channel block, filter row)
            axis0 = cdiv(problem.out_channels, config.block_n) * (taps // problem.filter_size[-1])
            program = "rows"
        else:
            axis0 = cdiv(problem.out_channels, config.block_n) * problem.c_per_group * cdiv(taps, tap_block)
            program = "depthwise" if _is_depthwise(problem) else "main"
        target = workspace if config.split_k > 1 else out
        launches = [Launch(program, (axis0, config.split_k, 1),
                           (first, second, target, *_size_args(problem),
                            tap_block, line_block, row_width, lines_per_split))]
        if config.split_k > 1:
            launches.append(split_reduce_launch(config, workspace, out, problem.weight_elements))
        return launches
