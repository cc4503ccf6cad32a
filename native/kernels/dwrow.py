"""Depthwise backward-weight one filter row per program (``dwrow``), 2D and 3D (2D runs as 3D with depth 1),
for C/G = K/G = 1 with 16-byte channel vectors, any stride, dilation and padding.

``dW[k, t_d, t_h, t_w] = Σ_{n, o_d, o_h, o_w} dY[n, o, k] · X[n, i(o, t), k]`` with
``i(o, t) = o·stride − pad_begin + t·dilation`` per spatial dimension (notation of direct.py).

Why one filter row: the rolling backward-weight walk (dwroll.py) holds ``F_H × F_H`` fp32 accumulator tiles,
so a 7×7 program keeps 2 elements per thread and few programs fit an SM (H200, session 10: n32 c96 56² at
131 µs against cuDNN's 77; c768 7² 7×7 at 0.42× cuDNN). Here the grid has one program per
``(channel block, t_d, t_h, split)``: it holds ``F_W`` accumulator tiles of ``BLOCK_W × BLOCK_N`` and, for each
output row ``o_h`` of its work items, loads the dY row once and the one input row ``o_h·s_h − p_h + t_h·d_h``
that filter row pairs with, at its ``F_W`` column shifts (the same cache lines: L1 hits):
``acc[t_w] += dY[o_h, strip, k] · X[i_h, strip·s_w − p_w + t_w·d_w, k]``. The price is reading dY and the
input ``F_D·F_H`` times through L2 instead of once; the gain is ``F_H`` times fewer live values per element,
so wider 16-byte loads, more programs per SM, and strides and dilations on every axis.

A work item is one ``(n, o_d, column strip, row chunk)``; split ``s`` of ``split_k`` owns a contiguous run of
items, sums each tap's tile over the strip at the end and writes ``workspace[s]`` (same layout as dW); the
shared deterministic reduction (split_reduce.py) adds the splits in a fixed order. No GEMM view: with
C/G = K/G = 1 every dW element is a dot over positions alone, so these are CUDA-core FMA kernels.

Config: ``block_m`` = ``BLOCK_W`` (output columns of a strip), ``block_n`` = channels, ``block_k`` = the most
filter columns unrolled (``F_W ≤ block_k``, any ``F_H`` and ``F_D``), ``num_stages`` 2 = each row's loads
issued one row ahead of its FMAs, ``split_k`` the splits.

Measured (H200, ``bench/results/2026-11-27_h200_s17/``): 1.15–1.7× faster than every other kernel on the
stride-2 3×3 depthwise layers of MobileNetV2, which dwroll cannot run (n32 c96 112×112: 46.3 µs, cuDNN 56.7);
at stride 1 mostly slower than dwroll: the row walk is latency-bound (more splits make 7×7 layers slower).

``vec`` 1: the scalar binary, for C/G = 1 and any K/G = M (depthwise multipliers) and any channel count:
``dW[k, t] = Σ_{n, o} dY[n, o, k] · X[n, i(o, t), k // M]``. The same walk over output channels ``k`` (dY runs
contiguous, 16-bit loads a channel), each input value gathered at channel ``k // M`` (the M output channels of a
group read the same address: one sector). Why: those problems ran on the general direct binary or gmerge's
block-diagonal tiles (n32 g239 K/G 3 3×3×3 stride (1, 2, 2): gmerge 64×32, merge 16, of whose tile 16 × 3 entries
are a group's, 2.3 %: 2.96 ms, 1.1 G instructions issued, 93 % L2 hits; Nsight Compute, H200, session 35).
Measured (H200, ``bench/results/2026-11-29_h200_s35/multiplier_calls3-4``, every ``default`` kernel and cuDNN): the
fastest kernel on 5 of the 27 synthetic multiplier and 3D depthwise problems' backward-weight, 1.1-1.5× the best
before it (n32 g239 K/G 3: 3.00 → 2.00 ms, cuDNN 2.94; 2D n24 g471 K/G 4 45²: 932 → 709 µs, cuDNN 7,052). It is
still 23× that g239 problem's bound (86 µs; not profiled). What the compiler shows: each thread holds one channel of
several strip columns (the runs are unaligned), so the per-column masks and offsets are per element (8 elements a
thread: 202 registers at 3 taps; ``rules.DWROW_SCALAR_WEIGHT_TILES``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.kernels.base import Launch, Program, as3d, cdiv, int_type, pointer_type
from tiledispatch.native.kernels.direct import _f32
from tiledispatch.native.kernels.dwroll import _weight_item, _weight_program, _zeros_tuple
from tiledispatch.native.kernels.dwroll_tiling import dwrow_tiling
from tiledispatch.native.kernels.split_reduce import split_reduce_launch, weight_partials_elements, with_split_reduce
from tiledispatch.native.problem import ConvProblem, Direction

_PARAMS = ("BATCH", "CHANNELS", "IN_D", "IN_H", "IN_W", "OUT_D", "OUT_H", "OUT_W", "F_D", "F_H", "F_W",
           "STR_D", "STR_H", "STR_W", "DIL_D", "DIL_H", "DIL_W", "PAD_D", "PAD_H", "PAD_W", "ROWS", "ITEMS_PER_SPLIT")
# The scalar binary's: the groups (= input channels) and output channels a group (M) instead of CHANNELS.
_SCALAR_PARAMS = ("BATCH", "GROUPS", "KG", *_PARAMS[2:])


@triton.jit
def _row_pair(x_ptr, dy_ptr, o, oh_end, th, STR_H, DIL_H, PAD_H, IN_H, dy_plane, x_plane, OUT_W, IN_W, C, dy_tile,
              ow_ok, base_w, DIL_W, cols, col_ok, F_W, TAPS_W: tl.constexpr):
    """Raw tiles of output row ``o``: its dY row and the input row filter row ``th`` pairs it with, at each
    filter column's shift (nothing loads for rows past ``oh_end`` or input rows outside the tensor)."""
    ih = o * STR_H - PAD_H + th * DIL_H
    ok_row = (o < oh_end) & (ih >= 0) & (ih < IN_H)
    dyv = tl.load(dy_ptr + (dy_plane + o) * OUT_W * C + dy_tile, mask=ow_ok & ok_row, other=0.0)
    x_row = (x_plane + ih) * IN_W * C
    xs = ()
    for tw in tl.static_range(TAPS_W):
        i_w = base_w + tw * DIL_W
        # 0 ≤ i_w < IN_W as one unsigned compare (a negative i_w wraps past any size < 2^31).
        ok = ok_row & (tw < F_W) & (i_w.to(tl.uint32, bitcast=True) < IN_W.to(tl.uint32))
        xs = xs + (tl.load(x_ptr + x_row + ((i_w * C)[:, None] + cols[None, :]), mask=ok[:, None] & col_ok[None, :],
                           other=0.0),)
    return dyv, xs


@triton.jit
def _mac_taps(acc, dyv, xs, TAPS_W: tl.constexpr):
    """acc[t_w] += dY · X shifted by filter column t_w, for every unrolled column."""
    dyf = _f32(dyv)
    out = ()
    for tw in tl.static_range(TAPS_W):
        out = out + (acc[tw] + dyf * _f32(xs[tw]),)
    return out


@triton.jit
def _dwrow_bwd_weight_kernel(
    x_ptr, dy_ptr, out_ptr,
    BATCH, CHANNELS, IN_D, IN_H, IN_W, OUT_D, OUT_H, OUT_W, F_D, F_H, F_W,
    STR_D, STR_H, STR_W, DIL_D, DIL_H, DIL_W, PAD_D, PAD_H, PAD_W, ROWS, ITEMS_PER_SPLIT,
    BLOCK_W: tl.constexpr, BLOCK_N: tl.constexpr, TAPS_W: tl.constexpr, PREFETCH: tl.constexpr,
    INDEX64: tl.constexpr,
):
    """See the module docstring. Grid = (channel blocks × F_D × F_H, split_k); program 0's axis runs channel
    blocks fastest, so programs in flight share dY and input rows in L2."""
    # _weight_program reads the depth tap from program_id(0) // channel blocks: here that is t_d·F_H + t_h.
    C, tap_row, split, num_w, num_h, first, last, cols, col_ok, strip = _weight_program(
        BATCH, CHANNELS, OUT_D, OUT_H, OUT_W, ROWS, ITEMS_PER_SPLIT, BLOCK_W, BLOCK_N)
    th = tap_row % F_H
    td = tap_row // F_H
    acc = _zeros_tuple(TAPS_W, BLOCK_W, BLOCK_N)
    for item in range(first, last):
        pid_w, pid_h, od, n, i_d = _weight_item(item, num_w, num_h, OUT_D, STR_D, PAD_D, DIL_D, td, INDEX64)
        if (i_d >= 0) & (i_d < IN_D):  # uniform: otherwise this depth tap sees only padding
            ow = pid_w * BLOCK_W + strip
            ow_ok = (ow < OUT_W)[:, None] & col_ok[None, :]
            base_w = ow * STR_W - PAD_W
            oh0 = pid_h * ROWS
            oh_end = tl.minimum(oh0 + ROWS, OUT_H)
            dy_plane = (n * OUT_D + od) * OUT_H
            x_plane = (n * IN_D + i_d) * IN_H
            dy_tile = (ow * C)[:, None] + cols[None, :]
            if PREFETCH:
                nxt_dy, nxt_x = _row_pair(x_ptr, dy_ptr, oh0, oh_end, th, STR_H, DIL_H, PAD_H, IN_H, dy_plane, x_plane,
                                          OUT_W, IN_W, C, dy_tile, ow_ok, base_w, DIL_W, cols, col_ok, F_W, TAPS_W)
                for o in range(oh0, oh_end):
                    cur_dy = nxt_dy
                    cur_x = nxt_x
                    nxt_dy, nxt_x = _row_pair(x_ptr, dy_ptr, o + 1, oh_end, th, STR_H, DIL_H, PAD_H, IN_H, dy_plane,
                                              x_plane, OUT_W, IN_W, C, dy_tile, ow_ok, base_w, DIL_W, cols, col_ok,
                                              F_W, TAPS_W)
                    acc = _mac_taps(acc, cur_dy, cur_x, TAPS_W)
            else:
                for o in range(oh0, oh_end):
                    dyv, xs = _row_pair(x_ptr, dy_ptr, o, oh_end, th, STR_H, DIL_H, PAD_H, IN_H, dy_plane, x_plane,
                                        OUT_W, IN_W, C, dy_tile, ow_ok, base_w, DIL_W, cols, col_ok, F_W, TAPS_W)
                    acc = _mac_taps(acc, dyv, xs, TAPS_W)

    # dW[k, tap] at k·taps + tap (C/G = 1), tap = (t_d·F_H + t_h)·F_W + t_w; split partials: workspace[split].
    taps = F_D * F_H * F_W
    out_ptrs = out_ptr + split.to(tl.int64) * (C * taps) + (cols * taps + tap_row * F_W)
    for tw in tl.static_range(TAPS_W):
        tl.store(out_ptrs + tw, tl.sum(acc[tw], axis=0).to(out_ptr.dtype.element_ty), mask=col_ok & (tw < F_W))


@triton.jit
def _scalar_row_pair(x_ptr, dy_ptr, o, oh_end, th, STR_H, DIL_H, PAD_H, IN_H, dy_plane, x_plane, OUT_W, IN_W,
                     K_TOTAL, GROUPS, dy_tile, ow_ok, base_w, DIL_W, x_cols, col_ok, F_W, TAPS_W: tl.constexpr):
    """:func:`_row_pair` of the scalar binary: dY rows of ``K_TOTAL`` channels, input rows of ``GROUPS`` channels
    read at each output channel's group ``x_cols``."""
    ih = o * STR_H - PAD_H + th * DIL_H
    ok_row = (o < oh_end) & (ih >= 0) & (ih < IN_H)
    dyv = tl.load(dy_ptr + (dy_plane + o) * OUT_W * K_TOTAL + dy_tile, mask=ow_ok & ok_row, other=0.0)
    x_row = (x_plane + ih) * IN_W * GROUPS
    xs = ()
    for tw in tl.static_range(TAPS_W):
        i_w = base_w + tw * DIL_W
        ok = ok_row & (tw < F_W) & (i_w.to(tl.uint32, bitcast=True) < IN_W.to(tl.uint32))
        xs = xs + (tl.load(x_ptr + x_row + ((i_w * GROUPS)[:, None] + x_cols[None, :]),
                           mask=ok[:, None] & col_ok[None, :], other=0.0),)
    return dyv, xs


@triton.jit
def _dwrow_scalar_bwd_weight_kernel(
    x_ptr, dy_ptr, out_ptr,
    BATCH, GROUPS, KG, IN_D, IN_H, IN_W, OUT_D, OUT_H, OUT_W, F_D, F_H, F_W,
    STR_D, STR_H, STR_W, DIL_D, DIL_H, DIL_W, PAD_D, PAD_H, PAD_W, ROWS, ITEMS_PER_SPLIT,
    BLOCK_W: tl.constexpr, BLOCK_N: tl.constexpr, TAPS_W: tl.constexpr, PREFETCH: tl.constexpr,
    INDEX64: tl.constexpr,
):
    """The scalar binary (module docstring, ``vec`` 1): C/G = 1, ``KG`` output channels a group, any channel count.
    Grid and work items as :func:`_dwrow_bwd_weight_kernel`'s, over the ``GROUPS·KG`` output channels."""
    K_TOTAL = GROUPS * KG
    num_c = tl.cdiv(K_TOTAL, BLOCK_N)
    pid_c = tl.program_id(0) % num_c
    tap_row = tl.program_id(0) // num_c  # t_d·F_H + t_h
    split = tl.program_id(1)
    num_w = tl.cdiv(OUT_W, BLOCK_W)
    num_h = tl.cdiv(OUT_H, ROWS)
    first = split * ITEMS_PER_SPLIT
    last = tl.minimum(first + ITEMS_PER_SPLIT, BATCH * OUT_D * num_w * num_h)
    cols = pid_c * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < K_TOTAL
    x_cols = tl.minimum(cols, K_TOTAL - 1) // KG  # the output channel's group: its one input channel
    strip = tl.arange(0, BLOCK_W)
    th = tap_row % F_H
    td = tap_row // F_H
    acc = _zeros_tuple(TAPS_W, BLOCK_W, BLOCK_N)
    for item in range(first, last):
        pid_w, pid_h, od, n, i_d = _weight_item(item, num_w, num_h, OUT_D, STR_D, PAD_D, DIL_D, td, INDEX64)
        if (i_d >= 0) & (i_d < IN_D):  # uniform: otherwise this depth tap sees only padding
            ow = pid_w * BLOCK_W + strip
            ow_ok = (ow < OUT_W)[:, None] & col_ok[None, :]
            base_w = ow * STR_W - PAD_W
            oh0 = pid_h * ROWS
            oh_end = tl.minimum(oh0 + ROWS, OUT_H)
            dy_plane = (n * OUT_D + od) * OUT_H
            x_plane = (n * IN_D + i_d) * IN_H
            dy_tile = (ow * K_TOTAL)[:, None] + cols[None, :]
            if PREFETCH:
                nxt_dy, nxt_x = _scalar_row_pair(x_ptr, dy_ptr, oh0, oh_end, th, STR_H, DIL_H, PAD_H, IN_H, dy_plane,
                                                 x_plane, OUT_W, IN_W, K_TOTAL, GROUPS, dy_tile, ow_ok, base_w, DIL_W,
                                                 x_cols, col_ok, F_W, TAPS_W)
                for o in range(oh0, oh_end):
                    cur_dy = nxt_dy
                    cur_x = nxt_x
                    nxt_dy, nxt_x = _scalar_row_pair(x_ptr, dy_ptr, o + 1, oh_end, th, STR_H, DIL_H, PAD_H, IN_H,
                                                     dy_plane, x_plane, OUT_W, IN_W, K_TOTAL, GROUPS, dy_tile, ow_ok,
                                                     base_w, DIL_W, x_cols, col_ok, F_W, TAPS_W)
                    acc = _mac_taps(acc, cur_dy, cur_x, TAPS_W)
            else:
                for o in range(oh0, oh_end):
                    dyv, xs = _scalar_row_pair(x_ptr, dy_ptr, o, oh_end, th, STR_H, DIL_H, PAD_H, IN_H, dy_plane,
                                               x_plane, OUT_W, IN_W, K_TOTAL, GROUPS, dy_tile, ow_ok, base_w, DIL_W,
                                               x_cols, col_ok, F_W, TAPS_W)
                    acc = _mac_taps(acc, dyv, xs, TAPS_W)

    # dW[k, tap] at k·taps + tap (C/G = 1); split partials: workspace[split].
    taps = F_D * F_H * F_W
    out_ptrs = out_ptr + split.to(tl.int64) * (K_TOTAL * taps) + (cols * taps + tap_row * F_W)
    for tw in tl.static_range(TAPS_W):
        tl.store(out_ptrs + tw, tl.sum(acc[tw], axis=0).to(out_ptr.dtype.element_ty), mask=col_ok & (tw < F_W))


class DwrowBackwardWeight:
    direction = Direction.BACKWARD_WEIGHT
    families = frozenset({Family.DWROW})

    def programs(self, config: KernelConfig) -> dict[str, Program]:
        ptr = pointer_type(config.dtype)
        ints = int_type(config)
        out_type = "*fp32" if config.split_k > 1 else ptr
        scalar = config.vec == 1
        types = {"x_ptr": ptr, "dy_ptr": ptr, "out_ptr": out_type,
                 **{name: ints for name in (_SCALAR_PARAMS if scalar else _PARAMS)}}
        constexprs = {"BLOCK_W": config.block_m, "BLOCK_N": config.block_n, "TAPS_W": config.block_k,
                      "PREFETCH": config.num_stages == 2, "INDEX64": config.index64}
        kernel = _dwrow_scalar_bwd_weight_kernel if scalar else _dwrow_bwd_weight_kernel
        return with_split_reduce({"row": Program(kernel, constexprs, types, config.num_warps, 1)}, config)

    def workspace_elements(self, problem: ConvProblem, config: KernelConfig) -> int:
        return weight_partials_elements(problem, config)

    def plan(self, problem, config, first, second, out, workspace) -> list[Launch]:
        rows, items_per_split, _ = dwrow_tiling(problem, config)
        in_d, in_h, in_w = as3d(problem.input_size, 1)
        out_d, out_h, out_w = as3d(problem.output_size, 1)
        f_d, f_h, f_w = as3d(problem.filter_size, 1)
        str_d, str_h, str_w = as3d(problem.stride, 1)
        dil_d, dil_h, dil_w = as3d(problem.dilation, 1)
        pad_d, pad_h, pad_w = as3d(problem.pad_begin, 0)
        target = workspace if config.split_k > 1 else out
        grid = (cdiv(problem.out_channels, config.block_n) * f_d * f_h, config.split_k, 1)
        channels = (problem.groups, problem.k_per_group) if config.vec == 1 else (problem.in_channels,)
        args = (problem.batch, *channels, in_d, in_h, in_w, out_d, out_h, out_w, f_d, f_h, f_w,
                str_d, str_h, str_w, dil_d, dil_h, dil_w, pad_d, pad_h, pad_w, rows, items_per_split)
        launches = [Launch("row", grid, (first, second, target, *args))]
        if config.split_k > 1:
            launches.append(split_reduce_launch(config, workspace, out, problem.weight_elements))
        return launches
