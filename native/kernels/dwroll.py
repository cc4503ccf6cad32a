"""Depthwise convolution by rolling filter rows (``dwroll``): forward, backward-data and backward-weight,
2D and 3D (2D runs as 3D with depth 1), for C/G = K/G = 1 with 16-byte channel vectors.

Notation as in direct.py: ``C`` = channels (= groups), ``i(o, t) = o·stride − pad_begin + t·dilation``
per spatial dimension; height has stride 1 and dilation 1 here (support.py), so ``i_h = o_h − pad_h + t_h``.

Why rolling: the direct kernels' programs own a block of output positions and read, for every filter
row, a different input row through L2 (measured: 72 % of their stall cycles wait on L1TEX, and the
L2 → L1 traffic is ``F_H`` times the input). Here a program owns a strip of ``BLOCK_W`` output columns
× ``BLOCK_N`` channels at one ``(n, o_d)`` and walks down a chunk of ``ROWS`` output rows. Each input
row enters the program once (its ``F_W`` column shifts are the same cache lines, served by L1) and is
used for every filter row while it is in registers, so L2 → L1 traffic is about one input read.

* forward (GEMM-free, CUDA-core FMA): ``Y[n,o,k] = Σ_{t_d,t_h,t_w} X[n, i(o,t), k] · wt[t, k]``. At step
  ``s`` the program loads input row ``i_h = o_h0 − pad_h + s`` (per depth tap, per column shift) and
  adds it with filter row ``t_h`` into the accumulator of output row ``i_h + pad_h − t_h``; the
  ``F_H`` accumulators rotate one slot per step and the oldest (it has seen every filter row) is
  stored. ``F_H`` = ``block_k`` (exact, unrolled); ``F_W ≤ block_k`` columns are unrolled with a
  uniform branch. Weights come from the tap-major fp32 copy ``wt[t, k]`` (direct.py's transposition,
  a first launch).
* backward-data (all strides 1): ``dX[n,i,j] = Σ_t dY[n, i + pad − t·dil, j] · W[j, t]``, i.e. the forward
  kernel over dY with the filter flipped in every dimension (``wt`` written with taps reversed) and
  ``pad' = dil·(F − 1) − pad_begin`` (negative pads are plain offsets here).
* backward-weight: ``dW[k,t] = Σ_{n,o} dY[n,o,k] · X[n, i(o,t), k]``. A program owns ``BLOCK_N`` channels,
  one depth tap ``t_d`` and one of ``split_k`` contiguous runs of work items (an item = one
  ``(n, o_d, column strip, row chunk)``); at step ``s`` it loads dY row ``s`` into a rolling window of
  the last ``F_H`` dY rows and input row ``s − pad_h`` once per column shift: that row pairs with window
  row ``t_h`` for filter row ``t_h``. ``F_H × F_W`` fp32 accumulators of ``BLOCK_W × BLOCK_N`` are summed
  over the strip once at the end; the partials of each split go to ``workspace[split]`` and direct.py's
  reduction sums them in a fixed order (deterministic, no atomics).

2D 3×3 data-direction tiles of at most 8 elements per thread (:func:`~dwroll_tiling.hoists_weights`) run
:func:`_dwroll_data_2d_kernel`: the nine weights of the channel block are read once from ``W`` (GKYXC,
``W[k, t_h, t_w]`` at ``k·9 + t_h·3 + t_w``; flipped for backward-data) and held in registers, so the walk
issues no weight loads and the tap-major launch is gone (H200: 16×64 tiles 36 % faster, e.g. n128 c576
14×14 forward 62.0 → 39.6 µs; at 16 elements per thread the weights cost 180 registers and lose).

``block_m`` is ``BLOCK_W`` (output columns of a strip), ``block_n`` the channels, ``block_k`` the filter
height unrolled (backward-weight: also the most filter columns). ``INDEX64`` forms the per-row bases in
64 bits (every single size is < 2^31, and so is one row ``W·C``: support.py checks). ``num_stages`` 2
selects the same walks with each step's loads issued one step ahead of its FMAs
(:func:`_dwroll_data_prefetch_kernel`, :func:`_dwroll_bwd_weight_prefetch_kernel`): on an H200 1.4–3.9×
faster for backward-weight on the same tile, −29 % to +10 % in the data directions, where the extra
registers cost occupancy (``bench/results/2026-11-22_h200_s6/``). The GEMM view does not apply: with
C/G = K/G = 1 each output is a dot over the taps alone, so these are CUDA-core FMA kernels.
"""

from __future__ import annotations

import triton
import triton.language as tl

from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.kernels.base import Launch, Program, as3d, cdiv, fixed_sizes, int_type, pointer_type
from tiledispatch.native.kernels.direct import _f32, tap_major_launch, tap_major_program
from tiledispatch.native.kernels.dwroll_tiling import data_geometry, data_rows, hoists_weights, weight_tiling
from tiledispatch.native.kernels.split_reduce import (
    split_reduce_launch,
    weight_partials_elements,
    with_split_reduce,
)
from tiledispatch.native.problem import ConvProblem, Direction

_DATA_PARAMS = ("BATCH", "CHANNELS", "IN_D", "IN_H", "IN_W", "OUT_D", "OUT_H", "OUT_W", "F_D", "F_W",
                "STR_D", "STR_W", "DIL_D", "DIL_W", "PAD_D", "PAD_H", "PAD_W", "ROWS")
_WEIGHT_PARAMS = _DATA_PARAMS + ("ITEMS_PER_SPLIT",)



@triton.jit
def _zeros_tuple(COUNT: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_N: tl.constexpr):
    out = ()
    for _ in tl.static_range(COUNT):
        out = out + (tl.zeros((BLOCK_W, BLOCK_N), dtype=tl.float32),)
    return out


@triton.jit
def _add_filter_rows(acc, xv, wt_ptr, w_row, F_W, C, cols, F_H: tl.constexpr):
    """acc[t_h] += xv · wt[(w_row + t_h·F_W), cols] for every filter row t_h (one column shift xv)."""
    out = ()
    for th in tl.static_range(F_H):
        wv = tl.load(wt_ptr + (w_row + th * F_W) * C + cols)  # unmasked: the workspace has BLOCK_N slack
        out = out + (acc[th] + xv * wv[None, :],)
    return out


@triton.jit
def _strip_origin(CHANNELS, OUT_D, OUT_H, OUT_W, STR_D, STR_W, PAD_D, PAD_W, ROWS,
                  BLOCK_W: tl.constexpr, BLOCK_N: tl.constexpr, INDEX64: tl.constexpr):
    """This program's strip of a forward / backward-data launch: (C, n, channel columns and their mask,
    the strip's first input column per output column, first output row and rows of the chunk, first
    input depth, the store mask and offsets within a row, and the chunk's first output row offset)."""
    C = (CHANNELS // 8) * 8  # lets the compiler prove 16-byte alignment of every channel run
    pid = tl.program_id(0)
    num_c = tl.cdiv(C, BLOCK_N)
    num_w = tl.cdiv(OUT_W, BLOCK_W)
    num_h = tl.cdiv(OUT_H, ROWS)
    # Channel blocks vary fastest, then strips, then row chunks: programs in flight share input rows.
    pid_c = pid % num_c
    rest = pid // num_c
    pid_w = rest % num_w
    rest = rest // num_w
    pid_h = rest % num_h
    nd = rest // num_h
    od = nd % OUT_D
    n = nd // OUT_D
    if INDEX64:
        n = n.to(tl.int64)

    cols = pid_c * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < C
    ow = pid_w * BLOCK_W + tl.arange(0, BLOCK_W)
    base_w = ow * STR_W - PAD_W
    oh0 = pid_h * ROWS
    rows_here = tl.minimum(ROWS, OUT_H - oh0)
    base_d = od * STR_D - PAD_D
    store_mask = (ow < OUT_W)[:, None] & col_ok[None, :]
    y_tile = (ow * C)[:, None] + cols[None, :]
    y_row0 = ((n * OUT_D + od) * OUT_H + oh0) * OUT_W * C
    return C, n, cols, col_ok, base_w, oh0, rows_here, base_d, store_mask, y_tile, y_row0


@triton.jit
def _dwroll_data_kernel(
    x_ptr, wt_ptr, y_ptr,
    BATCH, CHANNELS, IN_D, IN_H, IN_W, OUT_D, OUT_H, OUT_W, F_D, F_W,
    STR_D, STR_W, DIL_D, DIL_W, PAD_D, PAD_H, PAD_W, ROWS,
    BLOCK_W: tl.constexpr, BLOCK_N: tl.constexpr, F_H: tl.constexpr, INDEX64: tl.constexpr,
):
    """Forward (and backward-data as a forward over dY with flipped taps): see the module docstring."""
    C, n, cols, col_ok, base_w, oh0, rows_here, base_d, store_mask, y_tile, y_row0 = _strip_origin(
        CHANNELS, OUT_D, OUT_H, OUT_W, STR_D, STR_W, PAD_D, PAD_W, ROWS, BLOCK_W, BLOCK_N, INDEX64)

    acc = _zeros_tuple(F_H, BLOCK_W, BLOCK_N)
    for s in range(0, rows_here + F_H - 1):
        ih = oh0 - PAD_H + s
        row_ok = (ih >= 0) & (ih < IN_H)
        for td in range(0, F_D):
            i_d = base_d + td * DIL_D
            ok_row = row_ok & (i_d >= 0) & (i_d < IN_D)
            x_row = ((n * IN_D + i_d) * IN_H + ih) * IN_W * C
            w_row = td * F_H * F_W
            for tw in tl.static_range(F_H):
                if tw < F_W:
                    i_w = base_w + tw * DIL_W
                    # 0 ≤ i_w < IN_W as one unsigned compare (a negative i_w wraps past any size < 2^31).
                    ok = ok_row & (i_w.to(tl.uint32, bitcast=True) < IN_W.to(tl.uint32))
                    xv = tl.load(x_ptr + x_row + ((i_w * C)[:, None] + cols[None, :]),
                                 mask=ok[:, None] & col_ok[None, :], other=0.0)
                    acc = _add_filter_rows(acc, _f32(xv), wt_ptr, w_row + tw, F_W, C, cols, F_H)
        # acc[F_H − 1] has seen every filter row: output row oh0 + s − (F_H − 1), once s ≥ F_H − 1.
        if s >= F_H - 1:
            out_row = y_row0 + (s - (F_H - 1)) * OUT_W * C
            tl.store(y_ptr + out_row + y_tile, acc[F_H - 1].to(y_ptr.dtype.element_ty), mask=store_mask)
        acc = (tl.zeros((BLOCK_W, BLOCK_N), dtype=tl.float32),) + acc[:F_H - 1]


@triton.jit
def _load_unit(x_ptr, u, units, F_D, oh0, PAD_H, IN_H, IN_D, base_d, DIL_D, x_plane, IN_W, C, base_w, DIL_W,
               cols, col_ok, F_W, F_H: tl.constexpr):
    """The raw tiles of load unit ``u`` = (step ``u // F_D``, depth tap ``u % F_D``): input row
    ``o_h0 − pad_h + step`` at depth ``i_d``, shifted by each filter column (``F_H`` tiles; columns
    past ``F_W``, units past ``units`` and rows outside the input load nothing)."""
    step = u // F_D
    td = u - step * F_D
    ih = oh0 - PAD_H + step
    i_d = base_d + td * DIL_D
    ok_row = (u < units) & (ih >= 0) & (ih < IN_H) & (i_d >= 0) & (i_d < IN_D)
    x_row = ((x_plane + i_d) * IN_H + ih) * IN_W * C
    out = ()
    for tw in tl.static_range(F_H):
        i_w = base_w + tw * DIL_W
        ok = ok_row & (tw < F_W) & (i_w.to(tl.uint32, bitcast=True) < IN_W.to(tl.uint32))
        out = out + (tl.load(x_ptr + x_row + ((i_w * C)[:, None] + cols[None, :]),
                             mask=ok[:, None] & col_ok[None, :], other=0.0),)
    return out


@triton.jit
def _dwroll_data_prefetch_kernel(
    x_ptr, wt_ptr, y_ptr,
    BATCH, CHANNELS, IN_D, IN_H, IN_W, OUT_D, OUT_H, OUT_W, F_D, F_W,
    STR_D, STR_W, DIL_D, DIL_W, PAD_D, PAD_H, PAD_W, ROWS,
    BLOCK_W: tl.constexpr, BLOCK_N: tl.constexpr, F_H: tl.constexpr, INDEX64: tl.constexpr,
):
    """:func:`_dwroll_data_kernel` with the loads one unit ahead (``num_stages`` 2): the walk is a flat
    loop over units (step, depth tap), and each iteration issues the next unit's ``F_H`` column
    shifts before the current unit's FMAs, so a row's memory latency overlaps the previous row's
    arithmetic instead of stalling every step (the plain kernel keeps one row's loads in flight)."""
    C, n, cols, col_ok, base_w, oh0, rows_here, base_d, store_mask, y_tile, y_row0 = _strip_origin(
        CHANNELS, OUT_D, OUT_H, OUT_W, STR_D, STR_W, PAD_D, PAD_W, ROWS, BLOCK_W, BLOCK_N, INDEX64)
    x_plane = n * IN_D

    units = (rows_here + F_H - 1) * F_D
    nxt = _load_unit(x_ptr, 0, units, F_D, oh0, PAD_H, IN_H, IN_D, base_d, DIL_D, x_plane, IN_W, C, base_w, DIL_W,
                     cols, col_ok, F_W, F_H)
    acc = _zeros_tuple(F_H, BLOCK_W, BLOCK_N)
    for u in range(0, units):
        cur = nxt
        nxt = _load_unit(x_ptr, u + 1, units, F_D, oh0, PAD_H, IN_H, IN_D, base_d, DIL_D, x_plane, IN_W, C, base_w,
                         DIL_W, cols, col_ok, F_W, F_H)
        s = u // F_D
        td = u - s * F_D
        w_row = td * F_H * F_W
        for tw in tl.static_range(F_H):
            if tw < F_W:
                acc = _add_filter_rows(acc, _f32(cur[tw]), wt_ptr, w_row + tw, F_W, C, cols, F_H)
        if td == F_D - 1:  # the step's last depth tap: rotate as the plain kernel does
            if s >= F_H - 1:
                out_row = y_row0 + (s - (F_H - 1)) * OUT_W * C
                tl.store(y_ptr + out_row + y_tile, acc[F_H - 1].to(y_ptr.dtype.element_ty), mask=store_mask)
            acc = (tl.zeros((BLOCK_W, BLOCK_N), dtype=tl.float32),) + acc[:F_H - 1]


@triton.jit
def _row_shifts(x_ptr, s, steps, oh0, PAD_H, IN_H, x_plane, IN_W, C, base_w, DIL_W, cols, col_ok, F_W,
                F_H: tl.constexpr):
    """2D: input row ``o_h0 − pad_h + s`` shifted by each filter column (zeros past ``steps`` and outside)."""
    ih = oh0 - PAD_H + s
    ok_row = (s < steps) & (ih >= 0) & (ih < IN_H)
    x_row = (x_plane + ih) * IN_W * C
    out = ()
    for tw in tl.static_range(F_H):
        i_w = base_w + tw * DIL_W
        ok = ok_row & (tw < F_W) & (i_w.to(tl.uint32, bitcast=True) < IN_W.to(tl.uint32))
        out = out + (tl.load(x_ptr + x_row + ((i_w * C)[:, None] + cols[None, :]), mask=ok[:, None] & col_ok[None, :],
                             other=0.0),)
    return out


@triton.jit
def _dwroll_data_2d_kernel(
    x_ptr, w_ptr, y_ptr,
    BATCH, CHANNELS, IN_D, IN_H, IN_W, OUT_D, OUT_H, OUT_W, F_D, F_W,
    STR_D, STR_W, DIL_D, DIL_W, PAD_D, PAD_H, PAD_W, ROWS,
    BLOCK_W: tl.constexpr, BLOCK_N: tl.constexpr, F_H: tl.constexpr, FLIP: tl.constexpr, PREFETCH: tl.constexpr,
    INDEX64: tl.constexpr,
):
    """2D forward (backward-data: ``FLIP``, over dY) with the weights held in registers: the plain walk
    of :func:`_dwroll_data_kernel` (``PREFETCH``: each row's loads issued a step ahead, as
    :func:`_dwroll_data_prefetch_kernel`), ``F_D = 1``. ``W[k, t_h, t_w]`` is read from the GKYXC weight
    at ``k·F_H·F_W + t_h·F_W + t_w`` (C/G = K/G = 1), at ``(F_H−1−t_h, F_W−1−t_w)`` with ``FLIP``."""
    C, n, cols, col_ok, base_w, oh0, rows_here, base_d, store_mask, y_tile, y_row0 = _strip_origin(
        CHANNELS, OUT_D, OUT_H, OUT_W, STR_D, STR_W, PAD_D, PAD_W, ROWS, BLOCK_W, BLOCK_N, INDEX64)
    taps = F_H * F_W
    weights = ()
    for i in tl.static_range(F_H * F_H):  # i = t_h·F_H + t_w; columns t_w ≥ F_W hold zeros
        if FLIP:
            tap = (F_H - 1 - i // F_H) * F_W + (F_W - 1 - i % F_H)
        else:
            tap = (i // F_H) * F_W + i % F_H
        weights = weights + (tl.load(w_ptr + cols * taps + tap, mask=col_ok & (i % F_H < F_W), other=0.0
                                     ).to(tl.float32),)

    x_plane = n * IN_H
    steps = rows_here + F_H - 1
    # Loop-carried when PREFETCH (defined before the loop either way; otherwise dead code).
    nxt = _row_shifts(x_ptr, 0, steps, oh0, PAD_H, IN_H, x_plane, IN_W, C, base_w, DIL_W, cols, col_ok, F_W, F_H)
    acc = _zeros_tuple(F_H, BLOCK_W, BLOCK_N)
    for s in range(0, steps):
        if PREFETCH:
            cur = nxt
            nxt = _row_shifts(x_ptr, s + 1, steps, oh0, PAD_H, IN_H, x_plane, IN_W, C, base_w, DIL_W, cols, col_ok,
                              F_W, F_H)
        else:
            cur = _row_shifts(x_ptr, s, steps, oh0, PAD_H, IN_H, x_plane, IN_W, C, base_w, DIL_W, cols, col_ok,
                              F_W, F_H)
        for tw in tl.static_range(F_H):
            if tw < F_W:
                xv = _f32(cur[tw])
                out = ()
                for th in tl.static_range(F_H):
                    out = out + (acc[th] + xv * weights[th * F_H + tw][None, :],)
                acc = out
        # acc[F_H − 1] has seen every filter row: output row oh0 + s − (F_H − 1), once s ≥ F_H − 1.
        if s >= F_H - 1:
            out_row = y_row0 + (s - (F_H - 1)) * OUT_W * C
            tl.store(y_ptr + out_row + y_tile, acc[F_H - 1].to(y_ptr.dtype.element_ty), mask=store_mask)
        acc = (tl.zeros((BLOCK_W, BLOCK_N), dtype=tl.float32),) + acc[:F_H - 1]


@triton.jit
def _add_to_row(acc, r: tl.constexpr, value, HELD: tl.constexpr):
    """acc with ``value`` added to held row ``r`` (tuples are immutable: rebuilt, the other rows as they are)."""
    out = ()
    for i in tl.static_range(HELD):
        if i == r:
            out = out + (acc[i] + value,)
        else:
            out = out + (acc[i],)
    return out


@triton.jit
def _dwroll_held_kernel(
    x_ptr, wt_ptr, y_ptr,
    BATCH, CHANNELS, IN_D, IN_H, IN_W, OUT_D, OUT_H, OUT_W, F_D, F_W,
    STR_D, STR_W, DIL_D, DIL_W, PAD_D, PAD_H, PAD_W, ROWS,
    BLOCK_W: tl.constexpr, BLOCK_N: tl.constexpr, F_H: tl.constexpr, HELD: tl.constexpr, INDEX64: tl.constexpr,
):
    """Forward / backward-data (over dY, flipped taps) holding ``HELD`` output rows (``ROWS`` = ``HELD``).

    ``Y[n,o,k] = Σ_{t_d,t_h,t_w} X[n, i(o,t), k] · wt[t, k]`` as in :func:`_dwroll_data_kernel`, with the loop
    order turned around: for each depth tap (outer, run time) the program reads that tap's ``F_H × F_W``
    weights into registers once, then the ``HELD + F_H − 1`` input rows its ``HELD`` output rows need, each
    at its ``F_W`` column shifts; input row ``r_in`` with filter row ``t_h`` feeds held row ``r_in − t_h``.
    Every index is static, so the loads of one depth tap are independent of each other and of the FMAs
    (one memory latency per depth tap, not one per row and tap as in the rolling walk), and the weights
    cost no load inside the walk (filters up to 3 high; taller ones read each weight vector where it is used,
    an L1 hit). The price: ``F_H − 1`` halo rows per ``HELD`` rows read again."""
    C, n, cols, col_ok, base_w, oh0, rows_here, base_d, store_mask, y_tile, y_row0 = _strip_origin(
        CHANNELS, OUT_D, OUT_H, OUT_W, STR_D, STR_W, PAD_D, PAD_W, HELD, BLOCK_W, BLOCK_N, INDEX64)
    acc = _zeros_tuple(HELD, BLOCK_W, BLOCK_N)
    for td in range(0, F_D):
        i_d = base_d + td * DIL_D
        ok_d = (i_d >= 0) & (i_d < IN_D)
        w_row = td * F_H * F_W
        weights = ()
        if F_H <= 3:  # taller filters: F_H² weight vectors would crowd out the rows; read per use (L1)
            for i in tl.static_range(F_H * F_H):  # i = t_h·F_H + t_w; columns t_w ≥ F_W hold zeros
                tap_ok = (i % F_H) < F_W
                # unmasked channels: the workspace has BLOCK_N slack
                weights = weights + (tl.load(wt_ptr + (w_row + (i // F_H) * F_W + i % F_H) * C + cols,
                                             mask=tap_ok & (cols >= 0), other=0.0),)
        for r_in in tl.static_range(HELD + F_H - 1):
            ih = oh0 - PAD_H + r_in
            ok_row = ok_d & (ih >= 0) & (ih < IN_H)
            x_row = ((n * IN_D + i_d) * IN_H + ih) * IN_W * C
            for tw in tl.static_range(F_H):
                if tw < F_W:
                    i_w = base_w + tw * DIL_W
                    ok = ok_row & (i_w.to(tl.uint32, bitcast=True) < IN_W.to(tl.uint32))
                    xv = _f32(tl.load(x_ptr + x_row + ((i_w * C)[:, None] + cols[None, :]),
                                      mask=ok[:, None] & col_ok[None, :], other=0.0))
                    for th in tl.static_range(F_H):
                        if r_in - th >= 0:  # noqa: SIM102  (two compile-time tests, folded by Triton)
                            if r_in - th < HELD:
                                if F_H <= 3:
                                    wv = weights[th * F_H + tw]
                                else:
                                    wv = tl.load(wt_ptr + (w_row + th * F_W + tw) * C + cols)
                                acc = _add_to_row(acc, r_in - th, xv * wv[None, :], HELD)
    for r in tl.static_range(HELD):
        tl.store(y_ptr + y_row0 + r * OUT_W * C + y_tile, acc[r].to(y_ptr.dtype.element_ty),
                 mask=store_mask & (r < rows_here))


@triton.jit
def _pair_window(acc, xv, window, tw: tl.constexpr, F_H: tl.constexpr):
    """acc[t_h·F_H + tw] += xv · window[t_h] for every filter row t_h (xv: one column shift)."""
    out = ()
    for i in tl.static_range(F_H * F_H):
        if i % F_H == tw:
            out = out + (acc[i] + xv * window[i // F_H],)
        else:
            out = out + (acc[i],)
    return out


@triton.jit
def _weight_program(BATCH, CHANNELS, OUT_D, OUT_H, OUT_W, ROWS, ITEMS_PER_SPLIT,
                    BLOCK_W: tl.constexpr, BLOCK_N: tl.constexpr):
    """This backward-weight program's share: (C, depth tap, split, strips and row chunks per plane, its
    first and past-last work item, channel columns and their mask, the strip's column offsets)."""
    C = (CHANNELS // 8) * 8
    num_c = tl.cdiv(C, BLOCK_N)
    pid_c = tl.program_id(0) % num_c
    td = tl.program_id(0) // num_c
    split = tl.program_id(1)
    num_w = tl.cdiv(OUT_W, BLOCK_W)
    num_h = tl.cdiv(OUT_H, ROWS)
    items = BATCH * OUT_D * num_w * num_h
    first = split * ITEMS_PER_SPLIT
    last = tl.minimum(first + ITEMS_PER_SPLIT, items)

    cols = pid_c * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < C
    strip = tl.arange(0, BLOCK_W)
    return C, td, split, num_w, num_h, first, last, cols, col_ok, strip


@triton.jit
def _weight_item(item, num_w, num_h, OUT_D, STR_D, PAD_D, DIL_D, td, INDEX64: tl.constexpr):
    """Work item → (strip, row chunk, o_d, n, input depth of depth tap ``td``)."""
    pid_w = item % num_w
    rest = item // num_w
    pid_h = rest % num_h
    nd = rest // num_h
    od = nd % OUT_D
    n = nd // OUT_D
    if INDEX64:
        n = n.to(tl.int64)
    i_d = od * STR_D - PAD_D + td * DIL_D
    return pid_w, pid_h, od, n, i_d


@triton.jit
def _item_geometry(pid_w, pid_h, od, n, i_d, strip, C, cols, col_ok, IN_D, IN_H, OUT_D, OUT_H, OUT_W, STR_W, PAD_W,
                   ROWS, BLOCK_W: tl.constexpr):
    """A work item's strip: (dY tile mask, first input column per output column, first and past-last
    output row, dY and input plane row offsets, dY tile offsets within a row)."""
    ow = pid_w * BLOCK_W + strip
    ow_ok = (ow < OUT_W)[:, None] & col_ok[None, :]
    base_w = ow * STR_W - PAD_W
    oh0 = pid_h * ROWS
    oh_end = tl.minimum(oh0 + ROWS, OUT_H)
    dy_plane = (n * OUT_D + od) * OUT_H
    x_plane = (n * IN_D + i_d) * IN_H
    dy_tile = (ow * C)[:, None] + cols[None, :]
    return ow_ok, base_w, oh0, oh_end, dy_plane, x_plane, dy_tile


@triton.jit
def _store_weight_partials(out_ptr, acc, split, C, cols, col_ok, td, F_D, F_W, F_H: tl.constexpr):
    """Sum each tap's tile over the strip and store it: dW[k, tap] at k·taps + tap (C/G = 1),
    tap = (t_d·F_H + t_h)·F_W + t_w; split partials go to workspace[split] in the same layout."""
    taps = F_D * F_H * F_W
    out_ptrs = out_ptr + split.to(tl.int64) * (C * taps) + (cols * taps + td * F_H * F_W)
    for i in tl.static_range(F_H * F_H):
        th = i // F_H
        tw = i % F_H
        tl.store(out_ptrs + (th * F_W + tw), tl.sum(acc[i], axis=0).to(out_ptr.dtype.element_ty),
                 mask=col_ok & (tw < F_W))


@triton.jit
def _dwroll_bwd_weight_kernel(
    x_ptr, dy_ptr, out_ptr,
    BATCH, CHANNELS, IN_D, IN_H, IN_W, OUT_D, OUT_H, OUT_W, F_D, F_W,
    STR_D, STR_W, DIL_D, DIL_W, PAD_D, PAD_H, PAD_W, ROWS, ITEMS_PER_SPLIT,
    BLOCK_W: tl.constexpr, BLOCK_N: tl.constexpr, F_H: tl.constexpr, SPLIT_K: tl.constexpr,
    INDEX64: tl.constexpr,
):
    """Backward-weight: see the module docstring. ``F_W ≤ F_H``; grid = (channel blocks × F_D, split_k)."""
    C, td, split, num_w, num_h, first, last, cols, col_ok, strip = _weight_program(
        BATCH, CHANNELS, OUT_D, OUT_H, OUT_W, ROWS, ITEMS_PER_SPLIT, BLOCK_W, BLOCK_N)
    acc = _zeros_tuple(F_H * F_H, BLOCK_W, BLOCK_N)
    for item in range(first, last):
        pid_w, pid_h, od, n, i_d = _weight_item(item, num_w, num_h, OUT_D, STR_D, PAD_D, DIL_D, td, INDEX64)
        if (i_d >= 0) & (i_d < IN_D):  # uniform: otherwise this depth tap sees only padding
            ow_ok, base_w, oh0, oh_end, dy_plane, x_plane, dy_tile = _item_geometry(
                pid_w, pid_h, od, n, i_d, strip, C, cols, col_ok, IN_D, IN_H, OUT_D, OUT_H, OUT_W, STR_W, PAD_W, ROWS,
                BLOCK_W)
            window = _zeros_tuple(F_H, BLOCK_W, BLOCK_N)
            # Step s: dY row oh0 + s enters the window (window[t_h] = dY row oh0 + s − t_h; rows
            # outside [oh0, oh_end) are zero), and input row oh0 + s − pad_h pairs with window[t_h]
            # for filter row t_h.
            for s in range(0, oh_end - oh0 + F_H - 1):
                o = oh0 + s
                dyv = tl.load(dy_ptr + (dy_plane + o) * OUT_W * C + dy_tile, mask=ow_ok & (o < oh_end), other=0.0)
                window = (_f32(dyv),) + window[:F_H - 1]
                ih = o - PAD_H
                if (ih >= 0) & (ih < IN_H):
                    x_row = (x_plane + ih) * IN_W * C
                    for tw in tl.static_range(F_H):
                        if tw < F_W:
                            i_w = base_w + tw * DIL_W
                            ok = i_w.to(tl.uint32, bitcast=True) < IN_W.to(tl.uint32)
                            xv = tl.load(x_ptr + x_row + ((i_w * C)[:, None] + cols[None, :]),
                                         mask=ok[:, None] & col_ok[None, :], other=0.0)
                            acc = _pair_window(acc, _f32(xv), window, tw, F_H)

    _store_weight_partials(out_ptr, acc, split, C, cols, col_ok, td, F_D, F_W, F_H)


@triton.jit
def _load_weight_step(x_ptr, dy_ptr, s, steps, oh0, oh_end, PAD_H, IN_H, dy_plane, x_plane, OUT_W, IN_W, C, dy_tile,
                      ow_ok, base_w, DIL_W, cols, col_ok, F_W, F_H: tl.constexpr):
    """Raw tiles of backward-weight step ``s``: dY row ``o_h0 + s`` and input row ``o_h0 + s − pad_h``
    shifted by each filter column (nothing loads past ``steps`` or outside the tensors)."""
    o = oh0 + s
    dyv = tl.load(dy_ptr + (dy_plane + o) * OUT_W * C + dy_tile, mask=ow_ok & (o < oh_end) & (s < steps), other=0.0)
    ih = o - PAD_H
    ok_row = (s < steps) & (ih >= 0) & (ih < IN_H)
    x_row = (x_plane + ih) * IN_W * C
    xs = ()
    for tw in tl.static_range(F_H):
        i_w = base_w + tw * DIL_W
        ok = ok_row & (tw < F_W) & (i_w.to(tl.uint32, bitcast=True) < IN_W.to(tl.uint32))
        xs = xs + (tl.load(x_ptr + x_row + ((i_w * C)[:, None] + cols[None, :]), mask=ok[:, None] & col_ok[None, :],
                           other=0.0),)
    return dyv, xs


@triton.jit
def _dwroll_bwd_weight_prefetch_kernel(
    x_ptr, dy_ptr, out_ptr,
    BATCH, CHANNELS, IN_D, IN_H, IN_W, OUT_D, OUT_H, OUT_W, F_D, F_W,
    STR_D, STR_W, DIL_D, DIL_W, PAD_D, PAD_H, PAD_W, ROWS, ITEMS_PER_SPLIT,
    BLOCK_W: tl.constexpr, BLOCK_N: tl.constexpr, F_H: tl.constexpr, SPLIT_K: tl.constexpr,
    INDEX64: tl.constexpr,
):
    """:func:`_dwroll_bwd_weight_kernel` with each step's dY row and input shifts loaded one step ahead
    (``num_stages`` 2); rows outside the input load zeros instead of being branched around."""
    C, td, split, num_w, num_h, first, last, cols, col_ok, strip = _weight_program(
        BATCH, CHANNELS, OUT_D, OUT_H, OUT_W, ROWS, ITEMS_PER_SPLIT, BLOCK_W, BLOCK_N)
    acc = _zeros_tuple(F_H * F_H, BLOCK_W, BLOCK_N)
    for item in range(first, last):
        pid_w, pid_h, od, n, i_d = _weight_item(item, num_w, num_h, OUT_D, STR_D, PAD_D, DIL_D, td, INDEX64)
        if (i_d >= 0) & (i_d < IN_D):
            ow_ok, base_w, oh0, oh_end, dy_plane, x_plane, dy_tile = _item_geometry(
                pid_w, pid_h, od, n, i_d, strip, C, cols, col_ok, IN_D, IN_H, OUT_D, OUT_H, OUT_W, STR_W, PAD_W, ROWS,
                BLOCK_W)
            steps = oh_end - oh0 + F_H - 1
            window = _zeros_tuple(F_H, BLOCK_W, BLOCK_N)
            nxt_dy, nxt_x = _load_weight_step(x_ptr, dy_ptr, 0, steps, oh0, oh_end, PAD_H, IN_H, dy_plane, x_plane,
                                              OUT_W, IN_W, C, dy_tile, ow_ok, base_w, DIL_W, cols, col_ok, F_W, F_H)
            for s in range(0, steps):
                cur_dy = nxt_dy
                cur_x = nxt_x
                nxt_dy, nxt_x = _load_weight_step(x_ptr, dy_ptr, s + 1, steps, oh0, oh_end, PAD_H, IN_H, dy_plane,
                                                  x_plane, OUT_W, IN_W, C, dy_tile, ow_ok, base_w, DIL_W, cols, col_ok,
                                                  F_W, F_H)
                window = (_f32(cur_dy),) + window[:F_H - 1]
                for tw in tl.static_range(F_H):
                    if tw < F_W:
                        acc = _pair_window(acc, _f32(cur_x[tw]), window, tw, F_H)

    _store_weight_partials(out_ptr, acc, split, C, cols, col_ok, td, F_D, F_W, F_H)


def _data_args(problem: ConvProblem, geo: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    """The kernel's size arguments for the forward pass ``geo`` (:func:`data_geometry`) describes."""
    (in_d, in_h, in_w), (out_d, out_h, out_w) = geo["in"], geo["out"]
    f_d, _, f_w = geo["filter"]
    (str_d, _, str_w), (dil_d, _, dil_w), (pad_d, pad_h, pad_w) = geo["stride"], geo["dil"], geo["pad"]
    return (problem.batch, problem.in_channels, in_d, in_h, in_w, out_d, out_h, out_w, f_d, f_w,
            str_d, str_w, dil_d, dil_w, pad_d, pad_h, pad_w)


def _workspace_slack(problem: ConvProblem, config: KernelConfig) -> int:
    """Tap-major weights plus BLOCK_N elements, so the last channel block's weights load unmasked."""
    return problem.weight_elements + config.block_n


class DwrollData:
    """Forward or backward-data: the tap-major (flipped for backward-data) weights, then the rolling kernel;
    one launch where the kernel holds the weights (:func:`~dwroll_tiling.hoists_weights`)."""

    families = frozenset({Family.DWROLL})

    def __init__(self, direction: Direction):
        if direction is Direction.BACKWARD_WEIGHT:
            raise ValueError("direction: DwrollData runs forward and backward_data")
        self.direction = direction

    def programs(self, config: KernelConfig) -> dict[str, Program]:
        ptr = pointer_type(config.dtype)
        ints = int_type(config)
        constexprs = {"BLOCK_W": config.block_m, "BLOCK_N": config.block_n, "F_H": config.block_k,
                      "INDEX64": config.index64}
        flip = self.direction is Direction.BACKWARD_DATA
        if hoists_weights(config):
            types = {"x_ptr": ptr, "w_ptr": ptr, "y_ptr": ptr, **{name: ints for name in _DATA_PARAMS}}
            constexprs |= {"FLIP": flip, "PREFETCH": config.num_stages == 2}
            return {"roll": Program(_dwroll_data_2d_kernel, constexprs, types, config.num_warps, 1,
                                    fixed_sizes(config, _dwroll_data_2d_kernel))}
        types = {"x_ptr": ptr, "wt_ptr": "*fp32", "y_ptr": ptr, **{name: ints for name in _DATA_PARAMS}}
        if config.group_m > 1:
            fixed = fixed_sizes(config, _dwroll_held_kernel)
            return {"roll": Program(_dwroll_held_kernel, constexprs | {"HELD": config.group_m}, types,
                                    config.num_warps, 1, fixed),
                    "tap_major": tap_major_program(config, flip=flip)}
        kernel = _dwroll_data_prefetch_kernel if config.num_stages == 2 else _dwroll_data_kernel
        # 3x3 only: with the depth sizes constant, the 5x5 / 7x7 walks spill (ptxas, sm_90: 80-288 bytes).
        fixed = fixed_sizes(config, kernel) if config.block_k == 3 else {}
        return {"roll": Program(kernel, constexprs, types, config.num_warps, 1, fixed),
                "tap_major": tap_major_program(config, flip=flip)}

    def workspace_elements(self, problem: ConvProblem, config: KernelConfig) -> int:
        return 0 if hoists_weights(config) else _workspace_slack(problem, config)

    def plan(self, problem, config, first, second, out, workspace) -> list[Launch]:
        geo = data_geometry(problem)
        rows = data_rows(problem, config, geo)
        out_d, out_h, out_w = geo["out"]
        grid = (cdiv(problem.in_channels, config.block_n) * cdiv(out_w, config.block_m) * cdiv(out_h, rows)
                * problem.batch * out_d, 1, 1)
        args = (*_data_args(problem, geo), rows)
        if hoists_weights(config):
            return [Launch("roll", grid, (first, second, out, *args))]
        return [tap_major_launch(problem, second, workspace), Launch("roll", grid, (first, workspace, out, *args))]


class DwrollBackwardWeight:
    direction = Direction.BACKWARD_WEIGHT
    families = frozenset({Family.DWROLL})

    def programs(self, config: KernelConfig) -> dict[str, Program]:
        ptr = pointer_type(config.dtype)
        ints = int_type(config)
        out_type = "*fp32" if config.split_k > 1 else ptr
        types = {"x_ptr": ptr, "dy_ptr": ptr, "out_ptr": out_type, **{name: ints for name in _WEIGHT_PARAMS}}
        constexprs = {"BLOCK_W": config.block_m, "BLOCK_N": config.block_n, "F_H": config.block_k,
                      "SPLIT_K": config.split_k, "INDEX64": config.index64}
        kernel = _dwroll_bwd_weight_prefetch_kernel if config.num_stages == 2 else _dwroll_bwd_weight_kernel
        return with_split_reduce({"roll": Program(kernel, constexprs, types, config.num_warps, 1)}, config)

    def workspace_elements(self, problem: ConvProblem, config: KernelConfig) -> int:
        return weight_partials_elements(problem, config)

    def plan(self, problem, config, first, second, out, workspace) -> list[Launch]:
        rows, items_per_split = weight_tiling(problem, config)
        f_d = as3d(problem.filter_size, 1)[0]
        target = workspace if config.split_k > 1 else out
        grid = (cdiv(problem.in_channels, config.block_n) * f_d, config.split_k, 1)
        sizes = _data_args(problem, data_geometry(problem))
        launches = [Launch("roll", grid, (first, second, target, *sizes, rows, items_per_split))]
        if config.split_k > 1:
            launches.append(split_reduce_launch(config, workspace, out, problem.weight_elements))
        return launches
