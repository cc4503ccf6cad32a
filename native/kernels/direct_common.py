"""Row and line bookkeeping shared by the direct kernels' binaries (:mod:`~tiledispatch.native.kernels.direct`,
:mod:`~tiledispatch.native.kernels.direct_multiplier`), their host-side pass size, and the fp32 widening every
CUDA-core kernel uses."""

from __future__ import annotations

import triton
import triton.language as tl

from tiledispatch.native.configs import KernelConfig


def rows_per_pass(config: KernelConfig, elements: int) -> int:
    """Rows per pass of a forward / backward-data program whose accumulator may take ``elements`` fp32 values a
    thread (half that with 64-bit offsets): larger tiles run several passes rather than spilling."""
    if config.index64:
        elements //= 2
    return max(1, min(config.block_m, elements * 32 * config.num_warps // config.block_n))


@triton.jit
def _f32(value):
    """Widen to fp32. bf16 is the top half of an fp32, so one shift or mask per element does it
    (the generic conversion spends a byte permute and a shift on every other element)."""
    if value.dtype == tl.bfloat16:
        return (value.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)
    return value.to(tl.float32)


@triton.jit
def _block_origin(M, E_D, E_H, E_W, N_TOTAL, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, INDEX64: tl.constexpr):
    """(channel block, first row, its position (n, d, h, w) over extents E, rows left) of this program.

    Channel blocks vary fastest: the programs in flight cover few positions, whose halo rows the
    neighbouring position blocks then find in L2. The block's first position is decomposed in
    scalars; its rows are offsets from it. With ``INDEX64`` the products are 64-bit and the results
    narrowed to 32 bits (every single size is < 2^31)."""
    pid = tl.program_id(0)
    if INDEX64:
        pid = pid.to(tl.int64)
    num_n = tl.cdiv(N_TOTAL, BLOCK_N)
    pid_n = pid % num_n
    pid_m = pid // num_n
    row0 = pid_m * BLOCK_M
    s_w = row0 % E_W
    s_t = row0 // E_W
    s_h = s_t % E_H
    s_t = s_t // E_H
    s_d = s_t % E_D
    s_nb = s_t // E_D
    rows_left = tl.minimum(M - row0, BLOCK_M)
    if INDEX64:
        s_w, s_h, s_d, s_nb = s_w.to(tl.int32), s_h.to(tl.int32), s_d.to(tl.int32), s_nb.to(tl.int32)
        rows_left, pid_n = rows_left.to(tl.int32), pid_n.to(tl.int32)
    return pid_n, row0, s_nb, s_d, s_h, s_w, rows_left


@triton.jit
def _row_positions(r, s_nb, s_d, s_h, s_w, E_D, E_H, E_W):
    """Positions (n, d, h, w) over extents E of the block rows ``r`` past the block's first position:
    carries only, no division of the row index by a product of extents."""
    w_lin = s_w + r
    w = w_lin % E_W
    h_lin = s_h + w_lin // E_W
    h = h_lin % E_H
    d_lin = s_d + h_lin // E_H
    d = d_lin % E_D
    nb = s_nb + d_lin // E_D
    return nb, d, h, w


@triton.jit
def _line_rows(line0, line_end, oh0, od0, nb0, lb, LINE_BLOCK, OUT_D, OUT_H, STR_D, STR_H, off_d, off_h, IN_D, IN_H,
               INDEX64: tl.constexpr):
    """Backward-weight line step: each tile row's (n, input d, input h) and whether its line exists.

    ``(nb0, od0, oh0)`` is the step's first output line; row line ``lb`` adds ``lb`` lines (the
    plan keeps LINE_BLOCK ≤ OUT_H, so lb carries into od, and od into n, at most once). Rows past
    LINE_BLOCK·ROW_WIDTH have lb ≥ LINE_BLOCK ≥ lines left: masked here."""
    oh = oh0 + lb
    carry = oh >= OUT_H
    oh = tl.where(carry, oh - OUT_H, oh)
    od = od0 + carry.to(od0.dtype)
    carry = od >= OUT_D
    od = tl.where(carry, od - OUT_D, od)
    nb = nb0 + carry.to(nb0.dtype)
    i_h = oh * STR_H + off_h
    i_d = od * STR_D + off_d
    lines_left = tl.minimum(line_end - line0, LINE_BLOCK).to(lb.dtype)
    ok_line = (lb < lines_left) & (i_h >= 0) & (i_h < IN_H) & (i_d >= 0) & (i_d < IN_D)
    if INDEX64:
        nb = nb.to(tl.int64)
    return nb, i_d, i_h, ok_line


@triton.jit
def _next_lines(oh0, od0, nb0, LINE_BLOCK, OUT_D, OUT_H):
    """The next step's first output line: ``LINE_BLOCK`` lines on, carried through h, d and n."""
    oh0 += LINE_BLOCK
    step_carry = (oh0 >= OUT_H).to(oh0.dtype)
    oh0 -= step_carry * OUT_H
    od0 += step_carry
    step_carry = (od0 >= OUT_D).to(od0.dtype)
    od0 -= step_carry * OUT_D
    nb0 += step_carry
    return oh0, od0, nb0
