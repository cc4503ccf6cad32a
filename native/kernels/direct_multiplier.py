"""The direct kernels' depthwise-multiplier binaries: C/G = 1, K/G = M > 1 (each input channel feeds M outputs).

Notation as in :mod:`~tiledispatch.native.kernels.direct`; here ``g`` is both the group and its one input channel
(``C_T = G``) and the group's output channels are ``k = g·M + j``, ``j < M``. The general binary gathers
``X[..., k // M]`` once per output column (one scalar load, 64-bit address and conversion per FMA: 25
instructions a FMA in its SASS, H200 Nsight Compute, session 23). These binaries tile the *groups* instead, so
every X or dX access is a contiguous run of channels as in the depthwise binary, and share what the M outputs
of a group share:

* forward: ``Y[n,o,g·M+j] = Σ_t X[n, i(o,t), g] · W[g·M+j, t]``. A program owns ``BLOCK_M`` positions ×
  ``BLOCK_N`` groups × ``J_BLOCK`` consecutive ``j`` (grid axis 0: row blocks × group blocks × j chunks, the
  chunk fastest so the chunks of one X window run together). Each X value is loaded and widened once per
  tap and feeds ``J_BLOCK`` accumulators (one per ``j``; a uniform branch skips ``j ≥ M``), so an FMA costs
  ``1 / J_BLOCK`` loads of X and ``1 / rows per thread`` loads of W.
* backward_data: ``dX[n,i,g] = Σ_t Σ_{j<M} dY[n, o(i,t), g·M+j] · W[g·M+j, t]`` — the depthwise binary's
  residue-class tiling over groups, with the M terms of a tap summed in a loop (each dY value is used once:
  one load per FMA, but a cheap one: one hoisted address per element, no per-tap index work).
* backward_weight: ``dW[g·M+j, t] = Σ_{n,o} dY[n,o,g·M+j] · X[n, i(o,t), g]`` — the tap-block tiling of the
  direct backward-weight kernel over groups, ``J_BLOCK`` accumulators per program: each X value loaded once
  serves the ``J_BLOCK`` outputs of its group (``1 + 1 / J_BLOCK`` loads per FMA instead of 2). Grid =
  (group blocks × j chunks × tap blocks, split_k), split-K partials reduced as in the direct kernel.

``J_BLOCK`` (1, 2 or 4) comes from the config: the accumulators of one program must fit in registers beside its
row state (:func:`j_block`). Weight columns of groups past the last read the last group's weights (unmasked,
never stored).
"""

from __future__ import annotations

import triton
import triton.language as tl

from tiledispatch.native.configs import KernelConfig
from tiledispatch.native.kernels.direct_common import _block_origin, _f32, _line_rows, _next_lines, _row_positions

#: Accumulator elements a thread may hold across the j outputs of a program (the depthwise binary's
#: 32 fp32 registers of row-pass accumulator, spread over J_BLOCK tiles).
ACCUMULATOR_ELEMENTS = 32


def j_block(config: KernelConfig, elements_per_tile: int) -> int:
    """Output channels per group a program computes at once: 4, or fewer where 4 tiles of
    ``elements_per_tile`` accumulator elements per thread would not fit in :data:`ACCUMULATOR_ELEMENTS` —
    half that for unvectorised (v1) tiles, whose every element carries its own addresses (the 64×32 v1
    backward-weight tile spilled with 2 tiles of 16)."""
    budget = ACCUMULATOR_ELEMENTS if config.vec == 8 else ACCUMULATOR_ELEMENTS // 2
    for candidate in (4, 2):
        if candidate * elements_per_tile <= budget:
            return candidate
    return 1


def data_pass_rows(config: KernelConfig, j_count: int) -> int:
    """Rows per pass of the forward / backward-data multiplier binaries: ``j_count`` accumulator tiles of at
    most ``ACCUMULATOR_ELEMENTS / j_count`` elements per thread (half with 64-bit offsets)."""
    elements = ACCUMULATOR_ELEMENTS // j_count
    if config.index64:
        elements //= 2
    return max(1, min(config.block_m, elements * 32 * config.num_warps // config.block_n))


@triton.jit
def _j_fma(acc, xv, w_ptr, w_at, w_off, use):
    """acc += X · W[g·M + j, tap] for one j (``w_at`` its scalar offset); skipped, uniformly, when ``use`` is false."""
    if use:
        wv = tl.load(w_ptr + w_at + w_off)
        acc += xv * _f32(wv)[None, :]
    return acc


@triton.jit
def _j_store(y_ptr, acc, y_off, mask, use):
    if use:
        tl.store(y_ptr + y_off, acc.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _direct_fwd_multiplier_kernel(
    x_ptr, w_ptr, y_ptr,
    BATCH, GROUPS, CG, KG, IN_D, IN_H, IN_W, OUT_D, OUT_H, OUT_W,
    F_D, F_H, F_W, STR_D, STR_H, STR_W, DIL_D, DIL_H, DIL_W, PAD_D, PAD_H, PAD_W,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PASS_M: tl.constexpr, J_BLOCK: tl.constexpr,
    VEC: tl.constexpr, INDEX64: tl.constexpr,
):
    # VEC is not used: Y's columns g·M + j are strided, so its stores are scalar and the tile keeps one
    # element per thread along the groups; 16-byte X loads would need their own layout, converted through
    # shared memory every tap (the v8 binary did, 2 KiB), where scalar X loads are coalesced runs already.
    C_TOTAL = GROUPS * CG  # = GROUPS (C/G = 1)
    K_TOTAL = GROUPS * KG
    M = BATCH * OUT_D * OUT_H * OUT_W
    taps = F_D * F_H * F_W
    step_w = DIL_W * C_TOTAL
    step_h = DIL_H * IN_W * C_TOTAL
    step_d = DIL_D * IN_H * IN_W * C_TOTAL
    chunks = tl.cdiv(KG, J_BLOCK)
    # Channel blocks of _block_origin are (group block, j chunk) pairs, the chunk fastest.
    pid_v, row0, s_nb, s_od, s_oh, s_ow, rows_left = _block_origin(M, OUT_D, OUT_H, OUT_W,
                                                                     tl.cdiv(C_TOTAL, BLOCK_N) * chunks * BLOCK_N,
                                                                     BLOCK_M, BLOCK_N, INDEX64)
    if INDEX64:  # every single size is < 2^31: per-row arithmetic stays 32-bit, offsets widen
        IN_D, IN_H, IN_W = tl.cast(IN_D, tl.int32), tl.cast(IN_H, tl.int32), tl.cast(IN_W, tl.int32)
        OUT_D, OUT_H, OUT_W = tl.cast(OUT_D, tl.int32), tl.cast(OUT_H, tl.int32), tl.cast(OUT_W, tl.int32)
        F_D, F_H, F_W = tl.cast(F_D, tl.int32), tl.cast(F_H, tl.int32), tl.cast(F_W, tl.int32)
        STR_D, STR_H, STR_W = tl.cast(STR_D, tl.int32), tl.cast(STR_H, tl.int32), tl.cast(STR_W, tl.int32)
        DIL_D, DIL_H, DIL_W = tl.cast(DIL_D, tl.int32), tl.cast(DIL_H, tl.int32), tl.cast(DIL_W, tl.int32)
        PAD_D, PAD_H, PAD_W = tl.cast(PAD_D, tl.int32), tl.cast(PAD_H, tl.int32), tl.cast(PAD_W, tl.int32)
        KG, chunks = tl.cast(KG, tl.int32), tl.cast(chunks, tl.int32)
    j0 = (pid_v % chunks) * J_BLOCK
    groups = (pid_v // chunks) * BLOCK_N + tl.arange(0, BLOCK_N)
    g_ok = groups < C_TOTAL
    use1 = j0 + 1 < KG
    use2 = j0 + 2 < KG
    use3 = j0 + 3 < KG
    # W[g·M + j0, tap 0]; j adds j·taps. Offsets of Y's strided columns g·M + j0 are declared contiguous so
    # the stores keep the tile's register layout (see direct.py's gather layout note: never vectorised).
    w_off = (tl.minimum(groups, C_TOTAL - 1) * KG + j0) * taps
    y_col = tl.max_contiguous(tl.multiple_of(groups * KG + j0, [1]), [BLOCK_N])

    for sub in tl.static_range(BLOCK_M // PASS_M):
        r = sub * PASS_M + tl.arange(0, PASS_M)
        row_ok = r < rows_left
        nb, od, oh, ow = _row_positions(r, s_nb, s_od, s_oh, s_ow, OUT_D, OUT_H, OUT_W)
        base_w = ow * STR_W - PAD_W
        base_h = oh * STR_H - PAD_H
        base_d = tl.where(row_ok, od * STR_D - PAD_D, IN_D)  # rows past M fail the depth test
        if INDEX64:
            nb = nb.to(tl.int64)
        x_base = (((nb * IN_D + base_d) * IN_H + base_h) * IN_W + base_w) * C_TOTAL
        x_off = x_base[:, None] + groups[None, :]

        acc0 = tl.zeros((PASS_M, BLOCK_N), dtype=tl.float32)
        if J_BLOCK > 1:
            acc1 = tl.zeros((PASS_M, BLOCK_N), dtype=tl.float32)
        if J_BLOCK > 2:
            acc2 = tl.zeros((PASS_M, BLOCK_N), dtype=tl.float32)
            acc3 = tl.zeros((PASS_M, BLOCK_N), dtype=tl.float32)
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
                    tap = (td * F_H + th) * F_W + tw
                    xv = _f32(tl.load(x_ptr + (x_dh + tw * step_w) + x_off, mask=ok[:, None] & g_ok[None, :],
                                      other=0.0))
                    acc0 = _j_fma(acc0, xv, w_ptr, tap, w_off, True)
                    if J_BLOCK > 1:
                        acc1 = _j_fma(acc1, xv, w_ptr, tap + taps, w_off, use1)
                    if J_BLOCK > 2:
                        acc2 = _j_fma(acc2, xv, w_ptr, tap + 2 * taps, w_off, use2)
                        acc3 = _j_fma(acc3, xv, w_ptr, tap + 3 * taps, w_off, use3)

        rows = row0 + r
        y_off = (rows * K_TOTAL)[:, None] + y_col[None, :]
        mask = (rows < M)[:, None] & g_ok[None, :]
        _j_store(y_ptr, acc0, y_off, mask, True)
        if J_BLOCK > 1:
            _j_store(y_ptr, acc1, y_off + 1, mask, use1)
        if J_BLOCK > 2:
            _j_store(y_ptr, acc2, y_off + 2, mask, use2)
            _j_store(y_ptr, acc3, y_off + 3, mask, use3)


@triton.jit
def _direct_bwd_data_multiplier_kernel(
    dy_ptr, w_ptr, dx_ptr,
    BATCH, GROUPS, CG, KG, IN_D, IN_H, IN_W, OUT_D, OUT_H, OUT_W,
    F_D, F_H, F_W, STR_D, STR_H, STR_W, DIL_D, DIL_H, DIL_W, PAD_D, PAD_H, PAD_W,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PASS_M: tl.constexpr, VEC: tl.constexpr, INDEX64: tl.constexpr,
):
    C_TOTAL = GROUPS * CG  # = GROUPS (C/G = 1)
    K_TOTAL = GROUPS * KG
    if VEC == 8:
        C_TOTAL = (C_TOTAL // 8) * 8
        K_TOTAL = (K_TOTAL // 8) * 8
    taps = F_D * F_H * F_W
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
        KG = tl.cast(KG, tl.int32)

    # Residue class of this program, as in the direct backward-data kernel.
    cls = tl.program_id(1)
    r_w = cls % STR_W
    r_h = (cls // STR_W) % STR_H
    r_d = cls // (STR_W * STR_H)
    first_w = (r_w + STR_W - PAD_W % STR_W) % STR_W
    first_h = (r_h + STR_H - PAD_H % STR_H) % STR_H
    first_d = (r_d + STR_D - PAD_D % STR_D) % STR_D

    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # groups = input channels
    col_ok = cols < C_TOTAL
    w_off = tl.minimum(cols, C_TOTAL - 1) * (KG * taps)  # W[g·M, tap 0]
    # dY's strided columns g·M declared contiguous: the gathers keep the tile's layout (direct.py's note).
    dy_col = tl.max_contiguous(tl.multiple_of(cols * KG, [1]), [BLOCK_N])

    for sub in tl.static_range(BLOCK_M // PASS_M):
        r = sub * PASS_M + tl.arange(0, PASS_M)
        nb, jd, jh, jw = _row_positions(r, s_nb, s_jd, s_jh, s_jw, cnt_d, cnt_h, cnt_w)
        i_w = first_w + jw * STR_W
        i_h = first_h + jh * STR_H
        i_d = first_d + jd * STR_D
        row_ok = (r < rows_left) & (i_w < IN_W) & (i_h < IN_H) & (i_d < IN_D)
        q_w = (first_w + PAD_W - r_w) // STR_W + jw
        q_h = (first_h + PAD_H - r_h) // STR_H + jh
        q_d = tl.where(row_ok, (first_d + PAD_D - r_d) // STR_D + jd, -1)  # masked rows fail o_d >= 0
        if INDEX64:
            nb = nb.to(tl.int64)
        dx_off = ((((nb * IN_D + i_d) * IN_H + i_h) * IN_W + i_w) * C_TOTAL)[:, None] + cols[None, :]
        y_base = (((nb * OUT_D + q_d) * OUT_H + q_h) * OUT_W + q_w) * K_TOTAL
        dy_off = y_base[:, None] + dy_col[None, :]

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
                                mask = (ok_dh & (o_w >= 0) & (o_w < OUT_W))[:, None] & col_ok[None, :]
                                tap = (td * F_H + th) * F_W + tw
                                dy_tap = -((a_d * OUT_H + a_h) * OUT_W + a_w) * K_TOTAL
                                for j in tl.range(0, KG):
                                    dyv = tl.load(dy_ptr + (dy_tap + j) + dy_off, mask=mask, other=0.0)
                                    wv = tl.load(w_ptr + (tap + j * taps) + w_off)
                                    acc += _f32(dyv) * _f32(wv)[None, :]

        tl.store(dx_ptr + dx_off, acc.to(dx_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


@triton.jit
def _weight_j_fma(acc, xv, dy_ptr, dy_at, dy_off, mask, use):
    """acc += dY[..., g·M + j] · X for one j (``dy_at`` its scalar offset); skipped, uniformly, unless ``use``."""
    if use:
        dyv = tl.load(dy_ptr + dy_at + dy_off, mask=mask, other=0.0)
        acc += _f32(dyv) * xv
    return acc


@triton.jit
def _weight_j_store(out_ptrs, acc, tap_local, TAP_BLOCK, pid_tb, taps, mask, use):
    """dW (or split partials) of one j: each tap's rows summed (a masked reduction, once per program)."""
    if use:
        for tb in tl.range(0, TAP_BLOCK):
            tap_out = pid_tb * TAP_BLOCK + tb
            value = tl.sum(tl.where((tap_local == tb)[:, None], acc, 0.0), axis=0)
            tl.store(out_ptrs + tap_out, value.to(out_ptrs.dtype.element_ty), mask=mask & (tap_out < taps))


@triton.jit
def _direct_bwd_weight_multiplier_kernel(
    x_ptr, dy_ptr, out_ptr,
    BATCH, GROUPS, CG, KG, IN_D, IN_H, IN_W, OUT_D, OUT_H, OUT_W,
    F_D, F_H, F_W, STR_D, STR_H, STR_W, DIL_D, DIL_H, DIL_W, PAD_D, PAD_H, PAD_W,
    TAP_BLOCK, LINE_BLOCK, ROW_WIDTH, LINES_PER_SPLIT,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr, J_BLOCK: tl.constexpr,
    VEC: tl.constexpr, INDEX64: tl.constexpr,
):
    C_TOTAL = GROUPS * CG  # = GROUPS (C/G = 1)
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
        TAP_BLOCK, LINE_BLOCK = tl.cast(TAP_BLOCK, tl.int32), tl.cast(LINE_BLOCK, tl.int32)
        ROW_WIDTH = tl.cast(ROW_WIDTH, tl.int32)
        IN_D, IN_H, IN_W = tl.cast(IN_D, tl.int32), tl.cast(IN_H, tl.int32), tl.cast(IN_W, tl.int32)
        OUT_D, OUT_H, OUT_W = tl.cast(OUT_D, tl.int32), tl.cast(OUT_H, tl.int32), tl.cast(OUT_W, tl.int32)
        F_D, F_H, F_W = tl.cast(F_D, tl.int32), tl.cast(F_H, tl.int32), tl.cast(F_W, tl.int32)
        STR_D, STR_H, STR_W = tl.cast(STR_D, tl.int32), tl.cast(STR_H, tl.int32), tl.cast(STR_W, tl.int32)
        DIL_D, DIL_H, DIL_W = tl.cast(DIL_D, tl.int32), tl.cast(DIL_H, tl.int32), tl.cast(DIL_W, tl.int32)
        PAD_D, PAD_H, PAD_W = tl.cast(PAD_D, tl.int32), tl.cast(PAD_H, tl.int32), tl.cast(PAD_W, tl.int32)
        KG = tl.cast(KG, tl.int32)

    # Axis 0: (group block, j chunk, tap block), the tap block fastest, then the chunk: the programs that
    # read the same dY and X windows run together.
    pid = tl.program_id(0)
    num_tb = tl.cdiv(taps, TAP_BLOCK)
    chunks = tl.cdiv(KG, J_BLOCK)
    pid_tb = pid % num_tb
    rest = pid // num_tb
    j0 = (rest % chunks) * J_BLOCK
    pid_n = rest // chunks
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # groups = input channels
    col_ok = cols < C_TOTAL
    use1 = j0 + 1 < KG
    use2 = j0 + 2 < KG
    use3 = j0 + 3 < KG
    # dY's strided columns g·M + j0 declared contiguous: the gathers keep the tile's layout (direct.py's note).
    dy_cols = tl.max_contiguous(tl.multiple_of(cols * KG + j0, [1]), [BLOCK_N])

    r = tl.arange(0, BLOCK_M)
    step = LINE_BLOCK * ROW_WIDTH
    tap_local = r // step
    p = r - tap_local * step
    lb = p // ROW_WIDTH
    wb = p - lb * ROW_WIDTH
    tap = pid_tb * TAP_BLOCK + tap_local
    tap_ok = (tap_local < TAP_BLOCK) & (tap < taps)
    tw = tap % F_W
    t = tap // F_W
    th = t % F_H
    td = t // F_H
    off_h = th * DIL_H - PAD_H
    off_d = tl.where(tap_ok, td * DIL_D - PAD_D, IN_D)  # rows past the tap block fail the depth test
    w_first = wb * STR_W + tw * DIL_W - PAD_W
    ow_step = ROW_WIDTH * STR_W

    acc0 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if J_BLOCK > 1:
        acc1 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if J_BLOCK > 2:
        acc2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc3 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for line0 in tl.range(line_begin, line_end, LINE_BLOCK):
        nb, i_d, i_h, ok_line = _line_rows(line0, line_end, oh0, od0, nb0, lb, LINE_BLOCK, OUT_D, OUT_H, STR_D, STR_H,
                                           off_d, off_h, IN_D, IN_H, INDEX64)
        x_off = ((((nb * IN_D + i_d) * IN_H + i_h) * IN_W + w_first) * C_TOTAL)[:, None] + cols[None, :]
        dy_off = ((line0 * OUT_W + (lb * OUT_W + wb)) * K_TOTAL)[:, None] + dy_cols[None, :]
        ow = wb
        i_w = w_first
        x_step = 0 * C_TOTAL  # in the offsets' integer width
        dy_step = 0 * K_TOTAL
        for _ow0 in tl.range(0, OUT_W, ROW_WIDTH):
            ok = ok_line & (ow < OUT_W) & (i_w >= 0) & (i_w < IN_W)
            mask = ok[:, None] & col_ok[None, :]  # dY too: a zero X term contributes nothing
            xv = _f32(tl.load(x_ptr + x_step + x_off, mask=mask, other=0.0))
            acc0 = _weight_j_fma(acc0, xv, dy_ptr, dy_step, dy_off, mask, True)
            if J_BLOCK > 1:
                acc1 = _weight_j_fma(acc1, xv, dy_ptr, dy_step + 1, dy_off, mask, use1)
            if J_BLOCK > 2:
                acc2 = _weight_j_fma(acc2, xv, dy_ptr, dy_step + 2, dy_off, mask, use2)
                acc3 = _weight_j_fma(acc3, xv, dy_ptr, dy_step + 3, dy_off, mask, use3)
            ow += ROW_WIDTH
            i_w += ow_step
            dy_step += ROW_WIDTH * K_TOTAL
            x_step += ow_step * C_TOTAL
        oh0, od0, nb0 = _next_lines(oh0, od0, nb0, LINE_BLOCK, OUT_D, OUT_H)

    # dW[g·M + j, tap] at (g·M + j)·taps + tap (C/G = 1); split-K partials go to workspace[split].
    out_ptrs = out_ptr + split.to(tl.int64) * weight_elements + ((cols * KG + j0) * taps)
    _weight_j_store(out_ptrs, acc0, tap_local, TAP_BLOCK, pid_tb, taps, col_ok, True)
    if J_BLOCK > 1:
        _weight_j_store(out_ptrs + taps, acc1, tap_local, TAP_BLOCK, pid_tb, taps, col_ok, use1)
    if J_BLOCK > 2:
        _weight_j_store(out_ptrs + 2 * taps, acc2, tap_local, TAP_BLOCK, pid_tb, taps, col_ok, use2)
        _weight_j_store(out_ptrs + 3 * taps, acc3, tap_local, TAP_BLOCK, pid_tb, taps, col_ok, use3)
