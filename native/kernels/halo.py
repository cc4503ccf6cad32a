"""Grouped 3×3 convolution on tensor cores from shared-memory input rows (halo): stride 1 forward and
backward-data, stride 2 forward; 2D, bf16/fp16. A Gluon kernel (explicit shared memory, ``cp.async``, wgmma).

GEMM mapping, per program: rows ``m`` (GEMM M = ``BLOCK_M``): ``STREAMS = BLOCK_M / WP`` images × ``WP``
padded columns (``WP`` = the power of two ≥ ``out_w``, at most ``BLOCK_M``; columns past ``out_w`` are
computed and dropped); columns ``j`` (GEMM N = ``BLOCK_N`` ≥ MERGE·K/G): the
output channels of a block of ``MERGE`` groups; reduction per filter tap: the block's MERGE·C/G input
channels (``BLOCK_K`` ≥ that, zero padded), multiplied by a block-diagonal tap matrix built once per program
in shared memory, ``B_tap[r, j] = W[k0 + j, tap, r mod C/G]`` where ``r`` and ``j`` belong to the same group.

A program owns ``ROWS`` (= the config's ``group_m``) consecutive output rows of its streams. For each output
row ``j`` it copies (``cp.async``, zero fill outside the image) the one new input row its window needs, once
per column shift ``s`` = 0, 1, 2, into slot ``(row mod 4)`` of a ring of ``[BLOCK_M, BLOCK_K]`` tiles, and
runs the nine taps as wgmma with both operands in shared memory::

    Y[stream, oh0 + j, ow, k0 + n] = Σ_{fr, s} ring[s][(j + fr) mod 4] · B[fr·3 + s]

— per tap no address, mask or register traffic: every input row is read from global memory three times
(once per column shift) instead of nine (once per tap), and every per-row address is a per-program vector
plus one scalar. The next row's copies are in flight during the current row's wgmma chain, and the store of
row ``j − 1`` runs under row ``j``'s.

Dilation ``d`` (any, per axis): a program walks one residue class (``halo_tiling.py``), output rows
``r_h + d_h·(oh0 + j)`` and columns ``r_w + d_w·(ow0 + m mod WP)``; ring row ``q`` is input row
``r_h − p_h + d_h·(oh0 + q)`` and shift ``s`` reads ``s·d_w`` columns over — the same walk, the row and column
pitches multiplied by ``d``; a stream is the power of two ≥ the class's ``⌈out_w / d_w⌉`` columns wide.

Stride 2 (forward, dilation 1; the ``strided`` program, one per config whose ring fits in shared memory): ring row
``q`` is input row ``2·oh0 − p_h + q``, output row ``j`` reads ring rows ``2j + fr``, a stream's column ``m`` reads
input column ``2·(ow0 + m) − p_w + s``. A step adds two rows to the window, so the ring has five slots: rows
``2j + 5`` and ``2j + 6`` (the window of step ``j + 2``) are copied after step ``j``'s wgmma chain into the slots of
rows ``2j`` and ``2j + 1``, which the next window no longer reads — a whole step to land, as at stride 1. H200,
session 32 (``bench/results/2026-11-29_h200_s32/``, call 2): the dev suite's n32 g32 c256 56² stride-2 layer
(C/G 8) 24.7 µs against gmerge's 30.2 (the registry's best before) and cuDNN's 31.2.

Backward-data (stride 1) is the same walk over dY into dX: reduction over the block's MERGE·K/G output
channels, columns its MERGE·C/G input channels, tap ``t`` reading the forward's tap ``8 − t`` transposed
(``B_t[r, j] = W[c0 + r, 8 − t, j mod C/G]``), pads ``2·d − pad_begin``.

Why (H200, ``bench/results/2026-11-28_h200_s28/``, probe calls 3–5): on the dev suite's grouped 3×3 layers
with C/G 4–56 the registry's gmerge / gwalk kernels spend their issue slots on per-row addresses and masks
(session 16's SASS: 173 instructions per reduction step for 4 HGMMA); this kernel was 1.28–1.41× the
registry's best forward and 1.32–1.68× its best backward-data on those layers. It loses where the ring's
prologue dominates (7×7 images) and is for 3×3 filters only. Dilated (session 31, H200,
``bench/results/2026-11-28_h200_s31/``): the dev suite's n8 g8 c256 64² dilation-2 layer, forward 22.2 µs
(cuDNN 29.5; the registry's best before, igemm, 29.8 in call 1), backward-data 21.5 (cuDNN 27.4; igemm 34.9).
Two rows' wgmma chains in flight (row j's issued before row j − 1's wait; same call) ran 0.55–0.99× this walk
on every dev-suite layer (and wrote wrong rows on some backward-data problems): not kept. One allocation per
column shift (two ``bar.sync`` a row fewer) ran 0.96–1.04× the single ring, geomean 1.01 (call 3). Session 32
(``bench/results/2026-11-29_h200_s32/``, call 1, the dev suite's 16 halo layer-directions, every halo kernel): a
second binary with dilation 1 compiled in (no residue arithmetic, unit pitches) ran 0.89–1.06× this walk, geomean
0.98 of the layers' best; six ring slots (rows three steps ahead, where shared memory allows) 0.81–1.16×, geomean
0.96 — faster only on the batch-1 layer (1.06–1.16×: 112 programs, one an SM, where the deeper prefetch costs no
occupancy). Neither kept.

Gluon kernels do not run under Triton's CPU interpreter: CI compiles them for sm_90 (the ``tiny`` rule set)
and checks the walk's index arithmetic by :func:`emulate` (NumPy, the same ring, streams, shifts and
block-diagonal taps) against the float64 reference; the GPU tests run the kernels.
"""

from __future__ import annotations

from typing import Any

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait

from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.kernels.base import Launch, Program, pointer_type
from tiledispatch.native.kernels.halo_tiling import halo_geometry, strided_fits
from tiledispatch.native.problem import ConvProblem, Direction

_SIZE_PARAMS = ("BATCH", "H", "W", "C_TOTAL", "K_TOTAL", "OH", "OW", "PAD_H", "PAD_W", "DIL_H", "DIL_W", "RG", "OG",
                "WP", "ROW_CHUNKS", "COL_BLOCKS")


@gluon.jit
def _slot(rings, shift: gl.constexpr, q, RING: gl.constexpr):
    """Ring slot ``q mod RING`` of column shift ``shift`` (a shared allocation per shift: Triton's barrier analysis
    sees a dynamic slot of one allocation as all of it, and put a ``bar.sync`` between the shifts' copies)."""
    return rings[shift].index(q % RING)


@gluon.jit
def _issue_row(rings, x_ptr, pixel_base, image_ok, iw, chan_ok, q, ih0, H, W, C_TOTAL, DIL_H, DIL_W, ROW_LIMIT,
               RING: gl.constexpr):
    """cp.async input row ``ih0 + q·d_h`` of every stream, once per column shift (``d_w`` columns apart), into
    ring slot ``q mod RING`` (zeros where the row, column or channel is outside the tensor, or the row is past the
    chunk's window)."""
    ih = ih0 + q * DIL_H
    row_ok = (ih >= 0) & (ih < H) & (q < ROW_LIMIT)
    row_offset = ih.to(gl.int64) * W * C_TOTAL
    for shift in gl.static_range(3):
        col_ok = image_ok & (iw + shift * DIL_W >= 0) & (iw + shift * DIL_W < W)
        async_copy.async_copy_global_to_shared(_slot(rings, shift, q, RING),
                                               x_ptr + (pixel_base + shift * DIL_W * C_TOTAL + row_offset),
                                               col_ok[:, None] & chan_ok & row_ok)


@gluon.jit
def _halo_kernel(
    x_ptr, w_ptr, y_ptr,
    BATCH, H, W, C_TOTAL, K_TOTAL, OH, OW, PAD_H, PAD_W, DIL_H, DIL_W, RG, OG, WP, ROW_CHUNKS, COL_BLOCKS,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, MERGE: gl.constexpr,
    ROWS: gl.constexpr, BACKWARD_DATA: gl.constexpr, STRIDE: gl.constexpr, num_warps: gl.constexpr,
):
    """X: the walked tensor (forward X, backward-data dY) [BATCH, H, W, C_TOTAL]; Y: the written one
    [BATCH, OH, OW, K_TOTAL]; RG / OG: its reduction / output channels per group; W: GKYXC."""
    # Multiples of 8 (the support check guarantees it), written so that the compiler can prove every channel
    # run 16-byte aligned for the cp.async copies and the stores.
    C_TOTAL = (C_TOTAL // 8) * 8
    K_TOTAL = (K_TOTAL // 8) * 8
    BLOCK_RG = (MERGE * RG // 8) * 8
    BLOCK_OG = (MERGE * OG // 8) * 8
    dtype: gl.constexpr = x_ptr.dtype.element_ty

    # The program's residue class (r_h, r_w) and its sub-grid origin (oh0, ow0): it writes output rows
    # r_h + d_h·(oh0 + j) and columns r_w + d_w·(ow0 + m mod WP) (halo_tiling.py).
    pid = gl.program_id(0)
    col_block = pid % COL_BLOCKS
    rest = pid // COL_BLOCKS
    row_chunk = rest % ROW_CHUNKS
    image0 = (rest // ROW_CHUNKS) * (BLOCK_M // WP)
    res_h = row_chunk % DIL_H
    res_w = col_block % DIL_W
    oh0 = (row_chunk // DIL_H) * ROWS
    ow0 = (col_block // DIL_W) * WP
    c0 = gl.program_id(1) * BLOCK_RG
    k0 = gl.program_id(1) * BLOCK_OG

    # Row m of every A tile: stream m // WP (image image0 + m // WP), padded column m % WP.
    load_layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 // (BLOCK_K // 8), BLOCK_K // 8], [num_warps, 1],
                                                 [1, 0])
    m_in = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, load_layout))
    chans = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(0, load_layout))
    image_in = image0 + m_in // WP
    iw = res_w - PAD_W + (ow0 + m_in % WP) * (DIL_W * STRIDE)
    pixel_base = ((image_in.to(gl.int64) * H * W + iw) * C_TOTAL)[:, None] + (c0 + chans)[None, :]
    chan_ok = (chans < BLOCK_RG)[None, :]
    image_ok = image_in < BATCH
    ih0 = res_h - PAD_H + oh0 * (DIL_H * STRIDE)
    row_limit = STRIDE * (ROWS - 1) + 3  # the input rows the chunk's windows cover
    RING: gl.constexpr = 4 if STRIDE == 1 else 5

    # Input rows: RING slots of each of the 3 column shifts, each a [BLOCK_M, BLOCK_K] wgmma A operand.
    a_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_K], dtype)
    rings = (gl.allocate_shared_memory(dtype, [RING, BLOCK_M, BLOCK_K], a_layout),
             gl.allocate_shared_memory(dtype, [RING, BLOCK_M, BLOCK_K], a_layout),
             gl.allocate_shared_memory(dtype, [RING, BLOCK_M, BLOCK_K], a_layout))
    # The first window (rows 0-2) in one copy group; stride 2: the second window's two new rows in the next.
    for q in gl.static_range(3):
        _issue_row(rings, x_ptr, pixel_base, image_ok, iw, chan_ok, q, ih0, H, W, C_TOTAL, DIL_H, DIL_W, row_limit,
                   RING)
    async_copy.commit_group()
    if STRIDE == 2:
        for q in gl.static_range(3, 5):
            _issue_row(rings, x_ptr, pixel_base, image_ok, iw, chan_ok, q, ih0, H, W, C_TOTAL, DIL_H, DIL_W,
                       row_limit, RING)
        async_copy.commit_group()

    # The nine tap matrices, block diagonal over the merged groups, zero padded to BLOCK_K x BLOCK_N.
    b_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_K, BLOCK_N], dtype)
    taps = gl.allocate_shared_memory(dtype, [9, BLOCK_K, BLOCK_N], b_layout)
    w_layout: gl.constexpr = gl.BlockedLayout([1, 1], [4, 8], [num_warps, 1], [1, 0])
    red = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(1, w_layout))
    col = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, w_layout))
    w_ok = (((red // RG)[:, None] == (col // OG)[None, :]) & (red < BLOCK_RG)[:, None]
            & (col < BLOCK_OG)[None, :])
    if BACKWARD_DATA:
        w_offsets = (c0 + red)[:, None] * (9 * OG) + (col % OG)[None, :]
        for tap in gl.static_range(9):
            taps.index(tap).store(gl.load(w_ptr + w_offsets + (8 - tap) * OG, mask=w_ok, other=0.0))
    else:
        w_offsets = (k0 + col)[None, :] * (9 * RG) + (red % RG)[:, None]
        for tap in gl.static_range(9):
            taps.index(tap).store(gl.load(w_ptr + w_offsets + tap * RG, mask=w_ok, other=0.0))

    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                          instr_shape=[16, BLOCK_N, 16])
    out_layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 // (BLOCK_N // 8), BLOCK_N // 8], [num_warps, 1],
                                                [1, 0])
    m_out = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, out_layout))
    n_out = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, out_layout))
    image_out = image0 + m_out // WP
    ow = res_w + (ow0 + m_out % WP) * DIL_W
    out_base = ((image_out.to(gl.int64) * OH * OW + ow) * K_TOTAL)[:, None] + (k0 + n_out)[None, :]
    out_ok = ((image_out < BATCH) & (ow < OW))[:, None] & (n_out < BLOCK_OG)[None, :]

    row_pitch = DIL_H.to(gl.int64) * OW * K_TOTAL  # between the rows a walk writes
    y_rows = y_ptr + (out_base + (res_h + oh0 * DIL_H).to(gl.int64) * OW * K_TOTAL)
    previous = gl.zeros([BLOCK_M, BLOCK_N], dtype, layout=out_layout)
    for j in range(ROWS):
        if STRIDE == 1:
            # Prefetch the row step j + 1 adds to its window; its slot held the row step j - 1 finished with.
            _issue_row(rings, x_ptr, pixel_base, image_ok, iw, chan_ok, j + 3, ih0, H, W, C_TOTAL, DIL_H, DIL_W,
                       row_limit, RING)
            async_copy.commit_group()
        # Every copy group but the newest has landed: this step's window.
        async_copy.wait_group(1)
        gl.thread_barrier()
        fence_async_shared()
        acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=mma_layout)
        for tap in gl.static_range(9):
            acc = warpgroup_mma(_slot(rings, tap % 3, STRIDE * j + tap // 3, RING), taps.index(tap), acc,
                                is_async=True)
        # Row j - 1's result goes out while row j's wgmma chain runs.
        oh_prev = res_h + (oh0 + j - 1) * DIL_H
        gl.store(y_rows + (j - 1) * row_pitch, previous, mask=out_ok & (oh_prev < OH) & (j > 0))
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        if STRIDE == 2:
            # Rows 2j and 2j + 1 are done with (the next window starts at 2j + 2): their slots take the two
            # rows step j + 2 adds, 2j + 5 and 2j + 6 — a whole step to land, as at stride 1.
            for extra in gl.static_range(5, 7):
                _issue_row(rings, x_ptr, pixel_base, image_ok, iw, chan_ok, 2 * j + extra, ih0, H, W, C_TOTAL,
                           DIL_H, DIL_W, row_limit, RING)
            async_copy.commit_group()
        previous = gl.convert_layout(acc.to(dtype), out_layout)
    oh_last = res_h + (oh0 + ROWS - 1) * DIL_H
    gl.store(y_rows + (ROWS - 1) * row_pitch, previous, mask=out_ok & (oh_last < OH))
    async_copy.wait_group(0)


class HaloConvolution:
    """The halo template of one data direction (forward: X, W → Y; backward-data: dY, W → dX)."""

    families = frozenset({Family.HALO})

    def __init__(self, direction: Direction):
        if direction is Direction.BACKWARD_WEIGHT:
            raise ValueError("direction: the halo template runs fwd and bwd_data")
        self.direction = direction

    def programs(self, config: KernelConfig) -> dict[str, Program]:
        """``main``: the stride-1 walk (any dilation); ``strided`` (forward, where its ring fits in shared memory:
        :func:`~tiledispatch.native.kernels.halo_tiling.strided_fits`): the stride-2 walk."""
        ptr = pointer_type(config.dtype)
        types = {"x_ptr": ptr, "w_ptr": ptr, "y_ptr": ptr, **{name: "i32" for name in _SIZE_PARAMS}}
        constexprs = {"BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "BLOCK_K": config.block_k,
                      "MERGE": config.merge, "ROWS": config.group_m,
                      "BACKWARD_DATA": self.direction is Direction.BACKWARD_DATA, "num_warps": config.num_warps}
        strides = (1, 2) if self.direction is Direction.FORWARD and strided_fits(config) else (1,)
        return {"main" if stride == 1 else "strided": Program(_halo_kernel, {**constexprs, "STRIDE": stride}, types,
                                                               config.num_warps, 1)
                for stride in strides}

    def workspace_elements(self, problem: ConvProblem, config: KernelConfig) -> int:
        return 0

    def plan(self, problem, config, first, second, out, workspace) -> list[Launch]:
        geo = halo_geometry(problem, config)
        sizes = (problem.batch, geo["src_h"], geo["src_w"], geo["src_c"], geo["dst_c"], geo["dst_h"], geo["dst_w"],
                 geo["pad_h"], geo["pad_w"], geo["dil_h"], geo["dil_w"], geo["rg"], geo["og"], geo["wp"],
                 geo["row_chunks"], geo["col_blocks"])
        return [Launch("main" if geo["stride"] == 1 else "strided", geo["grid"], (first, second, out, *sizes))]


def emulate(problem: ConvProblem, config: KernelConfig, first: Any, weight: Any) -> Any:
    """The kernel's walk in NumPy (float64): the same programs, streams, padded columns, ring slots, column
    shifts and block-diagonal taps, so CI checks its index arithmetic without a GPU. ``first``: X (forward) or
    dY (backward-data) in NHWGC; ``weight``: GKYXC. Returns the written tensor (Y or dX) as [N, H, W, G·C]."""
    import numpy as np

    geo = halo_geometry(problem, config)
    x = np.asarray(first, dtype=np.float64).reshape(problem.batch, geo["src_h"], geo["src_w"], geo["src_c"])
    w = np.asarray(weight, dtype=np.float64).reshape(-1, 9, problem.c_per_group)
    backward = problem.direction is Direction.BACKWARD_DATA
    rg, og, wp, rows = geo["rg"], geo["og"], geo["wp"], config.group_m
    block_rg, block_og = config.merge * rg, config.merge * og
    y = np.full((problem.batch, geo["dst_h"], geo["dst_w"], geo["dst_c"]), np.nan)
    m = np.arange(config.block_m)
    red = np.arange(config.block_k)
    col = np.arange(config.block_n)
    same_group = ((red // rg)[:, None] == (col // og)[None, :]) & (red < block_rg)[:, None] & (col < block_og)[None, :]
    dil_h, dil_w, stride, ring_size = geo["dil_h"], geo["dil_w"], geo["stride"], geo["ring"]
    for pid in range(geo["grid"][0]):
        col_block, rest = pid % geo["col_blocks"], pid // geo["col_blocks"]
        row_chunk, image0 = rest % geo["row_chunks"], (rest // geo["row_chunks"]) * (config.block_m // wp)
        res_h, res_w = row_chunk % dil_h, col_block % dil_w
        oh0, ow0 = (row_chunk // dil_h) * rows, (col_block // dil_w) * wp
        image, iw = image0 + m // wp, res_w - geo["pad_w"] + (ow0 + m % wp) * dil_w * stride
        for block in range(geo["grid"][1]):
            c0, k0 = block * block_rg, block * block_og
            taps = np.zeros((9, config.block_k, config.block_n))
            for tap in range(9):
                if backward:
                    values = w[np.clip(c0 + red, 0, len(w) - 1)][:, 8 - tap][:, col % og]
                else:
                    values = w[np.clip(k0 + col, 0, len(w) - 1)][:, tap][:, red % rg].T
                taps[tap] = np.where(same_group, values, 0.0)
            ring = np.zeros((3, ring_size, config.block_m, config.block_k))

            def issue(q, ring=ring, image=image, iw=iw, oh0=oh0, c0=c0, res_h=res_h):
                ih = res_h - geo["pad_h"] + (oh0 * stride + q) * dil_h
                for shift in range(3):
                    tile = np.zeros((config.block_m, config.block_k))
                    columns = iw + shift * dil_w
                    if 0 <= ih < geo["src_h"] and q < geo["rows_read"]:
                        ok = (image < problem.batch) & (columns >= 0) & (columns < geo["src_w"])
                        chans = red < block_rg
                        rows_ok = np.flatnonzero(ok)
                        tile[np.ix_(rows_ok, np.flatnonzero(chans))] = x[image[rows_ok], ih][
                            np.arange(len(rows_ok)), columns[rows_ok]][:, c0 + red[chans]]
                    ring[shift, q % ring_size] = tile
            # The kernel's copy schedule: stride 1 issues row j + 3 before step j's taps, stride 2 rows 2j + 5 and
            # 2j + 6 after them (into the slots of rows 2j and 2j + 1).
            for q in range(3 if stride == 1 else 5):
                issue(q)
            for j in range(rows):
                if stride == 1:
                    issue(j + 3)
                acc = sum(ring[tap % 3, (stride * j + tap // 3) % ring_size] @ taps[tap] for tap in range(9))
                if stride == 2:
                    issue(2 * j + 5)
                    issue(2 * j + 6)
                oh = res_h + (oh0 + j) * dil_h
                ow = res_w + (ow0 + m % wp) * dil_w
                keep = (image < problem.batch) & (ow < geo["dst_w"])
                if oh < geo["dst_h"]:
                    for row in np.flatnonzero(keep):
                        y[image[row], oh, ow[row], k0:k0 + block_og] = acc[row, :block_og]
    return y
