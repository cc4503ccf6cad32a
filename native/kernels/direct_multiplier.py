"""The direct kernels' forward depthwise-multiplier binary: C/G = 1, K/G = M > 1 (each input channel feeds M outputs).

Notation as in :mod:`~tiledispatch.native.kernels.direct`; here ``g`` is both the group and its one input channel
(``C_T = G``) and the group's output channels are ``k = g·M + j``, ``j < M``.

``Y[n,o,g·M+j] = Σ_t X[n, i(o,t), g] · W[g·M+j, t]``. The general binary tiles the output channels and gathers
``X[..., k // M]`` once per output column: one scalar load, address and conversion per FMA (25 instructions a
FMA in its SASS, 202 registers; Nsight Compute on the H200, session 23). This binary (direct configs with
``group_m`` = J, 2 or 4) tiles the *groups*: a program owns ``BLOCK_M`` positions × ``BLOCK_N`` groups × J
consecutive ``j`` (grid axis 0: row blocks × group blocks × ⌈M / J⌉ j chunks, the chunk fastest, so the chunks
of one X window run together and find it in L2). Each X value is a coalesced run over the groups, loaded and
widened once per tap, and feeds J accumulators (one per ``j``; a uniform branch skips ``j ≥ M``); W is
gathered per (group, j) and shared by the rows a thread holds. An FMA costs ``1 / J`` X loads instead of one.

Measured against the general binary (H200, session 24, same run, the seed-7 synthetic multiplier problems):
3.2–3.9× on odd channel counts with 3×3(×3) filters (n32 c239→717 3×3×3: 2,813 → 887 µs), 1.3–1.5× on wider
3×3 and 7×7 ones, 0.73–0.86× on small 1×1 problems — hence separate configs, not a replacement.
The backward directions got the same treatment and gained nothing worth keeping (backward-data 1.01–1.09×: the
M terms of a tap are a reduction, each dY value still one load per FMA; backward-weight 0.50–1.04×: J
accumulator tiles cost the rows per thread that amortise the loads), so they run the general binaries.
"""

from __future__ import annotations

import triton
import triton.language as tl

from tiledispatch.native.configs import KernelConfig
from tiledispatch.native.kernels.direct_common import _block_origin, _f32, _row_positions, rows_per_pass

#: Accumulator elements a thread may hold across the J tiles of a program (the depthwise binary's 32 fp32
#: registers of row-pass accumulator, spread over the J tiles).
ACCUMULATOR_ELEMENTS = 32


def multiplier_pass_rows(config: KernelConfig) -> int:
    """Rows per pass: ``group_m`` accumulator tiles of at most ``ACCUMULATOR_ELEMENTS / group_m`` elements per
    thread (half with 64-bit offsets)."""
    return rows_per_pass(config, ACCUMULATOR_ELEMENTS // config.group_m)


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
    # VEC is 1 (rules.py): Y's columns g·M + j are strided, so its stores are scalar and the tile keeps one
    # element per thread along the groups; 16-byte X loads would need their own layout, converted through
    # shared memory every tap (a v8 build did, 2 KiB), where scalar X loads are coalesced runs already.
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
