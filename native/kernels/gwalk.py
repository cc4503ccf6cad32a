"""Grouped 3×3 stride-1 convolution on tensor cores, walking down the output rows (gwalk): forward and
backward-data, 2D.

GEMM mapping, per program: rows ``m`` (GEMM M = ``BLOCK_M``): ``IMAGES`` images × ``TILE_W`` output
columns (``TILE_W = min(out_w, BLOCK_M)``, ``IMAGES = BLOCK_M // TILE_W``: a 7-wide layer packs 9 images
into 64 rows); columns ``j`` (GEMM N = MERGE·K/G): the output channels of a block of ``MERGE`` groups
(``k0 = gb·MERGE·K/G``); reduction per filter tap: the block's MERGE·C/G input channels (``c0``),
multiplied by gmerge's packed block-diagonal operand ``P[gb, tap, r, j]`` (``gmerge_pack.py``, one small
launch), so merged groups never mix. A program owns ``ROWS`` (= the config's ``group_m``) consecutive
output rows and walks the ``ROWS + 2`` input rows they read once, top to bottom::

    for each input row ih = oh0 − pad_h + t (t = 0 … ROWS + 1) and filter column s:
        A[m, r] = X[n, ih, ow − pad_w + s, c0 + r]                (one load)
        for each output row i with 0 ≤ t − i < 3:  acc_i += A · P[gb, (t − i)·3 + s]

so ``Y[n, oh0 + i, ow, k0 + j] = Σ_{fr, s} Σ_r X[n, oh0 + i − pad_h + fr, ow − pad_w + s, c0 + r] ·
P[gb, fr·3 + s, r, j]``: one activation load per (input row, filter column) instead of one per (output
row, tap), every address a per-program base plus a per-column vector (no division in the walk), all
loops static. Tiles of at most 32×32 hold the nine packed tap tiles in registers (loaded once).

Backward-data (stride 1) is the same walk over dY into dX: reduction over the block's MERGE·K/G output
channels, columns its MERGE·C/G input channels, the operand packed transposed (``BACKWARD_DATA``) and read
flipped (tap ``(2 − fr)·3 + (2 − s)``), pads ``2 − pad_begin``.

Why (H200, ``bench/results/2026-11-26_h200_s12/walk_probe``): on ResNeXt's grouped 3×3 layers the
gmerge / igemm programs re-load every activation row once per tap and decode (n, h, w) per pixel; this
walk was 10–46 % faster than the registry's best kernel on every stride-1 layer measured (stride 2: 3 %
slower, so the family is stride 1 only).
"""

from __future__ import annotations

import triton
import triton.language as tl

from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.kernels import gmerge_pack
from tiledispatch.native.kernels.base import Launch, Program, cdiv, pointer_type
from tiledispatch.native.problem import ConvProblem, Direction

#: Largest packed tap tile (BLOCK_K × BLOCK_N elements) whose nine copies a program holds in registers.
HOLD_ELEMENTS = 32 * 32

_SIZE_PARAMS = ("BATCH", "C_TOTAL", "K_TOTAL", "GC", "GK", "IN_H", "IN_W", "OUT_H", "OUT_W", "PAD_H", "PAD_W",
                "TILE_W", "IMAGES")


@triton.jit
def _gwalk_kernel(
    x_ptr, p_ptr, y_ptr,
    BATCH, C_TOTAL, K_TOTAL, GC, GK, IN_H, IN_W, OUT_H, OUT_W, PAD_H, PAD_W, TILE_W, IMAGES,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, ROWS: tl.constexpr,
    FLIP: tl.constexpr, HOLD: tl.constexpr,
):
    """C_TOTAL / K_TOTAL: channels of the tensor walked / written; GC / GK: a group block's reduction /
    output channels (c0 = gb·GC, k0 = gb·GK). 3×3 filter, stride 1, dilation 1 (compiled in)."""
    # Multiples of 8 (the support check guarantees it), written so that the compiler can prove every channel
    # run 16-byte aligned: run-time sizes carry no divisibility hint in the registry's one-binary-per-config
    # build, and without this every load and store is a 2-byte scalar (SASS: LDG.E.U16).
    C_TOTAL = (C_TOTAL // 8) * 8
    K_TOTAL = (K_TOTAL // 8) * 8
    GC = (GC // 8) * 8
    GK = (GK // 8) * 8
    pid = tl.program_id(0)
    group_block = tl.program_id(1)
    w_tiles = tl.cdiv(OUT_W, TILE_W)
    h_tiles = tl.cdiv(OUT_H, ROWS)
    tile_w = pid % w_tiles
    t = pid // w_tiles
    tile_h = t % h_tiles
    tile_n = t // h_tiles

    m = tl.arange(0, BLOCK_M)
    image = tile_n * IMAGES + m // TILE_W
    ow = tile_w * TILE_W + m % TILE_W
    pix_ok = (m < IMAGES * TILE_W) & (image < BATCH) & (ow < OUT_W)
    c0 = group_block * GC
    k0 = group_block * GK
    red = tl.arange(0, BLOCK_K)
    cols = tl.arange(0, BLOCK_N)
    red_ok = (red < GC) & (c0 + red < C_TOTAL)  # a partial last group block
    col_ok = (cols < GK) & (k0 + cols < K_TOTAL)

    p_base = p_ptr + group_block * 9 * GC * GK + red[:, None] * GK + cols[None, :]
    p_mask = (red < GC)[:, None] & (cols < GK)[None, :]
    if HOLD:  # the nine packed tap tiles, loaded once before the walk
        w0 = tl.load(p_base, mask=p_mask, other=0.0)
        w1 = tl.load(p_base + 1 * GC * GK, mask=p_mask, other=0.0)
        w2 = tl.load(p_base + 2 * GC * GK, mask=p_mask, other=0.0)
        w3 = tl.load(p_base + 3 * GC * GK, mask=p_mask, other=0.0)
        w4 = tl.load(p_base + 4 * GC * GK, mask=p_mask, other=0.0)
        w5 = tl.load(p_base + 5 * GC * GK, mask=p_mask, other=0.0)
        w6 = tl.load(p_base + 6 * GC * GK, mask=p_mask, other=0.0)
        w7 = tl.load(p_base + 7 * GC * GK, mask=p_mask, other=0.0)
        w8 = tl.load(p_base + 8 * GC * GK, mask=p_mask, other=0.0)

    oh0 = tile_h * ROWS
    x_pix = x_ptr + image * IN_H * IN_W * C_TOTAL + c0  # per GEMM row: its image's first pixel
    iw0 = ow - PAD_W
    acc0 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc1 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc3 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in tl.static_range(ROWS + 2):
        ih = oh0 - PAD_H + step
        row_ok = (ih >= 0) & (ih < IN_H)
        for s in tl.static_range(3):
            iw = iw0 + s
            ok = pix_ok & (iw >= 0) & (iw < IN_W) & row_ok
            a = tl.load(x_pix[:, None] + ((ih * IN_W + iw) * C_TOTAL)[:, None] + red[None, :],
                        mask=ok[:, None] & red_ok[None, :], other=0.0)
            for i in tl.static_range(ROWS):
                if step - i >= 0 and step - i < 3:  # filter row step − i of output row oh0 + i
                    if FLIP:
                        tap = (2 - (step - i)) * 3 + (2 - s)
                    else:
                        tap = (step - i) * 3 + s
                    if not HOLD:
                        b = tl.load(p_base + tap * GC * GK, mask=p_mask, other=0.0)
                    elif tap == 0:
                        b = w0
                    elif tap == 1:
                        b = w1
                    elif tap == 2:
                        b = w2
                    elif tap == 3:
                        b = w3
                    elif tap == 4:
                        b = w4
                    elif tap == 5:
                        b = w5
                    elif tap == 6:
                        b = w6
                    elif tap == 7:
                        b = w7
                    else:
                        b = w8
                    if i == 0:
                        acc0 = tl.dot(a, b, acc0)
                    elif i == 1:
                        acc1 = tl.dot(a, b, acc1)
                    elif i == 2:
                        acc2 = tl.dot(a, b, acc2)
                    else:
                        acc3 = tl.dot(a, b, acc3)

    y_pix = y_ptr + (image * OUT_H * OUT_W + ow) * K_TOTAL + k0
    for i in tl.static_range(ROWS):
        if i == 0:
            acc = acc0
        elif i == 1:
            acc = acc1
        elif i == 2:
            acc = acc2
        else:
            acc = acc3
        ok = pix_ok & (oh0 + i < OUT_H)
        tl.store(y_pix[:, None] + (oh0 + i) * OUT_W * K_TOTAL + cols[None, :], acc.to(y_ptr.dtype.element_ty),
                 mask=ok[:, None] & col_ok[None, :])


def holds_weights(config: KernelConfig) -> bool:
    """Whether the config's programs hold the nine packed tap tiles in registers."""
    return config.block_k * config.block_n <= HOLD_ELEMENTS


def walk_geometry(problem: ConvProblem, config: KernelConfig) -> dict[str, int]:
    """Sizes of the walk: the walked and written tensors' spatial sizes and channels, a group block's
    reduction / output channels, pads, tile width and images per program, and the grid."""
    backward = problem.direction is Direction.BACKWARD_DATA
    cg, kg = problem.c_per_group, problem.k_per_group
    src, dst = (problem.output_size, problem.input_size) if backward else (problem.input_size, problem.output_size)
    pads = tuple(2 - p for p in problem.pad_begin) if backward else tuple(problem.pad_begin)
    tile_w = min(dst[1], config.block_m)
    images = config.block_m // tile_w
    rows = config.group_m
    grid = (cdiv(problem.batch, images) * cdiv(dst[0], rows) * cdiv(dst[1], tile_w),
            cdiv(problem.groups, config.merge), 1)
    return {"src_c": problem.out_channels if backward else problem.in_channels,
            "dst_c": problem.in_channels if backward else problem.out_channels,
            "gc": config.merge * (kg if backward else cg), "gk": config.merge * (cg if backward else kg),
            "src_h": src[0], "src_w": src[1], "dst_h": dst[0], "dst_w": dst[1], "pad_h": pads[0], "pad_w": pads[1],
            "tile_w": tile_w, "images": images, "grid": grid}


class GwalkConvolution:
    """The gwalk template of one data direction (forward: X, W → Y; backward-data: dY, W → dX)."""

    families = frozenset({Family.GWALK})

    def __init__(self, direction: Direction):
        if direction is Direction.BACKWARD_WEIGHT:
            raise ValueError("direction: this template runs fwd and bwd_data (bwd_weight: gwalk_bwd_weight.py)")
        self.direction = direction

    def programs(self, config: KernelConfig) -> dict[str, Program]:
        backward = self.direction is Direction.BACKWARD_DATA
        ptr = pointer_type(config.dtype)
        main = Program(_gwalk_kernel,
                       {"BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "BLOCK_K": config.block_k,
                        "ROWS": config.group_m, "FLIP": backward, "HOLD": holds_weights(config)},
                       {"x_ptr": ptr, "p_ptr": ptr, "y_ptr": ptr, **{name: "i32" for name in _SIZE_PARAMS}},
                       config.num_warps, 1)
        return {"pack": gmerge_pack.pack_program(config, backward), "main": main}

    def workspace_elements(self, problem: ConvProblem, config: KernelConfig) -> int:
        """fp32 elements holding the packed operand (in the problem's dtype)."""
        return -(-gmerge_pack.packed_elements(problem, config) * problem.dtype.itemsize // 4)

    def plan(self, problem, config, first, second, out, workspace) -> list[Launch]:
        needed = self.workspace_elements(problem, config)
        if workspace is None or workspace.numel() < needed:
            raise ValueError(f"workspace: gwalk needs {needed} fp32 elements for the packed weights")
        pack, packed = gmerge_pack.pack_launch(problem, config, second, workspace)
        geo = walk_geometry(problem, config)
        sizes = (problem.batch, geo["src_c"], geo["dst_c"], geo["gc"], geo["gk"], geo["src_h"], geo["src_w"],
                 geo["dst_h"], geo["dst_w"], geo["pad_h"], geo["pad_w"], geo["tile_w"], geo["images"])
        return [pack, Launch("main", geo["grid"], (first, packed, out, *sizes))]
