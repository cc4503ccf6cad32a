"""Depthwise convolution with each thread owning a run of output columns (``dwrun``): backward-weight 2D and 3D (2D
runs as 3D with depth 1), forward and backward-data 2D; C/G = K/G = 1, rows and columns walked with stride 1 and
dilation 1, any channel count.

``dW[k, t_d, t_h, t_w] = Σ_{n, o_d, o_h, o_w} dY[n, o, k] · X[n, o_d·s_d − p_d + t_d·d_d, o_h − p_h + t_h,
o_w − p_w + t_w, k]`` (notation of direct.py). No GEMM view: with C/G = K/G = 1 every dW element is a dot over
positions alone, so this is a CUDA-core FMA kernel.

Why runs: dwroll (dwroll.py) spreads a strip's output columns over threads, so each filter column's shift of
the input row is another load (an L1 hit), and it keeps ``F_H × F_H`` accumulator tiles the size of the whole
strip, summed over the strip only at the end (7×7 on 8 warps: 196 registers, one program per SM; 98 FFMA of
219 instructions a step, ``bench/results/2026-11-27_h200_s17/sass_depthwise_bwd_weight.md``). Here a thread
owns ``RUN`` consecutive output columns of one channel, so

* the ``F_W`` shifts of an input row are the same ``RUN + F_W − 1`` registers, indexed differently: a step
  loads ``RUN`` dY and ``RUN + F_W − 1`` input values and issues ``F_H·F_W·RUN`` FMAs (7×7, run 7: 20 loads
  for 343 FMAs);
* the sum over a run's columns happens in the accumulators themselves: ``F_H·F_W`` fp32 values a thread,
  whatever the run length.

A program owns ``BLOCK_N`` channels × ``RUNS`` runs (a strip of ``RUNS·RUN`` columns; one element of each
per thread: ``RUNS·BLOCK_N`` = 32 × warps), one depth tap ``t_d`` and one of ``split_k`` contiguous ranges of
work items (an item = one ``(n, o_d, strip, row chunk)``, as in dwroll). It walks the chunk's output rows
keeping the last ``F_H`` dY rows of its runs (``F_H·RUN`` values): at step ``s`` dY row ``o = o_h0 + s``
enters the window and input row ``i_h = o − p_h`` pairs with window row ``t_h`` (dY row ``o − t_h``) for
filter row ``t_h``:

    acc[t_h, t_w] += Σ_{j < RUN} window[t_h][j] · x[j + t_w],   x[m] = X[i_h, strip + run·RUN − p_w + m]

Each chunk walks ``F_H − 1`` extra steps (the rows its last dY rows pair with). At the end each program sums
its accumulators over its runs and writes ``workspace[split]`` (dW's layout, fp32); the shared deterministic
reduction (split_reduce.py) adds the splits in a fixed order.

Forward and backward-data (2D, rows and columns at stride 1 and dilation 1; backward-data = the forward pass over dY
with the filter flipped and ``pad' = F − 1 − pad_begin``, dwroll_tiling.data_geometry): a program owns ``BLOCK_N``
channels × ``RUNS`` runs of one image and a chunk of output rows, holds the channels' ``F_H·F_W`` weights (fp32) and
the last ``F_H`` output rows of its runs, and at step ``s`` loads input row ``i_h = o_h0 − p_h + s`` once
(``RUN + F_W − 1`` values a run):

    acc[t_h][j] += Σ_{t_w} W[t_h, t_w] · x[j + t_w]     (acc[t_h] = output row i_h + p_h − t_h)

then stores ``acc[F_H − 1]`` (it has seen every filter row) and rolls the window by one row. A step issues
``F_H·F_W·RUN`` FMAs for ``RUN + F_W − 1`` loads and ``RUN`` stores.

Measured (H200, ``bench/results/2026-11-27_h200_s19/``, same runs as cuDNN): backward-weight n32 c96 56×56 7×7
128.6 → 58.4 µs (dwroll before; cuDNN 77.3), c144 56×56 3×3 43.2 → 33.2 (cuDNN 37.0), 1.1–2.2× the earlier best on
11 of 12 stride-1 depthwise layers; forward / backward-data 7×7 1.4–2.7× dwroll (c96 56×56 forward 86.3 → 60.2,
cuDNN 73.0), 3×3 1.02–1.17×. Channel pairs (``vec`` 2, below), forward / backward-data 3×3: 1.21–1.39× the ``vec`` 1
tiles on 8 layer-directions, the forward 1.03–1.17× cuDNN (``bench/results/2026-11-27_h200_s22/dwrun_pair_probe``); 7×7
pairs lose (164–239 registers), backward-weight pairs win only on two 3×3 layers (1.04–1.06×).

Rows through shared memory (forward / backward-data, ``num_stages`` 3 and 4, :func:`pipeline_stages`): the best
3×3 tiles above ran the n32 c144 56×56 layer at 0.48 of the memory bound with 72 registers a thread, 14 two-warp
programs an SM, each with one row in flight. Loaded through Triton's software pipeline (``cp.async``, two or three
rows ahead in shared memory, no registers held) and four channels a thread (``vec`` 4, one 64-bit load): 1.02–1.29×
the best earlier tile on 12 3×3 layer-directions (n128 c144 56×56: 104 → 81 µs), H200,
``bench/results/2026-11-28_h200_s27/dwrun_stages_probe``.

Config: ``block_m`` = ``RUN`` (columns a thread owns, any 1..:data:`~tiledispatch.native.configs.MAX_DWRUN_RUN`),
``group_m`` = ``RUNS`` (runs a program walks side by side), ``block_n`` = channels, ``block_k`` = the filter
height, unrolled (``F_W ≤ block_k``), ``num_stages`` 2 = each step's loads issued one step ahead of its FMAs (in
registers), 3 and 4 = through shared memory (forward / backward-data), ``split_k`` the splits; ``vec`` 1: each
thread loads one 16-bit channel value, so any channel count runs; ``vec`` 2 and 4: that many neighbouring channels a
thread, one 32- or 64-bit load each (:func:`channel_vectors`; channel counts divisible by ``vec``), ``vec`` times the
FMAs per load instruction and its address arithmetic.
"""

from __future__ import annotations

import triton
import triton.language as tl

from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.kernels.base import Launch, Program, as3d, cdiv, fixed_sizes, int_type, pointer_type
from tiledispatch.native.kernels.direct import _f32
from tiledispatch.native.kernels.dwroll import _zeros_tuple
from tiledispatch.native.kernels.dwroll_tiling import data_geometry, dwrun_data_rows, dwrun_tiling
from tiledispatch.native.kernels.split_reduce import split_reduce_launch, weight_partials_elements, with_split_reduce
from tiledispatch.native.problem import ConvProblem, Direction

_DATA_PARAMS = ("BATCH", "CHANNELS", "IN_H", "IN_W", "OUT_H", "OUT_W", "F_W", "PAD_H", "PAD_W", "ROWS")
_PARAMS = ("BATCH", "CHANNELS", "IN_D", "IN_H", "IN_W", "OUT_D", "OUT_H", "OUT_W", "F_D", "F_W",
           "STR_D", "DIL_D", "PAD_D", "PAD_H", "PAD_W", "ROWS", "ITEMS_PER_SPLIT")


@triton.jit
def _step_loads(x_ptr, dy_ptr, s, steps, oh0, oh_end, PAD_H, IN_H, IN_W, OUT_W, C, dy_plane, x_plane, dy_tile, x_tile,
                run_col, x_col, col_ok, F_W, RUN: tl.constexpr, F_H: tl.constexpr):
    """Raw 16-bit values of step ``s``: the runs' dY row ``o_h0 + s`` (``RUN`` tiles: column ``j`` of each run)
    and input row ``o_h0 + s − p_h`` (``RUN + F_H − 1`` tiles: column ``m − p_w`` of each run); zeros past the
    walk, outside the tensors and past the filter's width."""
    o = oh0 + s
    dy_row = dy_ptr + (dy_plane + o) * OUT_W * C
    dy_row_ok = (s < steps) & (o < oh_end)
    dys = ()
    for j in tl.static_range(RUN):
        ok = dy_row_ok & (run_col + j < OUT_W)
        dys = dys + (tl.load(dy_row + dy_tile + j * C, mask=ok[:, None] & col_ok[None, :], other=0.0),)
    ih = o - PAD_H
    x_row = x_ptr + (x_plane + ih) * IN_W * C
    x_row_ok = (s < steps) & (ih >= 0) & (ih < IN_H)
    xs = ()
    for m in tl.static_range(RUN + F_H - 1):
        # 0 <= column < IN_W as one unsigned compare (a negative column wraps past any size < 2^31).
        ok = x_row_ok & (m < RUN + F_W - 1) & ((x_col + m).to(tl.uint32, bitcast=True) < IN_W.to(tl.uint32))
        xs = xs + (tl.load(x_row + x_tile + m * C, mask=ok[:, None] & col_ok[None, :], other=0.0),)
    return dys, xs


@triton.jit
def _widen(values, COUNT: tl.constexpr):
    out = ()
    for i in tl.static_range(COUNT):
        out = out + (_f32(values[i]),)
    return out


@triton.jit
def _mac_runs(acc, window, xs, F_W, RUN: tl.constexpr, F_H: tl.constexpr):
    """acc[t_h·F_H + t_w] += Σ_j window[t_h·RUN + j] · xs[j + t_w] for every filter row and column (columns
    past ``F_W``: skipped, uniformly)."""
    for tw in tl.static_range(F_H):
        if tw < F_W:
            out = ()
            for i in tl.static_range(F_H * F_H):
                if i % F_H == tw:
                    total = acc[i]
                    for j in tl.static_range(RUN):
                        total = total + window[(i // F_H) * RUN + j] * xs[j + tw]
                    out = out + (total,)
                else:
                    out = out + (acc[i],)
            acc = out
    return acc


@triton.jit
def _dwrun_bwd_weight_kernel(
    x_ptr, dy_ptr, out_ptr,
    BATCH, CHANNELS, IN_D, IN_H, IN_W, OUT_D, OUT_H, OUT_W, F_D, F_W,
    STR_D, DIL_D, PAD_D, PAD_H, PAD_W, ROWS, ITEMS_PER_SPLIT,
    RUN: tl.constexpr, RUNS: tl.constexpr, BLOCK_N: tl.constexpr, F_H: tl.constexpr, PREFETCH: tl.constexpr,
    INDEX64: tl.constexpr,
):
    """See the module docstring. Grid = (channel blocks × F_D, split_k); ``F_W ≤ F_H``."""
    C = CHANNELS
    num_c = tl.cdiv(C, BLOCK_N)
    pid_c = tl.program_id(0) % num_c
    td = tl.program_id(0) // num_c
    split = tl.program_id(1)
    strip_w = RUNS * RUN
    num_w = tl.cdiv(OUT_W, strip_w)
    num_h = tl.cdiv(OUT_H, ROWS)
    items = BATCH * OUT_D * num_w * num_h
    first = split * ITEMS_PER_SPLIT
    last = tl.minimum(first + ITEMS_PER_SPLIT, items)
    cols = pid_c * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < C
    runs = tl.arange(0, RUNS) * RUN

    acc = _zeros_tuple(F_H * F_H, RUNS, BLOCK_N)
    for item in range(first, last):
        pid_w = item % num_w
        rest = item // num_w
        pid_h = rest % num_h
        nd = rest // num_h
        od = nd % OUT_D
        n = nd // OUT_D
        if INDEX64:
            n = n.to(tl.int64)
        i_d = od * STR_D - PAD_D + td * DIL_D
        if (i_d >= 0) & (i_d < IN_D):  # uniform: otherwise this depth tap sees only padding
            run_col = pid_w * strip_w + runs
            x_col = run_col - PAD_W
            dy_tile = (run_col * C)[:, None] + cols[None, :]
            x_tile = (x_col * C)[:, None] + cols[None, :]
            oh0 = pid_h * ROWS
            oh_end = tl.minimum(oh0 + ROWS, OUT_H)
            dy_plane = (n * OUT_D + od) * OUT_H
            x_plane = (n * IN_D + i_d) * IN_H
            steps = oh_end - oh0 + F_H - 1
            window = _zeros_tuple(F_H * RUN, RUNS, BLOCK_N)
            if PREFETCH:
                nxt_dy, nxt_x = _step_loads(x_ptr, dy_ptr, 0, steps, oh0, oh_end, PAD_H, IN_H, IN_W, OUT_W, C,
                                            dy_plane, x_plane, dy_tile, x_tile, run_col, x_col, col_ok, F_W, RUN, F_H)
                for s in range(0, steps):
                    cur_dy = nxt_dy
                    cur_x = nxt_x
                    nxt_dy, nxt_x = _step_loads(x_ptr, dy_ptr, s + 1, steps, oh0, oh_end, PAD_H, IN_H, IN_W, OUT_W, C,
                                                dy_plane, x_plane, dy_tile, x_tile, run_col, x_col, col_ok, F_W, RUN,
                                                F_H)
                    window = _widen(cur_dy, RUN) + window[:(F_H - 1) * RUN]
                    acc = _mac_runs(acc, window, _widen(cur_x, RUN + F_H - 1), F_W, RUN, F_H)
            else:
                for s in range(0, steps):
                    dys, xs = _step_loads(x_ptr, dy_ptr, s, steps, oh0, oh_end, PAD_H, IN_H, IN_W, OUT_W, C,
                                          dy_plane, x_plane, dy_tile, x_tile, run_col, x_col, col_ok, F_W, RUN, F_H)
                    window = _widen(dys, RUN) + window[:(F_H - 1) * RUN]
                    acc = _mac_runs(acc, window, _widen(xs, RUN + F_H - 1), F_W, RUN, F_H)

    # dW[k, tap] at k·taps + tap (C/G = 1), tap = (t_d·F_H + t_h)·F_W + t_w; split partials: workspace[split].
    taps = F_D * F_H * F_W
    out_ptrs = out_ptr + split.to(tl.int64) * (C * taps) + (cols * taps + td * F_H * F_W)
    for i in tl.static_range(F_H * F_H):
        th = i // F_H
        tw = i % F_H
        tl.store(out_ptrs + (th * F_W + tw), tl.sum(acc[i], axis=0).to(out_ptr.dtype.element_ty),
                 mask=col_ok & (tw < F_W))


@triton.jit
def _row_loads(x_ptr, s, steps, oh0, PAD_H, IN_H, IN_W, C, x_plane, x_tile, x_col, col_ok, F_W, RUN: tl.constexpr,
               F_H: tl.constexpr):
    """Raw values of forward step ``s``: input row ``o_h0 − p_h + s`` at columns ``m − p_w`` of each run
    (``RUN + F_H − 1`` tiles); zeros past the walk, outside the input and past the filter's width."""
    ih = oh0 - PAD_H + s
    x_row = x_ptr + (x_plane + ih) * IN_W * C
    row_ok = (s < steps) & (ih >= 0) & (ih < IN_H)
    xs = ()
    for m in tl.static_range(RUN + F_H - 1):
        ok = row_ok & (m < RUN + F_W - 1) & ((x_col + m).to(tl.uint32, bitcast=True) < IN_W.to(tl.uint32))
        xs = xs + (tl.load(x_row + x_tile + m * C, mask=ok[:, None] & col_ok[None, :], other=0.0),)
    return xs


@triton.jit
def _dwrun_data_kernel(
    x_ptr, w_ptr, y_ptr,
    BATCH, CHANNELS, IN_H, IN_W, OUT_H, OUT_W, F_W, PAD_H, PAD_W, ROWS,
    RUN: tl.constexpr, RUNS: tl.constexpr, BLOCK_N: tl.constexpr, F_H: tl.constexpr, FLIP: tl.constexpr,
    PREFETCH: tl.constexpr, PIPELINE: tl.constexpr, INDEX64: tl.constexpr,
):
    """2D forward (backward-data: ``FLIP``, over dY): see the module docstring. ``W[k, t_h, t_w]`` is read from the
    GKYXC weight at ``k·F_H·F_W + t_h·F_W + t_w`` (C/G = K/G = 1), at ``(F_H−1−t_h, F_W−1−t_w)`` with ``FLIP``.
    Grid = channel blocks × strips × row chunks × images, channel blocks fastest (programs in flight share rows)."""
    C = CHANNELS
    num_c = tl.cdiv(C, BLOCK_N)
    strip_w = RUNS * RUN
    num_w = tl.cdiv(OUT_W, strip_w)
    num_h = tl.cdiv(OUT_H, ROWS)
    pid = tl.program_id(0)
    pid_c = pid % num_c
    rest = pid // num_c
    pid_w = rest % num_w
    rest = rest // num_w
    pid_h = rest % num_h
    n = rest // num_h
    if INDEX64:
        n = n.to(tl.int64)
    cols = pid_c * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < C
    run_col = pid_w * strip_w + tl.arange(0, RUNS) * RUN
    x_col = run_col - PAD_W
    x_tile = (x_col * C)[:, None] + cols[None, :]
    y_tile = (run_col * C)[:, None] + cols[None, :]
    oh0 = pid_h * ROWS
    steps = tl.minimum(oh0 + ROWS, OUT_H) - oh0 + F_H - 1
    x_plane = n * IN_H
    y_plane = n * OUT_H

    taps = F_H * F_W
    weights = ()
    for i in tl.static_range(F_H * F_H):  # i = t_h·F_H + t_w; columns t_w ≥ F_W hold zeros
        if FLIP:
            tap = (F_H - 1 - i // F_H) * F_W + (F_W - 1 - i % F_H)
        else:
            tap = (i // F_H) * F_W + i % F_H
        weights = weights + (tl.load(w_ptr + cols * taps + tap, mask=col_ok & (i % F_H < F_W), other=0.0
                                     ).to(tl.float32)[None, :],)

    if PIPELINE > 0:
        # Rows through shared memory (cp.async, PIPELINE stages): the rows in flight hold no registers.
        acc = _zeros_tuple(F_H * RUN, RUNS, BLOCK_N)
        for s in tl.range(0, steps, num_stages=PIPELINE):
            cur = _row_loads(x_ptr, s, steps, oh0, PAD_H, IN_H, IN_W, C, x_plane, x_tile, x_col, col_ok, F_W, RUN,
                             F_H)
            acc = _data_step(acc, cur, weights, s, y_ptr, y_plane, oh0, OUT_W, C, y_tile, run_col, col_ok, F_W, RUN,
                             F_H, RUNS, BLOCK_N)
    else:
        # Loop-carried when PREFETCH (defined before the loop either way; otherwise dead code).
        nxt = _row_loads(x_ptr, 0, steps, oh0, PAD_H, IN_H, IN_W, C, x_plane, x_tile, x_col, col_ok, F_W, RUN, F_H)
        # The accumulators after the first row's loads, as before the pipelined branch existed: these tiles then
        # compile to the SASS their measured rows were timed with (cuobjdump-checked, session 27).
        acc = _zeros_tuple(F_H * RUN, RUNS, BLOCK_N)
        for s in range(0, steps):
            if PREFETCH:
                cur = nxt
                nxt = _row_loads(x_ptr, s + 1, steps, oh0, PAD_H, IN_H, IN_W, C, x_plane, x_tile, x_col, col_ok, F_W,
                                 RUN, F_H)
            else:
                cur = _row_loads(x_ptr, s, steps, oh0, PAD_H, IN_H, IN_W, C, x_plane, x_tile, x_col, col_ok, F_W,
                                 RUN, F_H)
            acc = _data_step(acc, cur, weights, s, y_ptr, y_plane, oh0, OUT_W, C, y_tile, run_col, col_ok, F_W, RUN,
                             F_H, RUNS, BLOCK_N)


@triton.jit
def _data_step(acc, cur, weights, s, y_ptr, y_plane, oh0, OUT_W, C, y_tile, run_col, col_ok, F_W,
               RUN: tl.constexpr, F_H: tl.constexpr, RUNS: tl.constexpr, BLOCK_N: tl.constexpr):
    """One forward step: the input row's FMAs into every held output row, the finished row stored, the window
    rolled by one row."""
    xs = _widen(cur, RUN + F_H - 1)
    for tw in tl.static_range(F_H):
        if tw < F_W:
            out = ()
            for i in tl.static_range(F_H * RUN):  # i = t_h·RUN + j
                out = out + (acc[i] + weights[(i // RUN) * F_H + tw] * xs[i % RUN + tw],)
            acc = out
    # acc[F_H − 1] has seen every filter row: output row o_h0 + s − (F_H − 1), once s ≥ F_H − 1.
    if s >= F_H - 1:
        y_row = y_ptr + (y_plane + oh0 + s - (F_H - 1)) * OUT_W * C
        for j in tl.static_range(RUN):
            ok = (run_col + j < OUT_W)[:, None] & col_ok[None, :]
            tl.store(y_row + y_tile + j * C, acc[(F_H - 1) * RUN + j].to(y_ptr.dtype.element_ty), mask=ok)
    return _zeros_tuple(RUN, RUNS, BLOCK_N) + acc[:(F_H - 1) * RUN]


# Register budgets (Triton ``maxnreg``) of the 2D ``run`` programs, keyed by (weight?, RUN, BLOCK_N, F_H, warps,
# stages, RUNS, vec). Survey (``bench/results/2026-11-28_h200_s26/dwrun_register_survey/``): every 2D ``default``
# dwrun tile compiled for sm_90 at 160, 128, 112, 96, 80, 64, 56 and 48 registers (ptxas, Triton 3.6); 16 tiles
# compile without spilling at a budget that puts one more program on an SM (or more), bf16 and fp16 alike. ptxas, left
# to itself, spends what the fewest programs an SM can have: 7×7 backward-weight runs of 4 on 2 warps take 150
# registers (6 programs an SM), 127 at a 128 budget (8). Timed on the H200 against ptxas's choice, same binaries
# otherwise, 21 stride-1 depthwise layer-directions (``dwrun_regcap_probe/``; the same binary timed twice moved
# 0.998–1.013×): the 12 tiles below gained on most layers, geomean 1.01–1.11× a tile (up to 1.23×: 8×16×3 data runs
# on 14×14, 16.8 → 13.6 µs; 1.20× 7×16×3 on 8 warps; the one loss beyond that noise, 14×16×3 data runs on c32 112²,
# 0.97×). Left out: 7×32×7 (251 → 160 registers: 0.91–0.96×), and 8×64×3 data, 7×16×3 / 7×32×3 backward-weight on 4
# warps (geomean 0.995–1.02×, mostly below 1). No layer's fastest kernel changed by more than 1.7 %: these are rarely
# the best tiles. Tiles not listed spill at every budget that gains
# a program (the 7×7 forward / backward-data runs: 8–24 bytes) or gain none.
_RUN_REGISTER_BUDGETS = {
    # forward / backward-data
    (False, 14, 16, 3, 4, 1, 8, 1): 96,    # 119 → 93 registers, 4 → 5 programs an SM; 0.97–1.19×
    (False, 8, 16, 3, 2, 2, 4, 1): 80,     # 87 → 80, 11 → 12; 0.99–1.23×
    # backward-weight
    (True, 14, 32, 3, 2, 1, 2, 1): 112,    # 136 → 102, 7 → 9; 1.01–1.05×
    (True, 4, 16, 5, 4, 2, 8, 1): 80,      # 107 → 80, 4 → 6; 1.01–1.02×
    (True, 4, 16, 7, 2, 2, 4, 1): 128,     # 150 → 127, 6 → 8; 1.01–1.02×
    (True, 4, 16, 7, 4, 2, 8, 1): 128,     # 150 → 127, 3 → 4; 1.01–1.06×
    (True, 4, 32, 7, 2, 2, 2, 1): 128,     # 148 → 128, 6 → 8; 1.01–1.03×
    (True, 7, 128, 3, 4, 2, 1, 1): 80,     # 96 → 80, 5 → 6; 1.00–1.01×
    (True, 7, 128, 5, 4, 2, 1, 1): 128,    # 142 → 123, 3 → 4; 1.01–1.03×
    (True, 7, 16, 3, 8, 2, 16, 1): 80,     # 99 → 80, 2 → 3; 1.00–1.20×
    (True, 7, 16, 5, 4, 2, 8, 1): 128,     # 145 → 123, 3 → 4; 1.02–1.09×
    (True, 7, 32, 5, 2, 2, 2, 1): 128,     # 146 → 123, 6 → 8; 1.01×
}


def run_register_budget(config: KernelConfig) -> int | None:
    """The ``run`` program's register budget (:data:`_RUN_REGISTER_BUDGETS`), 2D 16-bit tiles with 32-bit indices;
    None elsewhere (3D backward-weight walks its depth coordinates in registers too: not surveyed)."""
    if config.ndim != 2 or config.index64 or config.dtype.value not in ("bf16", "fp16"):
        return None
    key = (config.direction is Direction.BACKWARD_WEIGHT, config.block_m, config.block_n, config.block_k,
           config.num_warps, config.num_stages, config.group_m, config.vec)
    return _RUN_REGISTER_BUDGETS.get(key)


def pipeline_stages(config: KernelConfig) -> int:
    """Forward / backward-data ``num_stages`` 3 and 4: the input rows' loads go through Triton's software pipeline
    (``tl.range(num_stages=…)``: ``cp.async`` into shared memory, that many stages); 0 otherwise (1: no prefetch,
    2: the next row in registers). Triton pipelines loads of 4 bytes or more a thread: ``vec`` 2 or 4.
    Backward-weight keeps 1 and 2. Triton 3.6 does not pipeline a loop that carries a loaded row further than the
    next iteration (the dY window holds each row ``F_H`` steps); walked ``F_H`` steps an iteration it does, but the
    unrolled walk holds 128-242 registers, and on the H200 (six 3×3 layers, two and four channels a thread, 64
    splits) it ran 0.71-1.09× the best earlier backward-weight tile: faster on one layer, within 1 % on one,
    slower on four (``bench/results/2026-11-28_h200_s27/dwrun_stages_probe_weight``): not kept."""
    return config.num_stages if config.num_stages >= 3 else 0


def channel_vectors(config: KernelConfig) -> dict[str, int]:
    """``vec`` 2 (4): ``CHANNELS`` promised divisible by 2 (4) (support.py refuses other counts). The same source
    then compiles to 32-bit (64-bit) loads and stores: with every row offset a multiple of ``C``, Triton proves two
    (four) contiguous, aligned 16-bit values a thread where ``vec`` 1 proves one, and the tile's layout gives each
    thread that many neighbouring channels (tiles of ``RUNS · BLOCK_N = 32 · vec × warps``)."""
    return {"CHANNELS": config.vec} if config.vec in (2, 4) else {}


class DwrunData:
    """Forward or backward-data (2D): one launch, the weights read straight from ``W``."""

    families = frozenset({Family.DWRUN})

    def __init__(self, direction: Direction):
        if direction is Direction.BACKWARD_WEIGHT:
            raise ValueError("direction: DwrunData runs forward and backward_data")
        self.direction = direction

    def programs(self, config: KernelConfig) -> dict[str, Program]:
        ptr = pointer_type(config.dtype)
        ints = int_type(config)
        types = {"x_ptr": ptr, "w_ptr": ptr, "y_ptr": ptr, **{name: ints for name in _DATA_PARAMS}}
        constexprs = {"RUN": config.block_m, "RUNS": config.group_m, "BLOCK_N": config.block_n, "F_H": config.block_k,
                      "FLIP": self.direction is Direction.BACKWARD_DATA, "PREFETCH": config.num_stages == 2,
                      "PIPELINE": pipeline_stages(config), "INDEX64": config.index64}
        return {"run": Program(_dwrun_data_kernel, constexprs, types, config.num_warps, 1,
                               divisible=channel_vectors(config), max_registers=run_register_budget(config))}

    def workspace_elements(self, problem: ConvProblem, config: KernelConfig) -> int:
        return 0

    def plan(self, problem, config, first, second, out, workspace) -> list[Launch]:
        geo = data_geometry(problem)
        rows = dwrun_data_rows(problem, config, geo)
        (_, in_h, in_w), (_, out_h, out_w) = geo["in"], geo["out"]
        f_w = geo["filter"][2]
        _, pad_h, pad_w = geo["pad"]
        grid = (cdiv(problem.in_channels, config.block_n) * cdiv(out_w, config.block_m * config.group_m)
                * cdiv(out_h, rows) * problem.batch, 1, 1)
        args = (problem.batch, problem.in_channels, in_h, in_w, out_h, out_w, f_w, pad_h, pad_w, rows)
        return [Launch("run", grid, (first, second, out, *args))]


class DwrunBackwardWeight:
    direction = Direction.BACKWARD_WEIGHT
    families = frozenset({Family.DWRUN})

    def programs(self, config: KernelConfig) -> dict[str, Program]:
        ptr = pointer_type(config.dtype)
        ints = int_type(config)
        out_type = "*fp32" if config.split_k > 1 else ptr
        types = {"x_ptr": ptr, "dy_ptr": ptr, "out_ptr": out_type, **{name: ints for name in _PARAMS}}
        constexprs = {"RUN": config.block_m, "RUNS": config.group_m, "BLOCK_N": config.block_n, "F_H": config.block_k,
                      "PREFETCH": config.num_stages == 2, "INDEX64": config.index64}
        fixed = fixed_sizes(config, _dwrun_bwd_weight_kernel)
        return with_split_reduce({"run": Program(_dwrun_bwd_weight_kernel, constexprs, types, config.num_warps, 1,
                                                 fixed, channel_vectors(config),
                                                 max_registers=run_register_budget(config))}, config)

    def workspace_elements(self, problem: ConvProblem, config: KernelConfig) -> int:
        return weight_partials_elements(problem, config)

    def plan(self, problem, config, first, second, out, workspace) -> list[Launch]:
        rows, items_per_split = dwrun_tiling(problem, config)
        in_d, in_h, in_w = as3d(problem.input_size, 1)
        out_d, out_h, out_w = as3d(problem.output_size, 1)
        f_d, _, f_w = as3d(problem.filter_size, 1)
        str_d = as3d(problem.stride, 1)[0]
        dil_d = as3d(problem.dilation, 1)[0]
        pad_d, pad_h, pad_w = as3d(problem.pad_begin, 0)
        target = workspace if config.split_k > 1 else out
        grid = (cdiv(problem.in_channels, config.block_n) * f_d, config.split_k, 1)
        args = (problem.batch, problem.in_channels, in_d, in_h, in_w, out_d, out_h, out_w, f_d, f_w,
                str_d, dil_d, pad_d, pad_h, pad_w, rows, items_per_split)
        launches = [Launch("run", grid, (first, second, target, *args))]
        if config.split_k > 1:
            launches.append(split_reduce_launch(config, workspace, out, problem.weight_elements))
        return launches
