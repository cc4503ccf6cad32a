"""Grouped 3×3 stride-1 backward-weight on tensor cores, walking down the output rows (gwalk), 2D.

``dW[g, k, fr, s, c] = Σ_n Σ_{oh, ow} dY[n, oh, ow, g, k] · X[n, oh − pad_h + fr, ow − pad_w + s, g, c]``.

GEMM mapping, per program (one block of ``MERGE`` groups, ``k0 = gb·MERGE·K/G``, ``c0 = gb·MERGE·C/G``):
rows ``m`` (GEMM M = ``BLOCK_M`` ≥ MERGE·K/G): the block's output channels; columns ``j`` (GEMM N =
``BLOCK_N`` ≥ MERGE·C/G): its input channels; reduction (GEMM K = ``BLOCK_K`` per step): ``IMAGES``
images × ``TILE_W`` output columns of one output row (``TILE_W = min(out_w, BLOCK_K)``, as the forward
walk packs its GEMM rows). One accumulator tile per filter tap (nine). The reduction's (image, row,
column-tile) units are cut into ``ROWS``-row walks; ``split_k`` programs share them (contiguous ranges, a
grid axis) and each walks its units top to bottom::

    for each input row ih = oh0 − pad_h + t (t = 0 … ROWS + 1):
        if t < ROWS:  D_t[m, p] = dY[n_p, oh0 + t, ow_p, k0 + m]                   (one load per output row)
        for each filter column s:
            B[p, j] = X[n_p, ih, ow_p − pad_w + s, c0 + j]                         (one load)
            for each output row i with 0 ≤ t − i < 3:  acc[(t − i)·3 + s] += D_i · B

so each activation tile is loaded once per (input row, filter column) and serves every filter row it
meets, and no address is decoded per pixel in the walk. Merged groups are kept apart at the store: only
the block-diagonal entries (``m // (K/G) == j // (C/G)``) are written, at
``dW[((k0 + m)·9 + tap)·C/G + j mod C/G]`` (GKYXC).

split_k > 1: each program writes fp32 partials to the workspace row ``[split, weight elements]`` (an empty
split writes zeros) and the shared reduce (``split_reduce.py``) sums the rows in a fixed order
(deterministic, no atomics). One tensor-core accumulator per split sums at most
:data:`~tiledispatch.native.kernels.gwalk_geometry.MAX_LANES_PER_SPLIT` reduction lanes (the support check
refuses longer splits), the length igemm's kernels sum before promoting to fp32 adds.
Host-side sizes: ``gwalk_geometry.py``.

Why: the igemm / gmerge backward-weight programs own one tap each, so every activation and gradient tile
is loaded nine times and every lane's (n, h, w) is decoded per step; the forward / backward-data walk was
10–46 % faster than those programs on ResNeXt's stride-1 grouped layers (H200, session 12).
"""

from __future__ import annotations

import triton
import triton.language as tl

from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.kernels.base import Launch, Program, pointer_type
from tiledispatch.native.kernels.gwalk_geometry import weight_walk_geometry
from tiledispatch.native.kernels.split_reduce import split_reduce_launch, split_reduce_program
from tiledispatch.native.problem import ConvProblem, Direction

_SIZE_PARAMS = ("BATCH", "C_TOTAL", "K_TOTAL", "CG", "KG", "GC", "GK", "IN_H", "IN_W", "OUT_H", "OUT_W",
                "PAD_H", "PAD_W", "TILE_W", "IMAGES")


@triton.jit
def _gwalk_bwd_weight_kernel(
    x_ptr, dy_ptr, out_ptr,
    BATCH, C_TOTAL, K_TOTAL, CG, KG, GC, GK, IN_H, IN_W, OUT_H, OUT_W, PAD_H, PAD_W, TILE_W, IMAGES,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, ROWS: tl.constexpr,
    SPLIT_K: tl.constexpr,
):
    """CG / KG: channels per group; GC / GK: a group block's merged input / output channels (c0 = gb·GC,
    k0 = gb·GK). 3×3 filter, stride 1, dilation 1 (compiled in)."""
    # Multiples of 8 (the support check guarantees it), written so that the compiler can prove every channel
    # run 16-byte aligned (run-time sizes carry no divisibility hint in the registry's build; see gwalk.py).
    C_TOTAL = (C_TOTAL // 8) * 8
    K_TOTAL = (K_TOTAL // 8) * 8
    GC = (GC // 8) * 8
    GK = (GK // 8) * 8
    split = tl.program_id(0)
    group_block = tl.program_id(1)
    w_tiles = tl.cdiv(OUT_W, TILE_W)
    h_tiles = tl.cdiv(OUT_H, ROWS)
    units = tl.cdiv(BATCH, IMAGES) * h_tiles * w_tiles
    per_split = tl.cdiv(units, SPLIT_K)
    unit_begin = split * per_split
    unit_end = tl.minimum(unit_begin + per_split, units)

    lane = tl.arange(0, BLOCK_K)  # reduction lanes: (image, output column) pairs of a unit
    lane_image = lane // TILE_W
    lane_col = lane % TILE_W
    lane_used = lane < IMAGES * TILE_W
    c0 = group_block * GC
    k0 = group_block * GK
    # Stacked rows r = q·BLOCK_M + k: filter row q (3 of 4 blocks used), output channel k0 + k.
    r = tl.arange(0, 4 * BLOCK_M)
    q = r // BLOCK_M
    ks = r % BLOCK_M
    k_ok = (ks < GK) & (k0 + ks < K_TOTAL) & (q < 3)  # a partial last group block
    cs = tl.arange(0, BLOCK_N)
    c_ok = (cs < GC) & (c0 + cs < C_TOTAL)

    acc0 = tl.zeros((4 * BLOCK_M, BLOCK_N), dtype=tl.float32)  # filter column 0; row block q: tap (q, 0)
    acc1 = tl.zeros((4 * BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc2 = tl.zeros((4 * BLOCK_M, BLOCK_N), dtype=tl.float32)
    for unit in range(unit_begin, unit_end):
        tile_w = unit % w_tiles
        t = unit // w_tiles
        oh0 = (t % h_tiles) * ROWS
        image = (t // h_tiles) * IMAGES + lane_image
        ow = tile_w * TILE_W + lane_col
        pix_ok = lane_used & (image < BATCH) & (ow < OUT_W)
        x_pix = x_ptr + image * IN_H * IN_W * C_TOTAL + c0  # per lane: its image's first pixel
        dy_pix = dy_ptr + (image * OUT_H + oh0) * OUT_W * K_TOTAL + ow * K_TOTAL + k0
        iw0 = ow - PAD_W
        for step in tl.static_range(ROWS + 2):
            # A[q·BLOCK_M + k, lane] = dY[output row oh0 + step − q, k]: the rows this input row meets
            # through filter row q (only this unit's rows, so no position is summed twice)
            out_row = step - q
            a_ok = k_ok & (out_row >= 0) & (out_row < ROWS) & (oh0 + out_row < OUT_H)
            a = tl.load(dy_pix[None, :] + (out_row * OUT_W * K_TOTAL + ks)[:, None],
                        mask=a_ok[:, None] & pix_ok[None, :], other=0.0)
            ih = oh0 - PAD_H + step
            row_ok = (ih >= 0) & (ih < IN_H)
            for s in tl.static_range(3):
                iw = iw0 + s
                ok = pix_ok & (iw >= 0) & (iw < IN_W) & row_ok
                b = tl.load(x_pix[:, None] + ((ih * IN_W + iw) * C_TOTAL)[:, None] + cs[None, :],
                            mask=ok[:, None] & c_ok[None, :], other=0.0)
                if s == 0:
                    acc0 = tl.dot(a, b, acc0)
                elif s == 1:
                    acc1 = tl.dot(a, b, acc1)
                else:
                    acc2 = tl.dot(a, b, acc2)

    # dW[g0 + k // (K/G), k % (K/G), q, s, j % (C/G)] sits at ((k0 + k)·9 + 3q + s)·C/G + j % (C/G).
    c_group = cs // CG
    mask = k_ok[:, None] & c_ok[None, :] & ((ks // KG)[:, None] == c_group[None, :])
    if SPLIT_K > 1:  # this split's row of the fp32 workspace [SPLIT_K, weight elements]
        out_ptr += split.to(tl.int64) * (K_TOTAL * 9 * CG)
    w_ptrs = out_ptr + ((k0 + ks) * 9 + 3 * q)[:, None] * CG + (cs - c_group * CG)[None, :]
    tl.store(w_ptrs, acc0.to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(w_ptrs + CG, acc1.to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(w_ptrs + 2 * CG, acc2.to(out_ptr.dtype.element_ty), mask=mask)


class GwalkBackwardWeight:
    """The gwalk backward-weight template (X, dY → dW)."""

    direction = Direction.BACKWARD_WEIGHT
    families = frozenset({Family.GWALK})

    def programs(self, config: KernelConfig) -> dict[str, Program]:
        ptr = pointer_type(config.dtype)
        out = "*fp32" if config.split_k > 1 else ptr
        main = Program(_gwalk_bwd_weight_kernel,
                       {"BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "BLOCK_K": config.block_k,
                        "ROWS": config.group_m, "SPLIT_K": config.split_k},
                       {"x_ptr": ptr, "dy_ptr": ptr, "out_ptr": out, **{name: "i32" for name in _SIZE_PARAMS}},
                       config.num_warps, 1)
        programs = {"main": main}
        if config.split_k > 1:
            programs["reduce"] = split_reduce_program(config)
        return programs

    def workspace_elements(self, problem: ConvProblem, config: KernelConfig) -> int:
        return config.split_k * problem.weight_elements if config.split_k > 1 else 0

    def plan(self, problem, config, first, second, out, workspace) -> list[Launch]:
        geo = weight_walk_geometry(problem, config)
        sizes = (problem.batch, problem.in_channels, problem.out_channels, problem.c_per_group,
                 problem.k_per_group, geo["gc"], geo["gk"], *problem.input_size, *problem.output_size,
                 *problem.pad_begin, geo["tile_w"], geo["images"])
        if config.split_k == 1:
            return [Launch("main", geo["grid"], (first, second, out, *sizes))]
        if workspace is None or workspace.numel() < self.workspace_elements(problem, config):
            raise ValueError(f"workspace: split_k={config.split_k} needs "
                             f"{self.workspace_elements(problem, config)} fp32 elements")
        return [Launch("main", geo["grid"], (first, second, workspace, *sizes)),
                split_reduce_launch(config, workspace, out, problem.weight_elements)]
